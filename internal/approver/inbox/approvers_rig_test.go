package inbox_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/toolgate/toolgate/internal/agentconfig"
	"github.com/toolgate/toolgate/internal/approver"
	"github.com/toolgate/toolgate/internal/approver/inbox"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/orchestrator"
	"github.com/toolgate/toolgate/internal/testkit"
	"github.com/toolgate/toolgate/wire"
)

// opsAgent has two tools with different approvers: deploy is ann's (who
// may approve it in her own runs), delete_file bob's; restart may be
// decided by anyone trusted, but not approved by the run's caller
// (self_approval is denied by default).
const opsAgent = `
name: ops
model: {provider: script, script: script.yaml}
trust:
  ann: %q
  bob: %q
tools:
  - name: deploy
    description: Deploy a service.
    parameters: {type: object, properties: {service: {type: string}}, required: [service], additionalProperties: false}
    approval: always
    approvers: [ann]
    self_approval: allow
  - name: delete_file
    description: Delete a file.
    parameters: {type: object, properties: {path: {type: string}}, required: [path], additionalProperties: false}
    approval: always
    approvers: [bob]
  - name: restart
    description: Restart a service.
    parameters: {type: object, properties: {service: {type: string}}, required: [service], additionalProperties: false}
    approval: always
`

// opsScript asks for all three in one response, with the same ids and
// args in every conversation.
const opsScript = `
- calls:
    - {tool: deploy, id: dep, args: {service: web}}
    - {tool: delete_file, id: del, args: {path: old.txt}}
    - {tool: restart, id: rst, args: {service: web}}
- text: done
`

// opsRig is a real orchestrator of opsAgent whose approvers ann and bob
// each run an inbox with their key. The replica trusts their keys too,
// as grants put on the bus are checked against its keys.
type opsRig struct {
	sys       *testkit.System
	orch      *testkit.Orchestrator
	test      *bus.Bus // a connection of the test's own
	keys      map[string]ed25519.PrivateKey
	inboxes   map[string]*inbox.Inbox
	pages     map[string]*httptest.Server
	inboxBus  map[string]*bus.Bus
	agentConf *orchestrator.AgentConfig
}

func newOpsRig(t *testing.T) *opsRig {
	t.Helper()
	ctx := bustest.Context(t)
	r := &opsRig{keys: map[string]ed25519.PrivateKey{}, inboxes: map[string]*inbox.Inbox{},
		pages: map[string]*httptest.Server{}, inboxBus: map[string]*bus.Bus{}}
	pubs := map[string]string{}
	trusted := map[string]ed25519.PublicKey{}
	for _, name := range []string{"ann", "bob"} {
		pub, key, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		r.keys[name], pubs[name], trusted[name] = key, base64.StdEncoding.EncodeToString(pub), pub
	}
	cfg, err := agentconfig.Parse([]byte(fmt.Sprintf(opsAgent, pubs["ann"], pubs["bob"])),
		fstest.MapFS{"script.yaml": {Data: []byte(opsScript)}})
	if err != nil {
		t.Fatalf("agent config: %v", err)
	}
	r.agentConf = cfg
	r.sys = testkit.Test(t, testkit.Options{Logger: bustest.Logger(t)})
	if r.orch, err = r.sys.Orchestrator(ctx, "orchestrator", orchestrator.Config{Agent: cfg, TrustedApprovers: trusted}); err != nil {
		t.Fatal(err)
	}
	r.test = r.connect(t, "test")
	for _, name := range []string{"ann", "bob"} {
		b := r.connect(t, name+"-inbox")
		in, _ := startInbox(t, inbox.Config{Bus: b, ID: name, Key: r.keys[name], PollInterval: 500 * time.Millisecond})
		srv := httptest.NewServer(in.Handler())
		t.Cleanup(srv.Close)
		r.inboxes[name], r.pages[name], r.inboxBus[name] = in, srv, b
	}
	return r
}

func (r *opsRig) connect(t *testing.T, name string) *bus.Bus {
	t.Helper()
	b, err := r.sys.Connect(bustest.Context(t), bus.ConnConfig{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

// start starts a conversation whose run's caller is caller (a JSON
// value; empty for none) and waits for it to pause on its approvals.
func (r *opsRig) start(t *testing.T, caller string) (convID string, pending []wire.PendingCall) {
	t.Helper()
	ctx := bustest.Context(t)
	req := orchestrator.StartRequest{Prompt: "Roll out web"}
	if caller != "" {
		req.Caller = json.RawMessage(caller)
	}
	info, err := r.orch.StartRunWith(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	bustest.Poll(t, bustest.Timeout, "conversation "+info.ConversationID+" paused", func() (bool, string) {
		c, err := r.orch.Conversation(ctx, info.ConversationID)
		if err != nil {
			return false, err.Error()
		}
		pending = c.PendingCalls()
		return c.Status == conversation.StatusPaused && len(pending) > 0, string(c.Status)
	})
	return info.ConversationID, pending
}

// callOf is the pending call of tool among pcs.
func callOf(t *testing.T, pcs []wire.PendingCall, tool string) wire.PendingCall {
	t.Helper()
	i := slices.IndexFunc(pcs, func(pc wire.PendingCall) bool { return pc.ToolName == tool })
	if i < 0 {
		t.Fatalf("no pending call of %s in %+v", tool, pcs)
	}
	return pcs[i]
}

// tools lists the tools of the requests an inbox shows, sorted.
func tools(in *inbox.Inbox) string {
	var out []string
	for _, it := range in.Pending() {
		out = append(out, it.ToolName)
	}
	slices.Sort(out)
	return strings.Join(out, ",")
}

// waitTools waits until the inbox shows the requests of exactly tools.
func waitTools(t *testing.T, in *inbox.Inbox, want string) {
	t.Helper()
	bustest.Poll(t, bustest.Timeout, "inbox showing "+want, func() (bool, string) {
		got := tools(in)
		return got == want, got
	})
}

// A request its approvers do not name this inbox's approver for is not
// shown; published again on its escalation with the approver among them,
// it is, and decided.
func TestInboxShowsACallOnceEscalatedToItsApprover(t *testing.T) {
	t.Parallel()
	b := bustest.NewBus(t)
	in, _ := startInbox(t, inbox.Config{Bus: b, ID: "bob"})
	first := request(t, "run-1", "call-1", `{"path":"a"}`, time.Now().Add(time.Hour))
	first.Approvers, first.Attempt = []string{"ann"}, 1
	mine := request(t, "run-2", "call-2", `{"path":"b"}`, time.Now().Add(time.Hour))
	mine.Approvers = []string{"bob"}
	publish(t, b, first, mine)
	waitPending(t, in, "run-2/call-2")
	if _, err := in.Decide(bustest.Context(t), "run-1", "call-1", approver.Choice{Message: "no"}); err == nil || !strings.Contains(err.Error(), `approver "bob" may not decide tool delete_file (approvers: ann)`) {
		t.Fatalf("decision on ann's call: %v", err)
	}
	escalated := first
	escalated.Attempt, escalated.EscalatedTo, escalated.Approvers = 2, []string{"ops"}, []string{"ann", "bob"}
	publish(t, b, escalated)
	waitPending(t, in, "run-1/call-1", "run-2/call-2")
	if _, err := in.Decide(bustest.Context(t), "run-1", "call-1", approver.Choice{Message: "no"}); err != nil {
		t.Fatalf("decision once escalated: %v", err)
	}
	if d := waitDecision(t, b, "run-1"); d.ApproverID != "bob" || d.Approved {
		t.Errorf("decision %+v", d)
	}
	if _, err := in.Decide(bustest.Context(t), "run-1", "call-1", approver.Choice{Message: "no"}); !errors.Is(err, inbox.ErrNotPending) {
		t.Errorf("deciding it again: %v, want not pending", err)
	}
}
