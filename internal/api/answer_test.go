package api_test

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/internal/agentconfig"
	"github.com/toolgate/toolgate/internal/api"
	"github.com/toolgate/toolgate/internal/api/apitest"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/orchestrator"
	"github.com/toolgate/toolgate/internal/testkit"
	"github.com/toolgate/toolgate/internal/worker"
)

// answerAgent asks, in one response, for an approval of update_file and of
// delete_file, a frontend tool's answer (local_time) and a worker's read.
const answerAgent = `
name: files
model: {provider: script, script: script.yaml}
tools:
  - name: update_file
    parameters: {type: object, properties: {path: {type: string}, content: {type: string}}, required: [path, content]}
    approval: always
  - name: delete_file
    parameters: {type: object, properties: {path: {type: string}}, required: [path]}
    approval: always
    approval_metadata: {reason: destructive}
  - name: read_file
    parameters: {type: object, properties: {path: {type: string}}, required: [path]}
  - name: local_time
    executor: frontend
`

const answerScript = `
- calls:
    - {tool: update_file, id: upd, args: {path: a.txt, content: from the model}}
    - {tool: delete_file, id: del, args: {path: b.txt}}
    - {tool: local_time, id: time, args: {}}
    - {tool: read_file, id: read, args: {path: c.txt}}
- text: done
`

// gatedAgent's frontend tool needs an approval first.
const gatedAgent = `
name: gated
model: {provider: script, script: gated.yaml}
tools:
  - {name: send_mail, executor: frontend, approval: always}
`

const gatedScript = `
- calls:
    - {tool: send_mail, id: mail, args: {}}
- text: sent
`

// otherAgent's conversations ask two frontend questions, one of which
// expires at once.
const otherAgent = `
name: other
model: {provider: script, script: other.yaml}
tools:
  - {name: confirm, executor: frontend, deadline: 1s}
  - {name: ask, executor: frontend}
`

const otherScript = `
- calls:
    - {tool: confirm, id: other_call, args: {}}
    - {tool: ask, id: ask, args: {}}
- text: over
`

type answerEnv struct {
	url  string
	o    *testkit.Orchestrator
	cl   *client.Client
	box  string
	ann  string // ann's token
	anon string // the API's shared token
}

func newAnswerEnv(t *testing.T) *answerEnv { return newAnswerEnvWith(t, orchestrator.Config{}) }

// newAnswerEnvWith starts the system with cfg (its agents and reconcile
// interval set here).
func newAnswerEnvWith(t *testing.T, cfg orchestrator.Config) *answerEnv {
	t.Helper()
	dir := fstest.MapFS{"script.yaml": {Data: []byte(answerScript)}, "other.yaml": {Data: []byte(otherScript)}, "gated.yaml": {Data: []byte(gatedScript)}}
	var agents []*orchestrator.AgentConfig
	for _, src := range []string{answerAgent, otherAgent, gatedAgent} {
		cfg, err := agentconfig.Parse([]byte(src), dir)
		if err != nil {
			t.Fatal(err)
		}
		agents = append(agents, cfg)
	}
	sys := testkit.Test(t, testkit.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg.Agents, cfg.ReconcileInterval = agents, time.Second
	o, err := sys.Orchestrator(ctx, "orch", cfg)
	if err != nil {
		t.Fatal(err)
	}
	box := t.TempDir()
	tools, err := testkit.BuiltinTools(box, "update_file", "delete_file", "read_file")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sys.Worker(ctx, "files", worker.Config{Tools: tools}); err != nil {
		t.Fatal(err)
	}
	const annToken, sharedToken = "ann-secret", "shared-secret"
	sum := sha256.Sum256([]byte(annToken))
	users, err := api.ParseUsers([]byte("users:\n  - {name: ann, token_sha256: " + hex.EncodeToString(sum[:]) + "}\n"))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.Handler(o, api.Config{Token: sharedToken, Users: users}))
	t.Cleanup(srv.Close)
	cl, err := client.New(client.Config{BaseURL: srv.URL, Token: annToken})
	if err != nil {
		t.Fatal(err)
	}
	return &answerEnv{url: srv.URL, o: o, cl: cl, box: box, ann: annToken, anon: sharedToken}
}

func (e *answerEnv) start(t *testing.T, agent string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run, err := e.cl.Start(ctx, client.StartRequest{Prompt: "go", Agent: agent})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.cl.Wait(ctx, run.ConversationID, client.StatusPaused); err != nil {
		t.Fatal(err)
	}
	return run.ConversationID
}

func (e *answerEnv) answer(t *testing.T, token, conv, call, body string) (int, map[string]any) {
	t.Helper()
	return apitest.DoJSON(t, "POST", e.url+"/v1/conversations/"+conv+"/calls/"+call, apitest.Bearer(token), body)
}

// call is the stored state of a call of conv's batch.
func (e *answerEnv) call(t *testing.T, conv, id string) *conversation.PendingCall {
	t.Helper()
	c, err := e.o.Conversation(context.Background(), conv)
	if err != nil {
		t.Fatal(err)
	}
	for _, pc := range c.Batch.Calls {
		if pc.ToolCallID == id {
			return pc
		}
	}
	t.Fatalf("conversation %s: no call %s in its batch", conv, id)
	return nil
}

// The route takes decisions and a frontend tool's result from the API's
// authenticated callers, checks each as a bot's decision or a worker's
// result is checked, records refusals on their call, and the follow-up
// runs with what was applied: the edited args, the denial's message and
// the frontend's value.
func TestAnswerRoute(t *testing.T) {
	t.Parallel()
	e := newAnswerEnv(t)
	conv := e.start(t, "files")
	other := e.start(t, "other")
	if pc := e.call(t, conv, "time"); !pc.Published || pc.Executor != orchestrator.ExecutorFrontend {
		// A frontend call is marked published when the batch is made, so
		// that nothing (the pause, reconcile) ever publishes it.
		t.Errorf("frontend call: published %v executor %q", pc.Published, pc.Executor)
	}

	refusals := []struct {
		name, token, conv, call, body string
		status                        int
		want                          string
		// counted names the call whose Refused (or Late) counter the
		// refusal raises.
		counted string
		late    bool
	}{
		{"no token", "", conv, "upd", `{"decision":{"approved":true,"args":{}}}`, 401, "bearer", "", false},
		{"no args binding", e.ann, conv, "upd", `{"decision":{"approved":true}}`, 400, "args or args_digest", "", false},
		{"unknown call", e.ann, conv, "nope", `{"decision":{"approved":true,"args":{}}}`, 404, "issued no call nope", "", false},
		{"other conversation's call", e.ann, conv, "other_call", `{"result":"yes"}`, 404, "issued no call other_call", "", false},
		{"decision for a frontend call", e.ann, conv, "time", `{"decision":{"approved":true,"args":{}}}`, 422, "wrong kind", "time", false},
		{"result for an approval", e.ann, conv, "upd", `{"result":"done"}`, 422, "wrong kind", "upd", false},
		{"result for a worker's call", e.ann, conv, "read", `{"result":"forged"}`, 422, "executed by workers", "", false},
		{"args differ", e.ann, conv, "del", `{"decision":{"approved":true,"args":{"path":"c.txt"}}}`, 422, "args digest", "del", false},
		{"unknown conversation", e.ann, "nope", "upd", `{"decision":{"approved":true,"args":{}}}`, 404, "not found", "", false},
	}
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			var before int
			if tc.counted != "" {
				before = e.call(t, tc.conv, tc.counted).Refused
			}
			status, body := e.answer(t, tc.token, tc.conv, tc.call, tc.body)
			if msg, _ := body["error"].(string); status != tc.status || !strings.Contains(msg, tc.want) {
				t.Fatalf("%d %v, want %d with %q", status, body, tc.status, tc.want)
			}
			if tc.counted != "" {
				if after := e.call(t, tc.conv, tc.counted).Refused; after != before+1 {
					t.Errorf("refusals of %s: %d, want %d", tc.counted, after, before+1)
				}
			}
		})
	}

	// A late answer: other_call expired while ask still waits.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for e.call(t, other, "other_call").Reply == nil {
		select {
		case <-ctx.Done():
			t.Fatal("other_call did not expire")
		case <-time.After(20 * time.Millisecond):
		}
	}
	if status, body := e.answer(t, e.ann, other, "other_call", `{"result":"yes"}`); status != http.StatusConflict || !strings.Contains(body["error"].(string), "expired") {
		t.Fatalf("late answer: %d %v", status, body)
	}
	if pc := e.call(t, other, "other_call"); pc.Late != 1 {
		t.Errorf("late answers recorded on other_call: %d", pc.Late)
	}

	// The answers that count.
	status, body := e.answer(t, e.anon, conv, "upd", `{"decision":{"approved":true,"args":{"path":"a.txt","content":"from the model"},"override_args":{"path":"a.txt","content":"edited"},"metadata":{"ticket":7}}}`)
	if status != http.StatusAccepted || body["by"] != api.CallerToken {
		t.Fatalf("approve with edited args: %d %v", status, body)
	}
	if status, body := e.answer(t, e.ann, conv, "upd", `{"decision":{"approved":false,"args":{"path":"a.txt","content":"from the model"}}}`); status != http.StatusConflict || !strings.Contains(body["error"].(string), "already answered") {
		t.Fatalf("second answer: %d %v", status, body)
	}
	if status, body := e.answer(t, e.ann, conv, "del", `{"decision":{"approved":false,"args_digest":"`+e.call(t, conv, "del").ArgsDigest+`","message":"keep b.txt"}}`); status != http.StatusAccepted || body["by"] != "ann" {
		t.Fatalf("deny: %d %v", status, body)
	}
	if status, body := e.answer(t, e.ann, conv, "time", `{"result":{"kind":"tool-return","return_value":"12:00","content":"noon"}}`); status != http.StatusAccepted {
		t.Fatalf("frontend result: %d %v", status, body)
	}
	done, err := e.cl.Wait(ctx, conv, client.StatusCompleted)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(e.box, "a.txt")); err != nil || string(got) != "edited" {
		t.Errorf("a.txt = %q, %v; want the edited args' content", got, err)
	}
	view, _ := json.Marshal(done.Messages)
	for _, want := range []string{`"content":"keep b.txt","outcome":"denied"`, `"12:00"`} {
		if !strings.Contains(string(view), want) {
			t.Errorf("history lacks %s: %s", want, view)
		}
	}
	c, err := e.o.Conversation(ctx, conv)
	if err != nil {
		t.Fatal(err)
	}
	by := map[string]string{}
	for _, d := range c.Decisions {
		by[d.ToolCallID] = d.ApproverID
	}
	if by["upd"] != api.CallerToken || by["del"] != "ann" {
		t.Errorf("decisions by %v, want upd by %s and del by ann", by, api.CallerToken)
	}
	// Once the batch is over an answer is a repeat, not applied.
	if status, _ := e.answer(t, e.ann, conv, "time", `{"result":"13:00"}`); status != http.StatusConflict {
		t.Errorf("answer after the follow-up: %d, want 409", status)
	}
}

// Once approver keys are trusted, a decision over HTTP counts only from a
// caller the users file names: the shared token's holder and a tokenless
// local caller are refused (403), a named user is not.
func TestAnswerRouteWithTrustedKeys(t *testing.T) {
	t.Parallel()
	pub, _, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	e := newAnswerEnvWith(t, orchestrator.Config{TrustedApprovers: map[string]ed25519.PublicKey{"bot": pub}})
	conv := e.start(t, "files")
	const deny = `{"decision":{"approved":false,"args":{"path":"b.txt"}}}`
	if status, body := e.answer(t, e.anon, conv, "del", deny); status != http.StatusForbidden || !strings.Contains(body["error"].(string), "users") {
		t.Fatalf("shared token: %d %v", status, body)
	}
	if e.call(t, conv, "del").Settled() {
		t.Fatal("del answered by a refused decision")
	}
	if status, body := e.answer(t, e.ann, conv, "del", deny); status != http.StatusAccepted || body["by"] != "ann" {
		t.Fatalf("named user: %d %v", status, body)
	}
}

// An approved call of a frontend's tool is not dispatched to workers: it
// waits for the frontend's result in the follow-up, as any frontend call.
func TestApprovedFrontendCallWaitsForTheFrontend(t *testing.T) {
	t.Parallel()
	e := newAnswerEnv(t)
	conv := e.start(t, "gated")
	pc := e.call(t, conv, "mail")
	if pc.Dispatch != 0 {
		t.Fatalf("frontend approval marked for dispatch to workers: %v", pc.Dispatch)
	}
	if status, body := e.answer(t, e.ann, conv, "mail", `{"decision":{"approved":true,"args_digest":"`+pc.ArgsDigest+`"}}`); status != http.StatusAccepted {
		t.Fatalf("approve: %d %v", status, body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		c, err := e.o.Conversation(ctx, conv)
		if err != nil {
			t.Fatal(err)
		}
		if c.Status == conversation.StatusPaused && c.Batch != nil && len(c.Runs) == 2 {
			if got := c.Batch.Calls; len(got) != 1 || got[0].ToolCallID != "mail" || got[0].Executor != orchestrator.ExecutorFrontend {
				t.Fatalf("follow-up batch: %+v, want the frontend's call", got)
			}
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no follow-up waiting for the frontend: %s, %d runs", c.Status, len(c.Runs))
		case <-time.After(20 * time.Millisecond):
		}
	}
	if status, body := e.answer(t, e.ann, conv, "mail", `{"result":"sent by the browser"}`); status != http.StatusAccepted {
		t.Fatalf("frontend result: %d %v", status, body)
	}
	if _, err := e.cl.Wait(ctx, conv, client.StatusCompleted); err != nil {
		t.Fatal(err)
	}
}
