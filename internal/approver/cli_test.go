package approver_test

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/toolgate/toolgate/internal/approver"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/client"
	"github.com/toolgate/toolgate/wire"
)

const cliSchema = `{"type":"object","properties":{"path":{"type":"string"}},"required":["path"],"additionalProperties":false}`

func cliRequest(t *testing.T, run, call, args string, deadline time.Time) wire.ApprovalRequest {
	t.Helper()
	digest, err := wire.DigestArgs(json.RawMessage(args))
	if err != nil {
		t.Fatal(err)
	}
	return wire.ApprovalRequest{
		RunID: run, ConversationID: "conv-" + run, ToolCallID: call, ToolName: "delete_file",
		Parameters: json.RawMessage(cliSchema), Args: json.RawMessage(args), ArgsDigest: digest, Deadline: deadline,
	}
}

// cliFixture publishes: two calls named call-1 (runs 1 and 2), one settled
// by an event (run 3), one past its deadline (run 4), and a second attempt
// of run 5's call.
func cliFixture(t *testing.T) *bus.Bus {
	b := bustest.NewBus(t)
	ctx := bustest.Context(t)
	later := time.Now().Add(time.Hour)
	reqs := []wire.ApprovalRequest{
		cliRequest(t, "run-1", "call-1", `{"path":"a"}`, later),
		cliRequest(t, "run-2", "call-1", `{"path":"b"}`, later),
		cliRequest(t, "run-3", "call-3", `{"path":"c"}`, later),
		cliRequest(t, "run-4", "call-4", `{"path":"d"}`, time.Now().Add(-time.Minute)),
		cliRequest(t, "run-5", "call-5", `{"path":"e"}`, later),
	}
	second := reqs[4]
	second.Attempt = 1
	reqs = append(reqs, second)
	for _, r := range reqs {
		if _, err := b.PublishApproval(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.PublishEvent(ctx, wire.Event{ConversationID: "conv-run-3", RunID: "run-3", ToolCallID: "call-3",
		Type: wire.EventReplyApplied, Data: json.RawMessage(`{"kind":"approval"}`), Time: time.Now()}); err != nil {
		t.Fatal(err)
	}
	return b
}

func pendingIDs(ps []approver.Pending) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Request.RunID+"/"+p.Request.ToolCallID+"#"+string(rune('0'+p.Request.Attempt)))
	}
	return out
}

func TestCLIPendingFromTheStream(t *testing.T) {
	t.Parallel()
	b := cliFixture(t)
	var out, progress bytes.Buffer
	cli := &approver.CLI{Bus: b, ID: "cli", Out: &out, Progress: &progress}
	ps, err := cli.Pending(bustest.Context(t))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"run-1/call-1#0", "run-2/call-1#0", "run-5/call-5#1"}, pendingIDs(ps)); diff != "" {
		t.Errorf("pending (-want +got):\n%s", diff)
	}
	if err := cli.List(bustest.Context(t)); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "TOOL CALL ID") || !strings.Contains(lines[3], `{"path":"e"}`) {
		t.Errorf("list printed:\n%s", out.String())
	}
	if !strings.Contains(progress.String(), "reading approval requests…\n") || strings.Contains(progress.String(), "\r") {
		t.Errorf("progress off a terminal should be plain lines, got %q", progress.String())
	}
}

func TestCLIPendingFromTheOrchestrator(t *testing.T) {
	t.Parallel()
	b := cliFixture(t)
	orch := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		// run-1 is settled as far as the orchestrator knows; a worker call
		// of run-2 is no approval.
		w.Write([]byte(`{"pending":[
			{"run_id":"run-2","tool_call_id":"call-1","tool_name":"delete_file","kind":"approval","args":{}},
			{"run_id":"run-2","tool_call_id":"call-9","tool_name":"fetch","kind":"call","args":{}},
			{"run_id":"run-3","tool_call_id":"call-3","tool_name":"delete_file","kind":"approval","args":{}}]}`))
	}))
	t.Cleanup(orch.Close)
	cli := &approver.CLI{Bus: b, ID: "cli", Out: new(bytes.Buffer), Orchestrator: &client.Client{BaseURL: orch.URL}}
	ps, err := cli.Pending(bustest.Context(t))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"run-2/call-1#0", "run-3/call-3#0"}, pendingIDs(ps)); diff != "" {
		t.Errorf("pending (-want +got):\n%s", diff)
	}
	// With the orchestrator as authority, call-1 is no longer ambiguous.
	if err := cli.Deny(bustest.Context(t), "call-1", "no"); err != nil {
		t.Fatalf("deny call-1: %v", err)
	}
	if d := bustest.LastDecision(t, b, "run-2"); d == nil || d.Approved || d.Message != "no" {
		t.Errorf("decision for run-2 = %+v", d)
	}
}

func TestCLIDecide(t *testing.T) {
	t.Parallel()
	b := cliFixture(t)
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cli := &approver.CLI{Bus: b, ID: "cli", Key: key, Out: &out}

	var argsErr *approver.ArgsError
	refusals := []struct {
		name string
		err  error
		want func(error) bool
	}{
		{"ambiguous id", cli.Approve(bustest.Context(t), "call-1", nil, nil), func(e error) bool { return errors.Is(e, approver.ErrAmbiguous) }},
		{"settled elsewhere", cli.Approve(bustest.Context(t), "call-3", nil, nil), func(e error) bool { return errors.Is(e, approver.ErrNoRequest) }},
		{"expired", cli.Deny(bustest.Context(t), "run-4/call-4", "x"), func(e error) bool { return errors.Is(e, approver.ErrNoRequest) }},
		{"args the schema refuses", cli.Approve(bustest.Context(t), "run-1/call-1", json.RawMessage(`{"path":1}`), nil), func(e error) bool { return errors.As(e, &argsErr) }},
	}
	for _, r := range refusals {
		if r.err == nil || !r.want(r.err) {
			t.Errorf("%s: error %v", r.name, r.err)
		}
	}
	if d := bustest.LastDecision(t, b, "run-1"); d != nil {
		t.Fatalf("a refused command published %+v", d)
	}

	if err := cli.Approve(bustest.Context(t), "run-1/call-1", json.RawMessage(`{ "path": "z" }`), json.RawMessage(`{ "ticket": 7 }`)); err != nil {
		t.Fatal(err)
	}
	if err := cli.Deny(bustest.Context(t), "run-5/call-5", "keep e"); err != nil {
		t.Fatal(err)
	}
	want := map[string]wire.Decision{
		"run-1": {RunID: "run-1", ToolCallID: "call-1", Approved: true, OverrideArgs: json.RawMessage(`{"path":"z"}`), Metadata: json.RawMessage(`{"ticket":7}`), ApproverID: "cli"},
		"run-5": {RunID: "run-5", ToolCallID: "call-5", Message: "keep e", ApproverID: "cli"},
	}
	for run, w := range want {
		d := bustest.LastDecision(t, b, run)
		if d == nil {
			t.Fatalf("no decision for %s", run)
		}
		if err := approver.Verify(key.Public().(ed25519.PublicKey), *d); err != nil {
			t.Errorf("%s: %v", run, err)
		}
		w.ArgsDigest, _ = wire.DigestArgs(map[string]json.RawMessage{"run-1": json.RawMessage(`{"path":"a"}`), "run-5": json.RawMessage(`{"path":"e"}`)}[run])
		d.Signature, d.DecidedAt = nil, time.Time{}
		if diff := cmp.Diff(w, *d); diff != "" {
			t.Errorf("%s decision (-want +got):\n%s", run, diff)
		}
	}
	if got := out.String(); !strings.Contains(got, `approved run-1/call-1 with args {"path":"z"} (signed)`) ||
		!strings.Contains(got, "denied run-5/call-5: keep e (signed)") {
		t.Errorf("output:\n%s", got)
	}
}

func TestValidateArgs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, schema, args string
		want               []string // problems; nil: accepted
	}{
		{"valid", cliSchema, `{"path":"x"}`, nil},
		{"no schema, any object", "", `{"anything":[1,2]}`, nil},
		{"missing", cliSchema, `{}`, []string{"at '/': missing property 'path'"}},
		{"type", cliSchema, `{"path":true}`, []string{"at '/path': got boolean, want string"}},
		{"not object", cliSchema, `"x"`, []string{"must be a JSON object"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := approver.ValidateArgs(json.RawMessage(tt.schema), json.RawMessage(tt.args))
			var ae *approver.ArgsError
			switch {
			case tt.want == nil && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.want != nil && !errors.As(err, &ae):
				t.Fatalf("error %v, want an ArgsError", err)
			case tt.want != nil:
				if diff := cmp.Diff(tt.want, ae.Problems); diff != "" {
					t.Errorf("problems (-want +got):\n%s", diff)
				}
			}
		})
	}
}

// A scan of the events (a transcript in the inbox, the CLI's view of what
// was settled) leaves no consumer behind on the server.
func TestScanEventsLeavesNoConsumer(t *testing.T) {
	t.Parallel()
	b := cliFixture(t)
	before := bustest.Consumers(t, b, wire.StreamEvents)
	for range 3 {
		evs, err := approver.ConversationEvents(bustest.Context(t), b, "conv-run-3")
		if err != nil || len(evs) != 1 {
			t.Fatalf("events %v (%v)", evs, err)
		}
	}
	if n := bustest.Consumers(t, b, wire.StreamEvents); n != before {
		t.Errorf("%d consumers of %s after 3 scans, %d before", n, wire.StreamEvents, before)
	}
}

// A decision the request says the orchestrator would refuse (the CLI's id
// is not among its approvers, or is the run's caller approving) is not
// sent.
func TestCLIDecidesOnlyWhatItMay(t *testing.T) {
	t.Parallel()
	b := bustest.NewBus(t)
	ctx := bustest.Context(t)
	others := bustest.SampleApproval("run-o", "call-o")
	others.Approvers = []string{"ann"}
	own := bustest.SampleApproval("run-s", "call-s")
	own.MayNotApprove = []string{"cli"}
	for _, r := range []wire.ApprovalRequest{others, own} {
		if _, err := b.PublishApproval(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	cli := &approver.CLI{Bus: b, ID: "cli", Out: new(bytes.Buffer)}
	var na *approver.NotAdmittedError
	if err := cli.Deny(ctx, "run-o/call-o", "no"); !errors.As(err, &na) {
		t.Errorf("deny of ann's call: %v", err)
	}
	if err := cli.Approve(ctx, "run-s/call-s", nil, nil); !errors.As(err, &na) {
		t.Errorf("approval of its own run's call: %v", err)
	}
	for _, run := range []string{"run-o", "run-s"} {
		if d := bustest.LastDecision(t, b, run); d != nil {
			t.Errorf("published %+v", d)
		}
	}
	if err := cli.Deny(ctx, "run-s/call-s", "not mine to approve"); err != nil {
		t.Errorf("deny of its own run's call: %v", err)
	}
}
