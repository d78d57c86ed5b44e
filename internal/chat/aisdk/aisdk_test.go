package aisdk_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/api"
	"github.com/toolgate/toolgate/internal/chat/aisdk"
	"github.com/toolgate/toolgate/internal/chat/chattest"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/testkit"
)

// The protocol's HTTP side, which the library does not check: the stream's
// headers and its [DONE] end, a body that is no request refused with 400,
// and requests refused with the error chunk alone.
func TestAISDKHTTP(t *testing.T) {
	t.Parallel()
	sys := testkit.Test(t, testkit.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	o := chattest.Orchestrator(ctx, t, sys, chattest.Agent(t, chattest.FilesAgent, map[string]string{"script.yaml": chattest.FilesScript}))
	h := aisdk.Handler(o, aisdk.Config{})
	srv := httptest.NewServer(api.Handler(o, api.Config{Routes: map[string]http.Handler{"POST /v1/ai-sdk/chat": h, "GET /v1/ai-sdk/chat/{id}/stream": h}}))
	t.Cleanup(srv.Close)
	post := func(t *testing.T, body string) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/ai-sdk/chat", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, string(raw)
	}
	const user = `{"id":"u1","role":"user","parts":[{"type":"text","text":"Delete b.txt"}]}`
	resp, body := post(t, `{"id":"h","trigger":"submit-message","messages":[`+user+`]}`)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Vercel-Ai-Ui-Message-Stream") != "v1" ||
		resp.Header.Get("Content-Type") != "text/event-stream" || !strings.HasSuffix(body, "data: [DONE]\n\n") {
		t.Fatalf("%d %v\n%s", resp.StatusCode, resp.Header, body)
	}
	if !strings.Contains(body, `"type":"tool-approval-request"`) {
		t.Errorf("no approval requested:\n%s", body)
	}
	for _, tc := range []struct {
		name, body string
		status     int
		want       string
	}{
		{name: "no JSON", body: `{"id":`, status: http.StatusBadRequest, want: "body: want the chat's request"},
		{name: "no id", body: `{"messages":[` + user + `]}`, status: http.StatusOK, want: `"errorText":"invalid_chat: id: required"`},
		{name: "regenerate", body: `{"id":"h","trigger":"regenerate-message","messageId":"x","messages":[` + user + `]}`, status: http.StatusOK, want: `"errorText":"unsupported_trigger: `},
		{name: "new chat without a user message", body: `{"id":"new","messages":[]}`, status: http.StatusOK, want: `"errorText":"no_input: `},
		{name: "a reasoning part", body: `{"id":"h","messages":[` + user + `,{"id":"a","role":"assistant","parts":[{"type":"reasoning","text":"x"}]}]}`, status: http.StatusOK, want: `"errorText":"history_refused: `},
		{name: "approvals unanswered", body: `{"id":"h","messages":[` + user + `,{"id":"u2","role":"user","parts":[{"type":"text","text":"and more"}]}]}`, status: http.StatusOK, want: `"errorText":"approval_required: `},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := post(t, tc.body)
			if resp.StatusCode != tc.status || !strings.Contains(body, tc.want) {
				t.Fatalf("%d %s, want %d with %s", resp.StatusCode, body, tc.status, tc.want)
			}
			if tc.status == http.StatusOK && strings.Count(body, "data: ") != 2 {
				t.Errorf("want the error chunk and [DONE] alone:\n%s", body)
			}
		})
	}
	c, err := o.Conversation(ctx, aisdk.ConversationID("h"))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Runs) != 1 || c.Status != conversation.StatusPaused {
		t.Errorf("chat h after refused requests: %s with %d runs", c.Status, len(c.Runs))
	}
	// A chat without a run has no stream to resume.
	if resp, err := http.Get(srv.URL + "/v1/ai-sdk/chat/nothing/stream"); err != nil || resp.StatusCode != http.StatusNoContent {
		t.Errorf("resume of an unknown chat: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	// A cancelled conversation's stream ends with the abort chunk.
	if _, err := o.Cancel(ctx, c.ID); err != nil {
		t.Fatal(err)
	}
	if _, body := post(t, `{"id":"h","messages":[`+user+`]}`); !strings.Contains(body, `"type":"abort"`) || !strings.HasSuffix(body, "data: [DONE]\n\n") {
		t.Errorf("after the cancel:\n%s", body)
	}
}
