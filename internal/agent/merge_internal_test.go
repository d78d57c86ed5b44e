package agent

import (
	"context"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestMergeRequests(t *testing.T) {
	t.Parallel()
	prompt := func(s string) Part { return Part{Kind: PartUserPrompt, Content: s} }
	ret := func(id string) Part { return Part{Kind: PartToolReturn, ToolCallID: id} }
	call := func(id string) Part { return Part{Kind: PartToolCall, ToolCallID: id} }
	req := func(ps ...Part) Message { return Message{Kind: KindRequest, Parts: ps} }
	resp := func(ps ...Part) Message { return Message{Kind: KindResponse, Parts: ps} }
	for _, tc := range []struct {
		name string
		in   []Message
		want []Message
		// shared: nothing to merge, so the history itself is handed over.
		shared bool
	}{
		{name: "empty", in: nil, want: nil, shared: true},
		{
			name:   "alternating",
			in:     []Message{req(prompt("a")), resp(call("1")), req(ret("1")), resp(call("2")), req(ret("2"), prompt("b"))},
			want:   []Message{req(prompt("a")), resp(call("1")), req(ret("1")), resp(call("2")), req(ret("2"), prompt("b"))},
			shared: true,
		},
		{
			name: "a resume's results after a paused run's partial ones",
			in:   []Message{req(prompt("a")), resp(call("1"), call("2")), req(ret("1")), req(ret("2"), prompt("b"))},
			want: []Message{req(prompt("a")), resp(call("1"), call("2")), req(ret("1"), ret("2"), prompt("b"))},
		},
		{
			name: "tool returns first, then the rest, each in order",
			in:   []Message{resp(call("1"), call("2")), req(prompt("x"), ret("1")), req(prompt("y"), ret("2"))},
			want: []Message{resp(call("1"), call("2")), req(ret("1"), ret("2"), prompt("x"), prompt("y"))},
		},
		{
			name: "a single request out of order",
			in:   []Message{resp(call("1")), req(prompt("x"), ret("1")), resp()},
			want: []Message{resp(call("1")), req(ret("1"), prompt("x")), resp()},
		},
		{
			name: "merged at the end only",
			in:   []Message{req(prompt("a")), resp(call("1")), req(ret("1")), resp(call("2")), req(ret("2")), req(prompt("b"))},
			want: []Message{req(prompt("a")), resp(call("1")), req(ret("1")), resp(call("2")), req(ret("2"), prompt("b"))},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := cloneMessages(tc.in)
			got := mergeRequests(tc.in)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("merged (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(before, tc.in); diff != "" {
				t.Errorf("the history changed (-before +after):\n%s", diff)
			}
			if len(got) > 0 {
				if s := &got[0] == &tc.in[0]; s != tc.shared {
					t.Errorf("shares the history's array: %v, want %v", s, tc.shared)
				}
				if tc.shared && cap(got) != len(got) {
					t.Errorf("cap %d > len %d: a model appending to its messages would write into the history", cap(got), len(got))
				}
			}
		})
	}
}

func cloneMessages(ms []Message) []Message {
	if ms == nil {
		return nil
	}
	out := make([]Message, len(ms))
	for i, m := range ms {
		m.Parts = append([]Part(nil), m.Parts...)
		out[i] = m
	}
	return out
}

// A run given HistoryRoom appends into the history's array instead of
// copying it, and leaves the room past its messages for the next run once
// the history is long enough; a run without it copies.
func TestHistoryRoom(t *testing.T) {
	t.Parallel()
	model := FunctionModel("text", func(context.Context, ModelRequest) (ModelResponse, error) {
		return ModelResponse{Parts: []Part{{Kind: PartText, Content: "ok"}}}, nil
	})
	a, err := New(Config{Model: model})
	if err != nil {
		t.Fatal(err)
	}
	history := func(n int) []Message {
		h := make([]Message, 0, n+16)
		for i := range n {
			kind := KindRequest
			if i%2 == 1 {
				kind = KindResponse
			}
			h = append(h, Message{Kind: kind, Parts: []Part{{Kind: PartText, Content: "m"}}})
		}
		return h
	}
	run := func(h []Message, room bool) *RunResult {
		t.Helper()
		res, err := a.Run(context.Background(), RunInput{History: h, HistoryRoom: room, Prompt: "go on"})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.AllMessages) != len(h)+2 {
			t.Fatalf("%d messages, want %d", len(res.AllMessages), len(h)+2)
		}
		return res
	}
	h := history(HistoryRoomMin)
	if res := run(h, true); &res.AllMessages[0] != &h[0] || cap(res.AllMessages) == len(res.AllMessages) {
		t.Error("with room: the history was copied, or its room not left for the next run")
	}
	h = history(HistoryRoomMin)
	if res := run(slices.Clip(h), false); &res.AllMessages[0] == &h[0] {
		t.Error("without room: the run wrote into the caller's array")
	} else if h[:cap(h)][len(h)].Kind != "" {
		t.Error("without room: a message was written past the history's length")
	}
	if res := run(history(4), true); cap(res.AllMessages) != len(res.AllMessages) {
		t.Errorf("a short history kept room: cap %d, len %d", cap(res.AllMessages), len(res.AllMessages))
	}
}
