package approver_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/toolgate/toolgate/internal/approver"
	"github.com/toolgate/toolgate/internal/bus/bustest"
)

// The notifier posts each approval request to the webhook as Slack-style
// JSON linking to the request's inbox card, and decides nothing: the
// request is escalated, no decision is published. A webhook that fails
// hands the request back, and it is posted again.
func TestNotifierPostsEachRequestToTheWebhook(t *testing.T) {
	t.Parallel()
	var (
		mu    sync.Mutex
		posts []approver.NotifyMessage
		fails = 1
	)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		if r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("content type %q", r.Header.Get("Content-Type"))
		}
		if fails > 0 {
			fails--
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		var m approver.NotifyMessage
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Errorf("posted %q: %v", raw, err)
		}
		posts = append(posts, m)
	}))
	t.Cleanup(hook.Close)
	b := bustest.NewBus(t)
	done := runApprover(t, approver.Config{Bus: b, ID: "notifier",
		Decider: &approver.Notifier{Webhook: hook.URL, InboxURL: "https://inbox.example/"}})
	publish(t, b, approvalRequest(t, "run-1", "call-1", "delete_file", `{"path":"a.txt"}`))
	h := bustest.Recv(t, done, "the request handled")
	if h.outcome != approver.OutcomeEscalated {
		t.Errorf("outcome %s, want escalated", h.outcome)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(posts) != 1 {
		t.Fatalf("%d posts, want 1 (after the failed one)", len(posts))
	}
	m := posts[0]
	const link = "https://inbox.example/#call-run-1/call-1"
	if !strings.Contains(m.Text, "delete_file") || !strings.Contains(m.Text, `{"path":"a.txt"}`) || !strings.Contains(m.Text, link) {
		t.Errorf("text %q", m.Text)
	}
	raw, _ := json.Marshal(m.Blocks)
	if !strings.Contains(string(raw), `"url":"`+link+`"`) || !strings.Contains(string(raw), `"type":"mrkdwn"`) {
		t.Errorf("blocks %s", raw)
	}
	if d := bustest.Decisions(t, b, "run-1"); len(d) != 0 {
		t.Errorf("decisions published: %+v", d)
	}
}

// With AllRequests, the notifier posts a request whose approvers do not
// name its own id, saying whom it is for, and decides nothing. Before, a
// notifier left such requests unposted: only the tool's approvers' bots
// saw them.
func TestNotifierPostsRequestsForOthers(t *testing.T) {
	t.Parallel()
	var (
		mu    sync.Mutex
		posts []approver.NotifyMessage
	)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m approver.NotifyMessage
		if err := json.NewDecoder(r.Body).Decode(&m); err != nil {
			t.Errorf("posted: %v", err)
		}
		mu.Lock()
		defer mu.Unlock()
		posts = append(posts, m)
	}))
	t.Cleanup(hook.Close)
	b := bustest.NewBus(t)
	done := runApprover(t, approver.Config{Bus: b, ID: "notifier", AllRequests: true,
		Decider: &approver.Notifier{Webhook: hook.URL}})
	req := approvalRequest(t, "run-1", "call-1", "deploy", `{"service":"web"}`)
	req.Approvers = []string{"ann", "bob"}
	publish(t, b, req)
	if h := bustest.Recv(t, done, "the request handled"); h.outcome != approver.OutcomeEscalated {
		t.Errorf("outcome %s, want escalated", h.outcome)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(posts) != 1 || !strings.Contains(posts[0].Text, "for ann, bob") {
		t.Fatalf("posts %+v, want one for ann and bob", posts)
	}
	if d := bustest.Decisions(t, b, "run-1"); len(d) != 0 {
		t.Errorf("decisions published: %+v", d)
	}
}

// A policy bot run with AllRequests sends no verdict on a request its
// approvers do not name it for.
func TestAllRequestsSendsNoDecisionOnOthersCalls(t *testing.T) {
	t.Parallel()
	b := bustest.NewBus(t)
	pol, err := approver.ParsePolicy([]byte("rules:\n  - action: approve\n"))
	if err != nil {
		t.Fatal(err)
	}
	done := runApprover(t, approver.Config{Bus: b, ID: "bot", AllRequests: true, Policy: pol})
	req := approvalRequest(t, "run-1", "call-1", "deploy", `{}`)
	req.Approvers = []string{"ann"}
	publish(t, b, req)
	if h := bustest.Recv(t, done, "the request handled"); h.outcome != approver.OutcomeEscalated {
		t.Errorf("outcome %s, want escalated", h.outcome)
	}
	if d := bustest.Decisions(t, b, "run-1"); len(d) != 0 {
		t.Errorf("decisions published: %+v", d)
	}
}
