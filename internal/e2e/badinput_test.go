package e2e_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/api"
	"github.com/toolgate/toolgate/internal/api/apitest"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/deferred"
	"github.com/toolgate/toolgate/internal/orchestrator"
	"github.com/toolgate/toolgate/internal/testkit"
	"github.com/toolgate/toolgate/wire"
)

// singleServer is one embedded server with toolgate's streams set up, a
// system of the kit that the test's parts start on.
func singleServer(t testing.TB) *testkit.System {
	t.Helper()
	return testkit.Test(t, testkit.Options{Logger: clLogger(t)})
}

// inProcess opens a connection to sys, closed at cleanup.
func inProcess(t testing.TB, sys *testkit.System, name string) *bus.Bus {
	t.Helper()
	b, err := sys.Connect(clCtx(t), bus.ConnConfig{Name: name, Logger: clLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

// rawPublish stores data on subject as it is, with the given headers and a
// fresh message id.
func rawPublish(t *testing.T, b *bus.Bus, subject, contentType string, data []byte) error {
	t.Helper()
	m := nats.NewMsg(subject)
	m.Data = data
	if contentType != "" {
		m.Header.Set(wire.HeaderContentType, contentType)
	}
	_, err := b.JetStream().PublishMsg(clCtx(t), m)
	return err
}

func encode(t *testing.T, v any, contentType string) []byte {
	t.Helper()
	var data []byte
	var err error
	if contentType == wire.ContentTypeJSON {
		data, err = json.Marshal(v)
	} else {
		data, err = wire.Encode(v, contentType)
	}
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// dlqReasons lists every dead letter as "kind subject: reason".
func dlqReasons(t *testing.T, b *bus.Bus) []string {
	t.Helper()
	st, err := b.JetStream().Stream(clCtx(t), wire.StreamDLQ)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(clCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		dl, err := b.GetDeadLetter(clCtx(t), seq)
		if err != nil {
			continue
		}
		out = append(out, dl.Kind+" "+dl.Subject+": "+dl.Reason)
	}
	return out
}

// Bad messages on every subject toolgate consumes each end as one dead
// letter whose reason names the problem; the conversation they aim at is
// not disturbed and completes as it would have.
func TestBadInputDeadLettered(t *testing.T) {
	t.Parallel()
	sys := singleServer(t)
	o := startOrch(t, sys, orchestrator.Config{Bus: inProcess(t, sys, "orchestrator"), InstanceID: "orch"})
	startWorker(t, sys, inProcess(t, sys, "worker"), "worker-1", 4, 0)
	test := inProcess(t, sys, "test")

	// The target: the seed conversation, paused on its two approvals
	// (there is no approver) once the worker has answered its readme call.
	info, err := o.StartRun(clCtx(t), seedPrompt, "")
	if err != nil {
		t.Fatal(err)
	}
	var conv *conversation.State
	clWaitFor(t, "the readme call answered and the approvals pending", func() (bool, string) {
		conv, err = o.Conversation(clCtx(t), info.ConversationID)
		if err != nil {
			return false, err.Error()
		}
		if conv.Batch == nil {
			return false, string(conv.Status)
		}
		for _, pc := range conv.Batch.Calls {
			if pc.ToolCallID == "update_file_readme" && pc.Reply != nil {
				return true, ""
			}
		}
		return false, string(conv.Status)
	})
	run := conv.Batch.RunID
	digests := map[string]string{}
	for _, pc := range conv.Batch.Calls {
		if digests[pc.ToolCallID], err = deferred.ArgsDigest(pc.Args); err != nil {
			t.Fatal(err)
		}
	}
	callSubj, _ := wire.CallReplySubject(run)
	decSubj, _ := wire.DecisionSubject(run)
	ghostSubj, _ := wire.CallReplySubject("r-ghost")
	// Run ids name their conversation; one naming no conversation, and one
	// naming this conversation but none of its runs.
	noConvRun, strayRun := "r0123456789abcdef01234567_c0123456789abcdef01234567", "r0123456789abcdef01234567_"+conv.ID
	noConvSubj, _ := wire.CallReplySubject(noConvRun)
	straySubj, _ := wire.CallReplySubject(strayRun)
	readFile, _ := wire.CallSubject("read_file")
	approvalSubj, _ := wire.ApprovalSubject("delete_file")
	decision := func(call, digest string) wire.Decision {
		return wire.Decision{RunID: run, ToolCallID: call, ArgsDigest: digest, Approved: true, ApproverID: "mallory", DecidedAt: conv.UpdatedAt}
	}
	result := func(runID, call string) wire.CallReply {
		return wire.CallReply{RunID: runID, ToolCallID: call, Outcome: wire.OutcomeReturn, Value: json.RawMessage(`"forged"`), WorkerID: "mallory"}
	}
	maxPayload := int(test.Conn().MaxPayload())

	cases := []struct {
		name, subject, contentType string
		data                       []byte
		want                       string // in the dead letter's reason
	}{
		{"undecodable msgpack", callSubj, "", []byte{0xc1, 0x00}, "decode application/msgpack"},
		{"undecodable json", callSubj, wire.ContentTypeJSON, []byte(`{"run_id":`), "decode application/json"},
		{"unknown content type", callSubj, "text/plain", []byte(`hi`), "unsupported content type"},
		{"wrong types", callSubj, wire.ContentTypeJSON, []byte(`{"run_id":"` + run + `","tool_call_id":7,"outcome":"return"}`), "cannot unmarshal number"},
		{"missing call id", callSubj, wire.ContentTypeJSON, []byte(`{"run_id":"` + run + `","outcome":"return","value":1}`), "tool_call_id: is empty"},
		{"missing run id", callSubj, wire.ContentTypeJSON, []byte(`{"tool_call_id":"update_file_readme","outcome":"return","value":1}`), "run_id"},
		{"run id not the subject's", callSubj, "", encode(t, result("r-other", "update_file_readme"), ""), "does not match subject"},
		{"unknown run", ghostSubj, "", encode(t, result("r-ghost", "update_file_readme"), ""), "unknown run r-ghost"},
		{"run of no conversation", noConvSubj, "", encode(t, result(noConvRun, "update_file_readme"), ""), "unknown run " + noConvRun},
		{"run the conversation does not have", straySubj, "", encode(t, result(strayRun, "update_file_readme"), ""), "has no run " + strayRun},
		{"unknown call", callSubj, "", encode(t, result(run, "no_such_call"), ""), "no call no_such_call"},
		{"result for an approval", callSubj, "", encode(t, result(run, "delete_file"), ""), "wrong kind: a result for approval call delete_file"},
		{"decision for an external call", decSubj, "", encode(t, decision("update_file_readme", digests["update_file_readme"]), ""), "wrong kind: a decision for external call update_file_readme"},
		{"decision with another digest", decSubj, wire.ContentTypeJSON, encode(t, decision("delete_file", strings.Repeat("ab", 32)), wire.ContentTypeJSON), "args digest of call delete_file does not match"},
		{"undecodable call request", readFile, "", []byte{0x93, 0x01}, "decode application/msgpack"},
		{"call request for another tool", readFile, "", encode(t, wire.CallRequest{RunID: run, ConversationID: conv.ID, ToolCallID: "x", ToolName: "delete_file", Args: json.RawMessage(`{}`), Deadline: conv.UpdatedAt.Add(1e12)}, ""), "does not match subject"},
		{"huge result of no call, just under the max payload", callSubj, "", encode(t, wire.CallReply{RunID: run, ToolCallID: "huge_call", Outcome: wire.OutcomeReturn, Value: json.RawMessage(`"` + strings.Repeat("x", maxPayload-300) + `"`)}, ""), "no call huge_call"},
	}
	for _, tc := range cases {
		if err := rawPublish(t, test, tc.subject, tc.contentType, tc.data); err != nil {
			t.Fatalf("%s: publish: %v", tc.name, err)
		}
	}
	// Over the max payload nothing is stored: the client refuses it.
	over := make([]byte, maxPayload+1)
	if err := rawPublish(t, test, callSubj, "", over); !errors.Is(err, nats.ErrMaxPayload) {
		t.Errorf("publish over the max payload: err = %v, want ErrMaxPayload", err)
	}
	// An approval request nobody could have sent reaches no approver
	// here; it is the orchestrator's subject, so it is only stored.
	if err := rawPublish(t, test, approvalSubj, "", []byte{0xc1}); err != nil {
		t.Fatal(err)
	}

	var reasons []string
	clWaitFor(t, "every bad message dead-lettered", func() (bool, string) {
		reasons = dlqReasons(t, test)
		missing := 0
		for _, tc := range cases {
			if !containsReason(reasons, tc.subject, tc.want) {
				missing++
			}
		}
		return missing == 0 && len(reasons) >= len(cases), fmt.Sprintf("%d missing; have %q", missing, reasons)
	})
	if len(reasons) != len(cases) {
		t.Errorf("%d dead letters for %d bad messages: %q", len(reasons), len(cases), reasons)
	}
	for _, tc := range cases {
		if !containsReason(reasons, tc.subject, tc.want) {
			t.Errorf("%s: no dead letter with %q", tc.name, tc.want)
		}
	}
	// The copy of the huge one keeps what fits and says how big it was.
	st, err := test.JetStream().Stream(clCtx(t), wire.StreamDLQ)
	if err != nil {
		t.Fatal(err)
	}
	huge := 0
	for seq := uint64(1); seq <= st.CachedInfo().State.LastSeq; seq++ {
		dl, err := test.GetDeadLetter(clCtx(t), seq)
		if err != nil || !strings.Contains(dl.Reason, "no call huge_call") {
			continue
		}
		huge++
		if dl.Header.Get(wire.HeaderDLQTruncated) == "" || len(dl.Data) >= maxPayload-300 {
			t.Errorf("the huge dead letter (%d bytes) is not marked truncated", len(dl.Data))
		}
	}
	if huge != 1 {
		t.Errorf("%d dead letters of the huge result, want 1", huge)
	}

	// Undisturbed: the right decisions complete the conversation as the
	// seed example says.
	for _, d := range []wire.Decision{
		{RunID: run, ToolCallID: "delete_file", ArgsDigest: digests["delete_file"], Approved: false, Message: "Deleting files is not allowed", ApproverID: "alice", DecidedAt: conv.UpdatedAt},
		{RunID: run, ToolCallID: "update_file_dotenv", ArgsDigest: digests["update_file_dotenv"], Approved: true, ApproverID: "alice", DecidedAt: conv.UpdatedAt},
	} {
		if _, err := test.PublishDecision(clCtx(t), d); err != nil {
			t.Fatal(err)
		}
	}
	c := waitTerminal(t, o, conv.ID)
	if c.Status != conversation.StatusCompleted || len(c.Runs) != 2 {
		t.Fatalf("conversation %s (%s), %d runs", c.Status, c.Error, len(c.Runs))
	}
	returns, calls := returnsPerCall(c)
	for _, call := range calls {
		if returns[call] != 1 {
			t.Errorf("call %s answered %d times", call, returns[call])
		}
	}
	for _, m := range c.History {
		for _, p := range m.Parts {
			if strings.Contains(string(p.Value)+p.Content, "forged") {
				t.Errorf("a forged reply reached the history: %+v", p)
			}
		}
	}
}

func containsReason(reasons []string, subject, want string) bool {
	for _, r := range reasons {
		if strings.Contains(r, " "+subject+": ") && strings.Contains(r, want) {
			return true
		}
	}
	return false
}

// Args that fail a tool's schema never reach a worker: the model gets a
// retry prompt naming the problem in the same run, and tries again.
func TestSchemaFailureIsARetryPrompt(t *testing.T) {
	t.Parallel()
	sys := singleServer(t)
	var sawRetry bool
	model := agent.FunctionModel("bad-args", func(_ context.Context, req agent.ModelRequest) (agent.ModelResponse, error) {
		last := req.Messages[len(req.Messages)-1]
		for _, p := range last.Parts {
			if p.Kind == agent.PartRetryPrompt {
				sawRetry = true
				return agent.ModelResponse{Parts: []agent.Part{{Kind: agent.PartText, Content: "gave up: " + p.Content}}}, nil
			}
		}
		return agent.ModelResponse{Parts: []agent.Part{{Kind: agent.PartToolCall, ToolName: "read_file", ToolCallID: "bad", Args: json.RawMessage(`{"path": 5, "mode": "x"}`)}}}, nil
	})
	b := inProcess(t, sys, "orchestrator")
	o := startOrch(t, sys, orchestrator.Config{Bus: b, Model: model})
	info, err := o.StartRun(clCtx(t), "read it", "")
	if err != nil {
		t.Fatal(err)
	}
	c := waitTerminal(t, o, info.ConversationID)
	if c.Status != conversation.StatusCompleted || len(c.Runs) != 1 || !sawRetry {
		t.Fatalf("conversation %s (%s), %d runs, retry seen %v", c.Status, c.Error, len(c.Runs), sawRetry)
	}
	if !strings.Contains(c.Output, "path") {
		t.Errorf("the retry prompt does not name the bad field: %q", c.Output)
	}
	st, err := b.JetStream().Stream(clCtx(t), wire.StreamCalls)
	if err != nil {
		t.Fatal(err)
	}
	si, err := st.Info(clCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if si.State.LastSeq != 0 {
		t.Errorf("%d calls were published for workers", si.State.LastSeq)
	}
}

// The HTTP API refuses bad requests with a 4xx and a JSON error naming the
// problem, and a huge prompt with 413, whatever the route.
func TestHTTPBadInput(t *testing.T) {
	t.Parallel()
	sys := singleServer(t)
	o := startOrch(t, sys, orchestrator.Config{Bus: inProcess(t, sys, "orchestrator")})
	hs := httptest.NewServer(api.Handler(o, api.Config{}))
	t.Cleanup(hs.Close)
	huge := `{"prompt":"` + strings.Repeat("x", 2<<20) + `"}`
	cases := []struct {
		name, method, path, body string
		status                   int
		want                     string
	}{
		{"bad json", "POST", "/v1/runs", `{"prompt":`, 400, "body"},
		{"json array", "POST", "/v1/runs", `[]`, 400, "want a JSON object"},
		{"wrong type", "POST", "/v1/runs", `{"prompt":5}`, 400, "prompt: want string"},
		{"unknown field", "POST", "/v1/runs", `{"prompt":"hi","approved":true}`, 400, `unknown field "approved"`},
		{"null body", "POST", "/v1/runs", `null`, 400, "prompt"},
		{"huge prompt", "POST", "/v1/runs", huge, 413, "larger than"},
		{"unknown conversation", "POST", "/v1/runs", `{"prompt":"hi","conversation_id":"c-nope"}`, 404, "not found"},
		{"bad conversation id", "POST", "/v1/runs", `{"prompt":"hi","conversation_id":"../x"}`, 400, "conversation_id"},
		{"get unknown conversation", "GET", "/v1/conversations/c-nope", "", 404, "not found"},
		{"get unknown run", "GET", "/v1/runs/r-nope", "", 404, "not found"},
		{"events of an unknown conversation", "GET", "/v1/conversations/c-nope/events", "", 404, "not found"},
		{"wrong method", "PUT", "/v1/runs", `{}`, 405, "not allowed"},
		{"wrong method on pending", "POST", "/v1/pending", `{}`, 405, "not allowed"},
		{"no such path", "GET", "/v2/anything", "", 404, "no such endpoint"},
		// A web page can make a browser send these cross-site unasked.
		{"text/plain body", "POST", "/v1/runs", `{"prompt":"hi"}`, 415, "Content-Type text/plain: want application/json"},
		{"form body", "POST", "/v1/runs", `{"prompt":"hi"}`, 415, "Content-Type application/x-www-form-urlencoded: want application/json"},
	}
	contentType := map[string]string{"text/plain body": "text/plain", "form body": "application/x-www-form-urlencoded"}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			hdr := http.Header{"Content-Type": {"application/json"}}
			if ct, ok := contentType[tc.name]; ok {
				hdr.Set("Content-Type", ct)
			}
			status, out := apitest.DoJSON(t, tc.method, hs.URL+tc.path, hdr, tc.body)
			msg, _ := out["error"].(string)
			if status != tc.status || !strings.Contains(msg, tc.want) {
				t.Errorf("%d %q, want %d and an error containing %q", status, msg, tc.status, tc.want)
			}
		})
	}
	// A prompt under the body limit but too large to keep in a
	// conversation is refused as such; one at the prompt limit is taken.
	for _, tc := range []struct {
		size   int
		status int
	}{
		{(1 << 20) - 64, http.StatusRequestEntityTooLarge},
		{api.MaxPromptBytes + 1, http.StatusRequestEntityTooLarge},
		{api.MaxPromptBytes, http.StatusAccepted},
	} {
		body := `{"prompt":"` + strings.Repeat("y", tc.size) + `"}`
		resp, err := hs.Client().Post(hs.URL+"/v1/runs", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("prompt of %d bytes: %d %s, want %d", tc.size, resp.StatusCode, raw, tc.status)
		}
	}
}

// A result over wire.MaxReplyBytes from a worker that did not check it (a
// native one) is taken as a failed result saying so: the call fails at
// once, where the model sees why, instead of waiting for its deadline to
// fail as timed out although the tool ran. Nothing is dead-lettered.
func TestHugeResultFailsTheCall(t *testing.T) {
	t.Parallel()
	sys := singleServer(t)
	o := startOrch(t, sys, orchestrator.Config{Bus: inProcess(t, sys, "orchestrator")})
	test := inProcess(t, sys, "test")
	info, err := o.StartRun(clCtx(t), seedPrompt, "")
	if err != nil {
		t.Fatal(err)
	}
	var conv *conversation.State
	clWaitFor(t, "the batch", func() (bool, string) {
		conv, err = o.Conversation(clCtx(t), info.ConversationID)
		if err != nil {
			return false, err.Error()
		}
		return conv.Status == conversation.StatusPaused && conv.Batch != nil, string(conv.Status)
	})
	run := conv.Batch.RunID
	value := json.RawMessage(`"` + strings.Repeat("x", int(test.Conn().MaxPayload())-400) + `"`)
	if _, err := test.PublishCallReply(clCtx(t), wire.CallReply{RunID: run, ToolCallID: "update_file_readme", Outcome: wire.OutcomeReturn, Value: value, WorkerID: "w"}); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("result too large: %d bytes, limit %d", len(value), wire.MaxReplyBytes)
	clWaitFor(t, "the call failed as too large", func() (bool, string) {
		conv, err = o.Conversation(clCtx(t), info.ConversationID)
		if err != nil || conv.Batch == nil {
			return false, fmt.Sprint(err)
		}
		for _, pc := range conv.Batch.Calls {
			if pc.ToolCallID == "update_file_readme" && pc.Reply != nil {
				return true, ""
			}
		}
		return false, string(conv.Status)
	})
	for _, pc := range conv.Batch.Calls {
		if pc.ToolCallID != "update_file_readme" {
			continue
		}
		if r := pc.Reply; r.Outcome != conversation.OutcomeFailed || r.Message != want || r.By != "w" {
			t.Errorf("the call's reply: %s %q by %q, want failed %q by w", r.Outcome, r.Message, r.By, want)
		}
	}
	if reasons := dlqReasons(t, test); len(reasons) != 0 {
		t.Errorf("dead letters: %q", reasons)
	}
}
