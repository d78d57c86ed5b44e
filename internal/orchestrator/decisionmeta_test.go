package orchestrator_test

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/deferred"
	"github.com/toolgate/toolgate/internal/orchestrator"
	"github.com/toolgate/toolgate/internal/worker"
	"github.com/toolgate/toolgate/wire"
)

// seenMetadata records the metadata each call reached its tool with.
type seenMetadata struct {
	mu   sync.Mutex
	meta map[string]string
}

func (s *seenMetadata) add(callID string, meta json.RawMessage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.meta == nil {
		s.meta = map[string]string{}
	}
	s.meta[callID] = string(meta)
}

func (s *seenMetadata) get(callID string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.meta[callID]
	return m, ok
}

// decideSigned publishes a decision with metadata on call of c's batch,
// signed by key when it is not nil.
func decideSigned(t *testing.T, b *bus.Bus, c *conversation.State, call string, approved bool, meta string, key ed25519.PrivateKey) {
	t.Helper()
	pc := pendingCall(t, c, call)
	d := wire.Decision{RunID: c.Batch.RunID, ToolCallID: call, ArgsDigest: pc.ArgsDigest, Approved: approved,
		ApproverID: "bot", DecidedAt: time.Now().UTC()}
	if meta != "" {
		d.Metadata = json.RawMessage(meta)
	}
	if !approved {
		d.Message = "not allowed"
	}
	if key != nil {
		if err := d.Sign(key); err != nil {
			t.Fatal(err)
		}
	}
	publishRaw(t, b, decisionSubject(t, c.Batch.RunID), "decision-"+call, d)
}

// The metadata of a decision on the bus reaches the approved call's
// worker in its call request, as Results.Metadata reaches a tool (D23); a
// call that needed no approval goes with none.
func TestDecisionMetadataReachesTheWorker(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	seen := &seenMetadata{}
	bi, err := worker.NewBuiltin(filepath.Join(t.TempDir(), "sandbox"))
	if err != nil {
		t.Fatal(err)
	}
	var tools []worker.Tool
	for _, spec := range worker.BuiltinTools() {
		tools = append(tools, worker.Tool{Spec: spec, Executor: worker.ExecutorFunc(func(ctx context.Context, req wire.CallRequest) (wire.CallReply, error) {
			seen.add(req.ToolCallID, req.Metadata)
			return bi.Execute(ctx, req)
		})})
	}
	p, err := e.sys.Worker(ctxT(t), "worker", worker.Config{Tools: tools, ID: "worker-1", Logger: testLogger(t), DrainTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	e.stopAtCleanup("worker", p)
	o, _ := e.orch(orchestrator.Config{})
	c := startPaused(t, o)
	b := e.connect("test")

	decideSigned(t, b, c, "delete_file", false, "", nil)
	decideSigned(t, b, c, "update_file_dotenv", true, `{"ticket":"OPS-7"}`, nil)
	c = waitStatus(t, o, c.ID, conversation.StatusCompleted, conversation.StatusFailed)
	checkSeedHistory(t, c)
	if got, ok := seen.get("update_file_dotenv"); !ok || got != `{"ticket":"OPS-7"}` {
		t.Errorf("the approved call reached its worker with metadata %q (run: %v), want the decision's", got, ok)
	}
	if got, ok := seen.get("update_file_readme"); !ok || got != "" {
		t.Errorf("the call without approval reached its worker with metadata %q (run: %v), want none", got, ok)
	}
}

// The metadata of a signed decision on the bus reaches an in-process Go
// tool as RunContext.ToolCallMetadata in the follow-up that runs it.
func TestDecisionMetadataReachesAnInProcessTool(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	seen := &seenMetadata{}
	pay, err := agent.NewTool("pay", "Pay an amount.", func(rc *agent.RunContext, a payArgs) (string, error) {
		seen.add(rc.ToolCallID, rc.ToolCallMetadata)
		return "paid", nil
	}, agent.WithValidator(func(rc *agent.RunContext, a payArgs) error {
		if !rc.ToolCallApproved {
			return deferred.ApprovalRequired(map[string]any{"reason": "payment"})
		}
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	pub, key := newKey(t)
	o, _ := e.orch(orchestrator.Config{Agent: besideAgent(t), Model: scriptModel(t, "- calls:\n  - {tool: pay, id: p1, args: {cents: 5000}}\n- text: done\n"),
		Tools: []agent.Tool{pay}, TrustedApprovers: map[string]ed25519.PublicKey{"bot": pub}})
	info, err := o.StartRun(ctxT(t), "pay", "")
	if err != nil {
		t.Fatal(err)
	}
	c := waitStatus(t, o, info.ConversationID, conversation.StatusPaused)
	decideSigned(t, e.connect("test"), c, "p1", true, `{"approved_budget": 6000}`, key)
	c = waitStatus(t, o, info.ConversationID, conversation.StatusCompleted, conversation.StatusFailed)
	if c.Status != conversation.StatusCompleted {
		t.Fatalf("%s", describe(c))
	}
	if got, ok := seen.get("p1"); !ok || got != `{"approved_budget": 6000}` {
		t.Errorf("pay ran with metadata %q (run: %v), want the decision's", got, ok)
	}
}
