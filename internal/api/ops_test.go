package api_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/toolgatetest"
	"github.com/toolgate/toolgate/wire"
)

// waitRecords polls path until its list under key holds want entries.
func waitRecords(t *testing.T, sys *toolgatetest.System, path, key string, want int) []any {
	t.Helper()
	deadline := time.Now().Add(toolgatetest.Timeout)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		status, body := doJSON(t, "GET", sys.URL+path, "")
		if status != 200 {
			t.Fatalf("GET %s: %d %v", path, status, body)
		}
		list, _ := body[key].([]any)
		if len(list) >= want {
			return list
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %d %s, want %d", path, len(list), key, want)
		}
		<-tick.C
	}
}

// Refused decisions show in GET /v1/audit and GET /v1/dlq, newest first,
// filtered by conversation, tool call and time, a page at a time; an
// undecodable reply shows in /v1/dlq with its bytes.
func TestHTTPDeadLettersAndAudit(t *testing.T) {
	t.Parallel()
	sys := toolgatetest.Start(t, toolgatetest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), toolgatetest.Timeout)
	defer cancel()
	rs, err := sys.Client.Start(ctx, client.StartRequest{Prompt: seedPrompt})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sys.Client.Wait(ctx, rs.ConversationID, client.StatusPaused); err != nil {
		t.Fatal(err)
	}
	b, err := bus.FromConn(sys.Conn(), bus.ConnConfig{})
	if err != nil {
		t.Fatal(err)
	}
	hdr := nats.Header{wire.HeaderConversation: []string{rs.ConversationID}}
	for _, id := range []string{"delete_file", "update_file_dotenv"} {
		d := wire.Decision{RunID: rs.RunID, ToolCallID: id, ArgsDigest: strings.Repeat("0", 64), Approved: true, ApproverID: "ann", DecidedAt: time.Now()}
		if _, err := b.PublishDecision(ctx, d, hdr); err != nil {
			t.Fatal(err)
		}
	}
	audit := waitRecords(t, sys, "/v1/audit", "records", 2)
	first, second := audit[0].(map[string]any), audit[1].(map[string]any)
	if first["seq"].(float64) <= second["seq"].(float64) {
		t.Errorf("audit not newest first: %v", audit)
	}
	// The two replies are handled concurrently: either may be first.
	calls := map[any]bool{first["tool_call_id"]: true, second["tool_call_id"]: true}
	if !calls["delete_file"] || !calls["update_file_dotenv"] {
		t.Errorf("audit records = %v, want one per refused decision", audit)
	}
	for _, r := range []map[string]any{first, second} {
		if r["verdict"] != "refused" || r["conversation_id"] != rs.ConversationID || r["approver_id"] != "ann" || r["kind"] != "approval" {
			t.Errorf("audit record = %v", r)
		}
	}
	// Their dead letters are written beside the audit records.
	waitRecords(t, sys, "/v1/dlq", "dead_letters", 2)

	subj, err := wire.DecisionSubject(rs.RunID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.JetStream().PublishMsg(ctx, &nats.Msg{Subject: subj, Data: []byte("not a decision"), Header: nats.Header{wire.HeaderConversation: []string{rs.ConversationID}}}); err != nil {
		t.Fatal(err)
	}
	dlq := waitRecords(t, sys, "/v1/dlq", "dead_letters", 3)
	newest := dlq[0].(map[string]any)
	if newest["kind"] != "decode" || newest["body_base64"] == nil || newest["conversation_id"] != rs.ConversationID {
		t.Errorf("newest dead letter = %v", newest)
	}
	if refused := dlq[1].(map[string]any); refused["kind"] != "handler" || !calls[refused["tool_call_id"]] || refused["body"] == nil || refused["stream"] != "TOOLGATE_REPLIES" {
		t.Errorf("second dead letter = %v", refused)
	}

	count := func(path, key string) (int, string) {
		t.Helper()
		status, body := doJSON(t, "GET", sys.URL+path, "")
		if status != 200 {
			t.Fatalf("GET %s: %d %v", path, status, body)
		}
		list, _ := body[key].([]any)
		next, _ := body["next_cursor"].(string)
		return len(list), next
	}
	future := url.QueryEscape(time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
	for _, tc := range []struct {
		path, key string
		want      int
	}{
		{"/v1/audit?tool_call_id=delete_file", "records", 1},
		{"/v1/audit?conversation=" + rs.ConversationID, "records", 2},
		{"/v1/audit?conversation=cother", "records", 0},
		{"/v1/audit?since=1h", "records", 2},
		{"/v1/audit?since=" + future, "records", 0},
		{"/v1/dlq?tool_call_id=delete_file", "dead_letters", 1},
		{"/v1/dlq?conversation=" + rs.ConversationID, "dead_letters", 3},
		{"/v1/dlq?since=" + future, "dead_letters", 0},
	} {
		if n, _ := count(tc.path, tc.key); n != tc.want {
			t.Errorf("GET %s: %d %s, want %d", tc.path, n, tc.key, tc.want)
		}
	}

	// A page at a time: the cursor goes on with the older records.
	n, next := count("/v1/audit?limit=1", "records")
	if n != 1 || next == "" {
		t.Fatalf("first page: %d records, next %q", n, next)
	}
	status, body := doJSON(t, "GET", sys.URL+"/v1/audit?limit=1&cursor="+next, "")
	page, _ := body["records"].([]any)
	if status != 200 || len(page) != 1 || page[0].(map[string]any)["tool_call_id"] != second["tool_call_id"] {
		t.Errorf("second page: %d %v, want %v", status, body, second["tool_call_id"])
	}
	if last, _ := body["next_cursor"].(string); last != "" {
		if n, _ := count("/v1/audit?cursor="+last, "records"); n != 0 {
			t.Errorf("a third page of %d records, want none", n)
		}
	}

	// The public Go client reads the same.
	ap, err := sys.Client.Audit(ctx, client.RecordOptions{ToolCallID: "delete_file"})
	if err != nil || len(ap.Records) != 1 || ap.Records[0].Verdict != "refused" || ap.Records[0].Seq == 0 {
		t.Errorf("client audit: %+v, %v", ap, err)
	}
	dp, err := sys.Client.DeadLetters(ctx, client.RecordOptions{ConversationID: rs.ConversationID, Limit: 1})
	if err != nil || len(dp.DeadLetters) != 1 || dp.DeadLetters[0].Kind != "decode" || dp.NextCursor == "" {
		t.Errorf("client dead letters: %+v, %v", dp, err)
	}

	for _, tc := range []struct{ path, want string }{
		{"/v1/audit?limit=0", "limit"},
		{"/v1/dlq?limit=x", "limit"},
		{"/v1/audit?since=yesterday", "since"},
		{"/v1/dlq?cursor=x", "cursor"},
		{"/v1/audit?conversation=a.b", "conversation"},
	} {
		status, body := doJSON(t, "GET", sys.URL+tc.path, "")
		if msg, _ := body["error"].(string); status != 400 || !strings.Contains(msg, tc.want) {
			t.Errorf("GET %s: %d %v, want 400 naming %s", tc.path, status, body, tc.want)
		}
	}
	if status, _ := doJSON(t, "POST", sys.URL+"/v1/dlq", "{}"); status != 405 {
		t.Errorf("POST /v1/dlq: %d, want 405", status)
	}
}
