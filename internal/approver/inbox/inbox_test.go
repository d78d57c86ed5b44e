package inbox_test

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/internal/approver"
	"github.com/toolgate/toolgate/internal/approver/inbox"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/client"
	"github.com/toolgate/toolgate/wire"
)

func TestListShowsPendingRequests(t *testing.T) {
	t.Parallel()
	b := bustest.NewBus(t)
	in, _ := startInbox(t, inbox.Config{Bus: b})
	h := in.Handler()
	deadline := time.Now().Add(time.Hour)
	publish(t, b, request(t, "run-1", "call-1", `{"path":"a.txt"}`, deadline),
		request(t, "run-2", "call-1", `{"path":"b.txt","force":true}`, deadline))
	bustest.WaitFor(t, "two pending", func() bool { return len(in.Pending()) == 2 })

	rec := do(t, h, http.MethodGet, "/api/pending", "", nil)
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /api/pending: %d %s", rec.Code, rec.Body)
	}
	var got struct {
		Pending []inbox.Item `json:"pending"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	type row struct{ Key, Tool, Conv, Reason, Args string }
	var rows []row
	for _, it := range got.Pending {
		rows = append(rows, row{it.Key, it.ToolName, it.ConversationID, it.Reason, it.ArgsText})
	}
	want := []row{
		{"run-1/call-1", "delete_file", "conv-run-1", "deleting files needs a human", "{\n  \"path\": \"a.txt\"\n}"},
		{"run-2/call-1", "delete_file", "conv-run-2", "deleting files needs a human", "{\n  \"force\": true,\n  \"path\": \"b.txt\"\n}"},
	}
	if diff := cmp.Diff(want, rows); diff != "" {
		t.Errorf("pending (-want +got):\n%s", diff)
	}

	page := do(t, h, http.MethodGet, "/", "", nil)
	if page.Code != http.StatusOK || !strings.Contains(page.Body.String(), `data-key="run-2/call-1"`) ||
		!strings.Contains(page.Body.String(), "deleting files needs a human") {
		t.Errorf("GET / = %d, without the requests:\n%s", page.Code, page.Body)
	}
}

func TestApproveAndDenyPublishSignedDecisions(t *testing.T) {
	t.Parallel()
	b := bustest.NewBus(t)
	key := newKey(t)
	in, _ := startInbox(t, inbox.Config{Bus: b, ID: "alice", Key: key})
	h := in.Handler()
	r1 := request(t, "run-1", "call-1", `{"path":"a.txt"}`, time.Now().Add(time.Hour))
	r2 := request(t, "run-2", "call-9", `{"path":"b.txt"}`, time.Now().Add(time.Hour))
	publish(t, b, r1, r2)
	bustest.WaitFor(t, "two pending", func() bool { return len(in.Pending()) == 2 })

	tests := []struct {
		name string
		req  wire.ApprovalRequest
		body string
		want wire.Decision
	}{
		{"approve", r1, `{"run_id":"run-1","tool_call_id":"call-1","approve":true}`,
			wire.Decision{RunID: "run-1", ToolCallID: "call-1", ArgsDigest: r1.ArgsDigest, Approved: true, ApproverID: "alice"}},
		{"deny", r2, `{"run_id":"run-2","tool_call_id":"call-9","approve":false,"message":"  not that file  "}`,
			wire.Decision{RunID: "run-2", ToolCallID: "call-9", ArgsDigest: r2.ArgsDigest, Message: "not that file", ApproverID: "alice"}},
	}
	for _, tt := range tests {
		rec := do(t, h, http.MethodPost, "/api/decide", tt.body, nil)
		if rec.Code != http.StatusOK {
			t.Fatalf("%s: POST /api/decide = %d %s", tt.name, rec.Code, rec.Body)
		}
		got := waitDecision(t, b, tt.req.RunID)
		if err := approver.Verify(key.Public().(ed25519.PublicKey), got); err != nil {
			t.Errorf("%s: %v", tt.name, err)
		}
		if _, off := got.DecidedAt.Zone(); off != 0 || time.Since(got.DecidedAt).Abs() > time.Minute {
			t.Errorf("%s: decided_at = %v, want now in UTC", tt.name, got.DecidedAt)
		}
		got.Signature, got.DecidedAt = nil, time.Time{}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("%s: decision (-want +got):\n%s", tt.name, diff)
		}
	}
	if keys := pendingKeys(in); len(keys) != 0 {
		t.Errorf("pending after deciding both = %v, want none", keys)
	}
	// A second decision on the same request is refused: it is no longer held.
	rec := do(t, h, http.MethodPost, "/api/decide", tests[0].body, nil)
	if rec.Code != http.StatusConflict {
		t.Errorf("second decision = %d %s, want 409", rec.Code, rec.Body)
	}
}

func TestEditedArgsAreCheckedAgainstTheSchema(t *testing.T) {
	t.Parallel()
	b := bustest.NewBus(t)
	in, _ := startInbox(t, inbox.Config{Bus: b})
	h := in.Handler()
	r := request(t, "run-1", "call-1", `{"path":"a.txt"}`, time.Now().Add(time.Hour))
	publish(t, b, r)
	bustest.WaitFor(t, "pending", func() bool { return len(in.Pending()) == 1 })

	refused := []struct {
		name, args string
		want       string
	}{
		{"wrong type", `{"path": 42}`, "at '/path'"},
		{"missing required", `{"force": true}`, "missing property 'path'"},
		{"unknown property", `{"path":"x","mode":"rm -rf"}`, "additional properties 'mode' not allowed"},
		{"not json", `{"path":`, "not valid JSON"},
		{"not an object", `["a.txt"]`, "must be a JSON object"},
	}
	for _, tt := range refused {
		body, _ := json.Marshal(map[string]any{"run_id": "run-1", "tool_call_id": "call-1", "approve": true, "args": tt.args})
		rec := do(t, h, http.MethodPost, "/api/decide", string(body), nil)
		var ans struct {
			Problems []string `json:"problems"`
		}
		_ = json.Unmarshal(rec.Body.Bytes(), &ans)
		if rec.Code != http.StatusUnprocessableEntity || !strings.Contains(strings.Join(ans.Problems, "\n"), tt.want) {
			t.Errorf("%s: %d %s, want 422 naming %q", tt.name, rec.Code, rec.Body, tt.want)
		}
	}
	if d := bustest.LastDecision(t, b, "run-1"); d != nil {
		t.Fatalf("refused edits published a decision: %+v", d)
	}
	if !hasPending(in, "run-1/call-1") {
		t.Fatal("refused edits took the request out of the inbox")
	}

	body, _ := json.Marshal(map[string]any{"run_id": "run-1", "tool_call_id": "call-1", "approve": true,
		"args": "{\n  \"path\": \"b.txt\",\n  \"force\": false\n}"})
	if rec := do(t, h, http.MethodPost, "/api/decide", string(body), nil); rec.Code != http.StatusOK {
		t.Fatalf("valid edit: %d %s", rec.Code, rec.Body)
	}
	d := waitDecision(t, b, "run-1")
	if !d.Approved || string(d.OverrideArgs) != `{"force":false,"path":"b.txt"}` || d.ArgsDigest != r.ArgsDigest {
		t.Errorf("decision = approved %v, override %s, digest %s; want approved with canonical override and the request's digest",
			d.Approved, d.OverrideArgs, d.ArgsDigest)
	}
}

func TestAccess(t *testing.T) {
	t.Parallel()
	b := bustest.NewBus(t)
	open, _ := startInbox(t, inbox.Config{Bus: b, ID: "open"})
	guarded, _ := startInbox(t, inbox.Config{Bus: b, ID: "guarded", Token: "s3cret"})

	remote := func(h http.Handler, addr, path string, hdr map[string]string) int {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.RemoteAddr = addr
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	tests := []struct {
		name string
		h    http.Handler
		addr string
		hdr  map[string]string
		want int
	}{
		{"no token, loopback", open.Handler(), "127.0.0.1:5000", nil, http.StatusOK},
		{"no token, loopback v6", open.Handler(), "[::1]:5000", nil, http.StatusOK},
		{"no token, remote", open.Handler(), "203.0.113.7:5000", nil, http.StatusForbidden},
		{"token, none given", guarded.Handler(), "203.0.113.7:5000", nil, http.StatusUnauthorized},
		{"token, none given, loopback", guarded.Handler(), "127.0.0.1:5000", nil, http.StatusUnauthorized},
		{"token, wrong bearer", guarded.Handler(), "203.0.113.7:5000", map[string]string{"Authorization": "Bearer nope"}, http.StatusUnauthorized},
		{"token, right bearer", guarded.Handler(), "203.0.113.7:5000", map[string]string{"Authorization": "Bearer s3cret"}, http.StatusOK},
		{"token, cookie holding the token itself", guarded.Handler(), "203.0.113.7:5000", map[string]string{"Cookie": "toolgate_inbox=s3cret"}, http.StatusUnauthorized},
	}
	for _, tt := range tests {
		if got := remote(tt.h, tt.addr, "/api/pending", tt.hdr); got != tt.want {
			t.Errorf("%s: %d, want %d", tt.name, got, tt.want)
		}
	}
	if got := remote(guarded.Handler(), "203.0.113.7:5000", "/healthz", nil); got != http.StatusOK {
		t.Errorf("healthz with token configured = %d, want 200 without auth", got)
	}

	// A browser without the cookie is sent to the login form, which sets it.
	h := guarded.Handler()
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.Header.Set("Accept", "text/html")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusSeeOther || !strings.HasPrefix(rec.Header().Get("Location"), "/login") {
		t.Fatalf("GET / without auth = %d to %q, want a redirect to /login", rec.Code, rec.Header().Get("Location"))
	}
	login := func(token string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/login", strings.NewReader(url.Values{"token": {token}, "next": {"/"}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	if rec := login("wrong"); rec.Code != http.StatusUnauthorized || len(rec.Result().Cookies()) != 0 {
		t.Errorf("login with a wrong token = %d with cookies %v", rec.Code, rec.Result().Cookies())
	}
	rec = login("s3cret")
	cookies := rec.Result().Cookies()
	if rec.Code != http.StatusSeeOther || len(cookies) != 1 || !cookies[0].HttpOnly || cookies[0].Value == "s3cret" {
		t.Fatalf("login = %d with cookies %v, want a redirect and one HttpOnly session cookie", rec.Code, cookies)
	}
	req = httptest.NewRequest(http.MethodGet, "/", nil)
	req.AddCookie(cookies[0])
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Errorf("GET / with the session cookie = %d", rec.Code)
	}
}

func TestRequestsSettledElsewhereLeave(t *testing.T) {
	t.Parallel()
	b := bustest.NewBus(t)
	in, _ := startInbox(t, inbox.Config{Bus: b})
	dl := time.Now().Add(time.Hour)
	a := request(t, "run-a", "call-1", `{"path":"a"}`, dl)
	bb := request(t, "run-b", "call-1", `{"path":"b"}`, dl)
	c := request(t, "run-c", "call-1", `{"path":"c"}`, dl)
	keep := request(t, "run-d", "call-1", `{"path":"d"}`, dl)
	publishEvent(t, b, wire.Event{ConversationID: c.ConversationID, RunID: "run-c", Type: "run_started"})
	publish(t, b, a, bb, c, keep)
	bustest.WaitFor(t, "four pending", func() bool { return len(in.Pending()) == 4 })

	publishEvent(t, b, wire.Event{ConversationID: a.ConversationID, RunID: "run-a", ToolCallID: "call-1", Type: "reply_applied",
		Data: json.RawMessage(`{"kind":"approval"}`)})
	publishEvent(t, b, wire.Event{ConversationID: bb.ConversationID, RunID: "run-b", Type: "calls_expired", Data: json.RawMessage(`{"calls":1}`)})
	publishEvent(t, b, wire.Event{ConversationID: c.ConversationID, RunID: "run-c2", Type: "run_started", Data: json.RawMessage(`{"resume":true}`)})
	waitPending(t, in, "run-d/call-1")
}

func TestExpiredRequestsLeave(t *testing.T) {
	t.Parallel()
	b := bustest.NewBus(t)
	clk := &clock{}
	in, _ := startInbox(t, inbox.Config{Bus: b, Clock: clk.Now})
	publish(t, b, request(t, "run-1", "call-1", `{"path":"a"}`, time.Now().Add(time.Minute)),
		request(t, "run-2", "call-1", `{"path":"b"}`, time.Now().Add(time.Hour)))
	bustest.WaitFor(t, "two pending", func() bool { return len(in.Pending()) == 2 })
	clk.Advance(2 * time.Minute)
	waitPending(t, in, "run-2/call-1")
	h := in.Handler()
	rec := do(t, h, http.MethodPost, "/api/decide", `{"run_id":"run-1","tool_call_id":"call-1","approve":true}`, nil)
	if rec.Code != http.StatusConflict || !strings.Contains(rec.Body.String(), "expired") {
		t.Errorf("deciding an expired request = %d %s, want 409 naming expiry", rec.Code, rec.Body)
	}
}

func TestPendingRequestsSurviveARestart(t *testing.T) {
	t.Parallel()
	b := bustest.NewBus(t)
	in, stop := startInbox(t, inbox.Config{Bus: b})
	publish(t, b, request(t, "run-1", "call-1", `{"path":"a"}`, time.Now().Add(time.Hour)),
		request(t, "run-2", "call-1", `{"path":"b"}`, time.Now().Add(time.Hour)))
	bustest.WaitFor(t, "two pending", func() bool { return len(in.Pending()) == 2 })
	if _, err := in.Decide(bustest.Context(t), "run-1", "call-1", approver.Choice{Approve: true}); err != nil {
		t.Fatal(err)
	}
	stop()

	again, _ := startInbox(t, inbox.Config{Bus: b})
	bustest.WaitFor(t, "the undecided request back", func() bool { return hasPending(again, "run-2/call-1") })
	if hasPending(again, "run-1/call-1") {
		t.Error("the request decided before the restart is shown again")
	}
}

func TestOrchestratorIsAskedWhatIsPending(t *testing.T) {
	t.Parallel()
	b := bustest.NewBus(t)
	orch := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/pending" || r.Header.Get("Authorization") != "Bearer orch-token" {
			http.Error(w, `{"error":"no"}`, http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"pending":[{"run_id":"run-2","tool_call_id":"call-1","tool_name":"delete_file","kind":"approval","args":{}}]}`))
	}))
	t.Cleanup(orch.Close)
	in, _ := startInbox(t, inbox.Config{Bus: b, PollInterval: 50 * time.Millisecond,
		Orchestrator: &client.Client{BaseURL: orch.URL, Token: "orch-token"}})
	publish(t, b, request(t, "run-1", "call-1", `{"path":"a"}`, time.Now().Add(time.Hour)),
		request(t, "run-2", "call-1", `{"path":"b"}`, time.Now().Add(time.Hour)))
	waitPending(t, in, "run-2/call-1")
}

func TestEventStreamAddsAndRemoves(t *testing.T) {
	t.Parallel()
	b := bustest.NewBus(t)
	in, _ := startInbox(t, inbox.Config{Bus: b})
	publish(t, b, request(t, "run-1", "call-1", `{"path":"a"}`, time.Now().Add(time.Hour)))
	bustest.WaitFor(t, "pending", func() bool { return len(in.Pending()) == 1 })
	srv := httptest.NewServer(in.Handler())
	t.Cleanup(srv.Close)

	ctx, cancel := context.WithTimeout(t.Context(), bustest.Timeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/events", nil)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	sc := bufio.NewScanner(resp.Body)
	next := func() (string, string) {
		var ev, data string
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				ev = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				data = strings.TrimPrefix(line, "data: ")
			case line == "" && ev != "":
				return ev, data
			}
		}
		t.Fatalf("event stream ended: %v", sc.Err())
		return "", ""
	}
	if ev, data := next(); ev != "snapshot" || !strings.Contains(data, `"key":"run-1/call-1"`) {
		t.Fatalf("first event %s %s, want a snapshot with run-1/call-1", ev, data)
	}
	publish(t, b, request(t, "run-2", "call-1", `{"path":"b"}`, time.Now().Add(time.Hour)))
	if ev, data := next(); ev != "add" || !strings.Contains(data, `"key":"run-2/call-1"`) {
		t.Fatalf("got %s %s, want add of run-2/call-1", ev, data)
	}
	if _, err := in.Decide(ctx, "run-1", "call-1", approver.Choice{Message: "no"}); err != nil {
		t.Fatal(err)
	}
	if ev, data := next(); ev != "remove" || data != `{"key":"run-1/call-1","reason":"denied here"}` {
		t.Fatalf("got %s %s, want remove of run-1/call-1", ev, data)
	}
	cancel()
}

func TestConversationFromEvents(t *testing.T) {
	t.Parallel()
	b := bustest.NewBus(t)
	in, _ := startInbox(t, inbox.Config{Bus: b})
	conv := "conv-9"
	evs := []wire.Event{
		{RunID: "run-1", Type: "run_started", Data: json.RawMessage(`{"resume":false,"prompt":"Clean up the repo"}`)},
		{RunID: "run-1", Type: "model_response", Data: json.RawMessage(`{"kind":"model_response","message":{"kind":"response","parts":[
			{"part_kind":"text","content":"I will delete two files."},
			{"part_kind":"tool-call","tool_name":"delete_file","tool_call_id":"c1","args":{"path":"a.txt"}},
			{"part_kind":"tool-call","tool_name":"delete_file","tool_call_id":"c2","args":{"path":"b.txt"}}]}}`)},
		{RunID: "run-1", Type: "deferred_requests", Data: json.RawMessage(`{"kind":"deferred_requests","requests":{"calls":[],"approvals":[
			{"tool_name":"delete_file","tool_call_id":"c1","args":{"path":"a.txt"}},{"tool_name":"delete_file","tool_call_id":"c2","args":{"path":"b.txt"}}],"metadata":{}}}`)},
		{RunID: "run-1", Type: "run_paused", Data: json.RawMessage(`[{"run_id":"run-1","tool_call_id":"c1","tool_name":"delete_file","kind":"approval","args":{}},
			{"run_id":"run-1","tool_call_id":"c2","tool_name":"delete_file","kind":"approval","args":{}}]`)},
		{RunID: "run-1", ToolCallID: "c1", Type: "reply_applied", Data: json.RawMessage(`{"kind":"approval","approved":false,"approver_id":"bob","message":"keep it"}`)},
		{RunID: "run-1", ToolCallID: "c2", Type: "reply_applied", Data: json.RawMessage(`{"kind":"approval"}`)},
		{RunID: "run-2", Type: "run_started", Data: json.RawMessage(`{"resume":true}`)},
		{RunID: "run-2", ToolCallID: "c1", Type: "tool_result", Data: json.RawMessage(`{"kind":"tool_result","part":{"part_kind":"tool-return","tool_name":"delete_file","tool_call_id":"c1","content":"keep it","outcome":"denied"}}`)},
		{RunID: "run-2", ToolCallID: "c2", Type: "tool_result", Data: json.RawMessage(`{"kind":"tool_result","part":{"part_kind":"tool-return","tool_name":"delete_file","tool_call_id":"c2","value":{"deleted":"b.txt"},"outcome":"success"}}`)},
		{RunID: "run-2", Type: "run_completed", Data: json.RawMessage(`{"output":"Deleted b.txt; a.txt was kept."}`)},
	}
	page := conversationPage(t, b, in, conv, evs)
	for _, want := range []string{
		"Clean up the repo", "I will delete two files.", "Deleted b.txt; a.txt was kept.",
		`<tr data-call="c1"><td><code>c1</code></td><td>delete_file</td><td>approval</td>
        <td><span class="state state-denied">denied</span></td><td>bob</td><td>keep it</td></tr>`,
		`<td><span class="state state-approved">approved</span></td>`,
		`status-completed`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("conversation page lacks %q", want)
		}
	}
	if rec := do(t, in.Handler(), http.MethodGet, "/conversations/nope", "", nil); rec.Code != http.StatusNotFound {
		t.Errorf("unknown conversation = %d, want 404", rec.Code)
	}
}

// The orchestrator runs every tool on a worker: an approved call is
// deferred again as an external call under the same id. Its row then
// shows how the call ended, and still who approved it.
func TestConversationApprovedCallRan(t *testing.T) {
	t.Parallel()
	b := bustest.NewBus(t)
	in, _ := startInbox(t, inbox.Config{Bus: b})
	conv := "conv-10"
	evs := []wire.Event{
		{RunID: "run-1", Type: "run_started", Data: json.RawMessage(`{"resume":false,"prompt":"Set the secret"}`)},
		{RunID: "run-1", Type: "deferred_requests", Data: json.RawMessage(`{"kind":"deferred_requests","requests":{"calls":[],"approvals":[
			{"tool_name":"update_file","tool_call_id":"u1","args":{"path":".env"}}],"metadata":{}}}`)},
		{RunID: "run-1", Type: "run_paused", Data: json.RawMessage(`[{"run_id":"run-1","tool_call_id":"u1","tool_name":"update_file","kind":"approval","args":{}}]`)},
		{RunID: "run-1", ToolCallID: "u1", Type: "reply_applied", Data: json.RawMessage(`{"kind":"approval","approved":true,"approver_id":"bob"}`)},
		{RunID: "run-2", Type: "run_started", Data: json.RawMessage(`{"resume":true}`)},
		{RunID: "run-2", Type: "deferred_requests", Data: json.RawMessage(`{"kind":"deferred_requests","requests":{"calls":[
			{"tool_name":"update_file","tool_call_id":"u1","args":{"path":".env"}}],"approvals":[],"metadata":{}}}`)},
		{RunID: "run-2", Type: "run_paused", Data: json.RawMessage(`[{"run_id":"run-2","tool_call_id":"u1","tool_name":"update_file","kind":"call","args":{}}]`)},
		{RunID: "run-2", ToolCallID: "u1", Type: "reply_applied", Data: json.RawMessage(`{"kind":"call"}`)},
		{RunID: "run-3", Type: "run_started", Data: json.RawMessage(`{"resume":true}`)},
		{RunID: "run-3", ToolCallID: "u1", Type: "tool_result", Data: json.RawMessage(`{"kind":"tool_result","part":{"part_kind":"tool-return","tool_name":"update_file","tool_call_id":"u1","value":"written","outcome":"success"}}`)},
		{RunID: "run-3", Type: "run_completed", Data: json.RawMessage(`{"output":"Done."}`)},
	}
	page := conversationPage(t, b, in, conv, evs)
	want := `<tr data-call="u1"><td><code>u1</code></td><td>update_file</td><td>approval → call</td>
        <td><span class="state state-returned">returned</span></td><td>bob</td><td></td></tr>`
	if !strings.Contains(page, want) {
		t.Errorf("conversation page lacks %q:\n%s", want, page)
	}
}

// With an orchestrator, the conversation page shows its messages, status
// and output; a conversation it does not know is a 404 page.
func TestConversationFromOrchestrator(t *testing.T) {
	t.Parallel()
	b := bustest.NewBus(t)
	orch := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/pending":
			w.Write([]byte(`{"pending":[]}`))
		case "/v1/conversations/conv-o":
			w.Write([]byte(`{"conversation_id":"conv-o","status":"completed","output":"All done.","pending":[],"messages":[
				{"request":[{"system":"Be brief."},{"user":"Tidy up"}]},
				{"response":[{"call":{"tool":"delete_file","id":"d1","args":{"path":"junk.txt"}}}]},
				{"request":[{"return":{"tool":"delete_file","id":"d1","content":"File 'junk.txt' deleted","outcome":"success"}}]},
				{"response":[{"text":"Removed junk.txt."}]}]}`))
		default:
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"error":"unknown conversation"}`))
		}
	}))
	t.Cleanup(orch.Close)
	in, _ := startInbox(t, inbox.Config{Bus: b, Orchestrator: &client.Client{BaseURL: orch.URL}})
	rec := do(t, in.Handler(), http.MethodGet, "/conversations/conv-o", "", nil)
	if rec.Code != http.StatusOK {
		t.Fatalf("GET conversation: %d %s", rec.Code, rec.Body)
	}
	page := rec.Body.String()
	for _, want := range []string{"Be brief.", "Tidy up", "delete_file", "junk.txt", "Removed junk.txt.", "All done.", "completed"} {
		if !strings.Contains(page, want) {
			t.Errorf("conversation page lacks %q", want)
		}
	}
	if rec := do(t, in.Handler(), http.MethodGet, "/conversations/conv-x", "", nil); rec.Code != http.StatusNotFound {
		t.Errorf("conversation the orchestrator does not know = %d, want 404", rec.Code)
	}
}

// conversationPage publishes evs as the events of conversation conv and
// returns the inbox's page of it.
func conversationPage(t *testing.T, b *bus.Bus, in *inbox.Inbox, conv string, evs []wire.Event) string {
	t.Helper()
	for _, ev := range evs {
		ev.ConversationID = conv
		publishEvent(t, b, ev)
	}
	rec := do(t, in.Handler(), http.MethodGet, "/conversations/"+conv, "", nil)
	if rec.Code != http.StatusOK {
		t.Fatalf("GET conversation: %d %s", rec.Code, rec.Body)
	}
	return rec.Body.String()
}

// A request for a tool that an MCP server serves shows the server, from
// the tool's advert; others show none.
func TestShowsTheMCPServerOfATool(t *testing.T) {
	t.Parallel()
	b := bustest.NewBus(t)
	kv, err := b.Tools(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	advert := bus.ToolAdvert{Name: "delete_file", Description: "Deletes", Kind: "call", Executor: "mcp", MCPServer: "filesystem", MCPTool: "delete", WorkerID: "w1", At: time.Now().UTC()}
	data, err := json.Marshal(advert)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(t.Context(), "delete_file", data); err != nil {
		t.Fatal(err)
	}
	in, _ := startInbox(t, inbox.Config{Bus: b})
	deadline := time.Now().Add(time.Hour)
	other := request(t, "run-2", "call-1", `{"path":"b.txt"}`, deadline)
	other.ToolName = "update_file"
	publish(t, b, request(t, "run-1", "call-1", `{"path":"a.txt"}`, deadline), other)
	bustest.WaitFor(t, "two pending", func() bool { return len(in.Pending()) == 2 })
	got := map[string]string{}
	for _, it := range in.Pending() {
		got[it.ToolName] = it.MCPServer
	}
	if got["delete_file"] != "filesystem" || got["update_file"] != "" {
		t.Errorf("MCP servers shown = %v, want delete_file from filesystem, update_file from none", got)
	}
	page := do(t, in.Handler(), http.MethodGet, "/", "", nil)
	if !strings.Contains(page.Body.String(), `data-field="mcp_server" title="the MCP server the tool comes from">filesystem</p>`) {
		t.Errorf("the page does not show the MCP server:\n%s", page.Body)
	}
}

// A call that waits because no worker takes its tool's calls says so on
// its row; a cancel settles what was pending (approvals denied, calls
// failed, with the cancel's reason) and the conversation shows cancelled.
// Before, a cancelled conversation stayed "paused" with its calls pending.
func TestConversationUnservedThenCancelled(t *testing.T) {
	t.Parallel()
	b := bustest.NewBus(t)
	in, _ := startInbox(t, inbox.Config{Bus: b})
	evs := []wire.Event{
		{RunID: "run-1", Type: "run_started", Data: json.RawMessage(`{"resume":false,"prompt":"Answer and clean"}`)},
		{RunID: "run-1", Type: "deferred_requests", Data: json.RawMessage(`{"kind":"deferred_requests","requests":{"calls":[
			{"tool_name":"calculate","tool_call_id":"k1","args":{}}],"approvals":[{"tool_name":"delete_file","tool_call_id":"a1","args":{"path":"x"}}],"metadata":{}}}`)},
		{RunID: "run-1", Type: "run_paused", Data: json.RawMessage(`[{"run_id":"run-1","tool_call_id":"k1","tool_name":"calculate","kind":"call","args":{}},
			{"run_id":"run-1","tool_call_id":"a1","tool_name":"delete_file","kind":"approval","args":{}}]`)},
		{RunID: "run-1", ToolCallID: "k1", Type: "tool_unserved", Data: json.RawMessage(`{"tool":"calculate","reason":"no worker takes calls of calculate: the call waits until one does or its deadline passes","deadline":"2030-01-01T00:00:00Z"}`)},
	}
	page := conversationPage(t, b, in, "conv-11", evs)
	if want := `<td><span class="state state-pending">pending</span></td><td></td><td>no worker takes calls of calculate: the call waits until one does or its deadline passes</td>`; !strings.Contains(page, want) {
		t.Errorf("page lacks %q:\n%s", want, page)
	}
	page = conversationPage(t, b, in, "conv-11", []wire.Event{
		{RunID: "run-1", Type: "conversation_cancelled", Data: json.RawMessage(`{"reason":"cancelled","tool_call_ids":["k1","a1"]}`)},
	})
	for _, want := range []string{
		`<tr data-call="k1"><td><code>k1</code></td><td>calculate</td><td>call</td>
        <td><span class="state state-failed">failed</span></td><td></td><td>cancelled</td></tr>`,
		`<tr data-call="a1"><td><code>a1</code></td><td>delete_file</td><td>approval</td>
        <td><span class="state state-denied">denied</span></td><td></td><td>cancelled</td></tr>`,
		`status-cancelled`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q:\n%s", want, page)
		}
	}
}

// A request the inbox cannot show (a body that does not decode or whose
// field is wrong, a tool_name that is not its subject's) is dead-lettered
// with why, as the bus's consumers do, never dropped; a good one next to them shows.
// Before, each was terminated with only a log line.
func TestUnshowableRequestsAreDeadLettered(t *testing.T) {
	t.Parallel()
	b := bustest.NewBus(t)
	in, _ := startInbox(t, inbox.Config{Bus: b})
	raw := func(subject string, data []byte) {
		t.Helper()
		hdr := nats.Header{}
		hdr.Set(wire.HeaderContentType, wire.ContentTypeJSON)
		if _, err := b.JetStream().PublishMsg(t.Context(), &nats.Msg{Subject: subject, Header: hdr, Data: data}); err != nil {
			t.Fatal(err)
		}
	}
	raw("toolgate.approval.delete_file", []byte(`{not json`))
	other := request(t, "run-7", "call-1", `{"path":"a"}`, time.Now().Add(time.Hour))
	other.ToolName = "update_file"
	body, err := json.Marshal(other)
	if err != nil {
		t.Fatal(err)
	}
	raw("toolgate.approval.delete_file", body)
	bad := request(t, "run-8", "call-1", `{"path":"a"}`, time.Now().Add(time.Hour))
	bad.ArgsDigest = ""
	if body, err = json.Marshal(bad); err != nil {
		t.Fatal(err)
	}
	raw("toolgate.approval.delete_file", body)
	publish(t, b, request(t, "run-9", "call-1", `{"path":"b"}`, time.Now().Add(time.Hour)))

	var dls []bus.DeadLetter
	bustest.Poll(t, bustest.Timeout, "three dead letters", func() (bool, string) {
		dls = bustest.DeadLetters(t, b)
		return len(dls) == 3, fmt.Sprint(len(dls), " dead letters")
	})
	want := []struct{ kind, reason string }{{bus.DLQDecode, ""}, {bus.DLQInvalid, "tool_name"}, {bus.DLQInvalid, "args_digest"}}
	for i, dl := range dls {
		if dl.Kind != want[i].kind || !strings.Contains(dl.Reason, want[i].reason) || dl.Stream != wire.StreamApprovals {
			t.Errorf("dead letter %d: %s %q from %s, want %s naming %q", i, dl.Kind, dl.Reason, dl.Stream, want[i].kind, want[i].reason)
		}
	}
	bustest.Poll(t, bustest.Timeout, "the good request shown", func() (bool, string) {
		rec := do(t, in.Handler(), http.MethodGet, "/api/pending", "", nil)
		return strings.Contains(rec.Body.String(), "run-9"), rec.Body.String()
	})
}
