package openai

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/toolgate/toolgate/internal/agent"
)

// ErrTruncated is matched (errors.Is) by the error of a stream that ended
// before the server gave a finish reason, e.g. a dropped connection or a
// proxy that cut the response.
var ErrTruncated = errors.New("stream ended without a finish reason")

// stream makes one attempt; raw receives its HTTP response, if one came.
func (m *Model) stream(ctx context.Context, params oai.ChatCompletionNewParams, onDelta func(string), raw **http.Response) (agent.ModelResponse, error) {
	s := m.chat.NewStreaming(ctx, params, option.WithResponseInto(raw))
	defer s.Close()

	var (
		acc          streamAcc
		text         strings.Builder
		finishReason string
		resp         agent.ModelResponse
	)
	for s.Next() {
		chunk := s.Current()
		if chunk.Model != "" {
			resp.ModelName = chunk.Model
		}
		if chunk.JSON.Usage.Valid() {
			resp.Usage = agent.Usage{InputTokens: chunk.Usage.PromptTokens, OutputTokens: chunk.Usage.CompletionTokens}
		}
		for _, choice := range chunk.Choices {
			// Only one completion is asked for; a server that sends others
			// anyway must not mix them into the first.
			if choice.Index != 0 {
				continue
			}
			delta := choice.Delta.Content
			if delta == "" {
				delta = choice.Delta.Refusal
			}
			if delta != "" {
				text.WriteString(delta)
				if onDelta != nil {
					onDelta(delta)
				}
			}
			for _, tc := range choice.Delta.ToolCalls {
				acc.add(tc.Index, tc.ID, tc.Function.Name, tc.Function.Arguments)
			}
			if choice.FinishReason != "" {
				finishReason = choice.FinishReason
			}
		}
	}
	if err := s.Err(); err != nil {
		return agent.ModelResponse{}, fmt.Errorf("chat completion stream: %w", m.apiError(err, *raw))
	}
	if finishReason == "" {
		return agent.ModelResponse{}, fmt.Errorf("chat completion stream: %w", ErrTruncated)
	}
	m.noteFinish(finishReason)
	resp.Parts = parts(text.String(), acc.calls)
	return resp, nil
}

// streamAcc joins tool-call fragments. The id and name come with a call's
// first fragment, the arguments in pieces after it, all tagged with the
// call's index.
type streamAcc struct {
	calls []toolCall
	index []int64 // index[i] is the stream index of calls[i]
}

func (a *streamAcc) add(index int64, id, name, args string) {
	i := a.find(index)
	// A fragment with a new id for an index already seen starts another
	// call: some servers send every call whole with the same index.
	if i < 0 || (id != "" && a.calls[i].id != "" && id != a.calls[i].id) {
		a.calls = append(a.calls, toolCall{})
		a.index = append(a.index, index)
		i = len(a.calls) - 1
	}
	c := &a.calls[i]
	if c.id == "" {
		c.id = id
	}
	// Most servers send the name once; some repeat it whole in every
	// fragment, a few send it in pieces.
	if name != c.name {
		c.name += name
	}
	c.args += args
}

// find returns the latest call with that index, or -1.
func (a *streamAcc) find(index int64) int {
	for i := len(a.index) - 1; i >= 0; i-- {
		if a.index[i] == index {
			return i
		}
	}
	return -1
}
