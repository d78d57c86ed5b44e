package approver_test

import (
	"cmp"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolgate/toolgate/internal/approver"
	"github.com/toolgate/toolgate/internal/approver/inbox"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/orchestrator"
	"github.com/toolgate/toolgate/internal/telemetry"
	"github.com/toolgate/toolgate/internal/telemetry/telemetrytest"
	"github.com/toolgate/toolgate/internal/testkit"
	"github.com/toolgate/toolgate/wire"
)

const seedPrompt = "Delete `__init__.py`, write `Hello, world!` to `README.md`, and clear `.env`"

// settledRig is a real orchestrator with three conversations of the seed,
// each paused on its approvals (the offline model gives the same tool call
// ids in each): one cancelled and deleted, one whose approvals another
// approver decided, one still pending. Only the last one's requests may be
// shown or decided.
type settledRig struct {
	sys  *testkit.System
	orch *testkit.Orchestrator
	// bus is a connection of the approver's.
	bus                    *bus.Bus
	deleted, decided, live string
	// pending are the live conversation's approval calls.
	pending []wire.PendingCall
}

func newSettledRig(t *testing.T, cfg orchestrator.Config) *settledRig {
	t.Helper()
	return newSettledRigWith(t, cfg, false)
}

// newSettledRigWith is newSettledRig; with users, the server admits only
// toolgate's users, each with its role's permissions, and the orchestrator
// and the approver connect as theirs.
func newSettledRigWith(t *testing.T, cfg orchestrator.Config, users bool) *settledRig {
	t.Helper()
	ctx := bustest.Context(t)
	// The other approver is trusted wherever keys are.
	otherPub, otherKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.TrustedApprovers != nil {
		cfg.TrustedApprovers["other"] = otherPub
	}
	opts := testkit.Options{Logger: bustest.Logger(t)}
	approverConn := bus.ConnConfig{Name: "approver-test"}
	if users {
		for _, role := range []string{bus.RoleOrchestrator, bus.RoleApprover} {
			p, err := bus.RolePermissions(role)
			if err != nil {
				t.Fatal(err)
			}
			opts.Server.Users = append(opts.Server.Users, bus.User{Name: role, Password: role + "-pw", Role: role, Permissions: p})
		}
		approverConn = bus.ConnConfig{Name: "approver-test", User: bus.RoleApprover, Password: bus.RoleApprover + "-pw", Role: bus.RoleApprover}
	}
	sys := testkit.Test(t, opts)
	if users {
		ob, err := sys.Connect(ctx, bus.ConnConfig{Name: "orchestrator", User: bus.RoleOrchestrator, Password: bus.RoleOrchestrator + "-pw", Role: bus.RoleOrchestrator})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(ob.Close)
		cfg.Bus = ob
	}
	o, err := sys.Orchestrator(ctx, "orchestrator", cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := sys.Connect(ctx, approverConn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	r := &settledRig{sys: sys, orch: o, bus: b}
	var convs []string
	for range 3 {
		info, err := o.StartRunWith(ctx, orchestrator.StartRequest{Prompt: seedPrompt})
		if err != nil {
			t.Fatal(err)
		}
		convs = append(convs, info.ConversationID)
		r.approvals(t, info.ConversationID)
	}
	r.deleted, r.decided, r.live = convs[0], convs[1], convs[2]

	if _, err := o.Cancel(ctx, r.deleted); err != nil {
		t.Fatal(err)
	}
	if err := o.Delete(ctx, r.deleted); err != nil {
		t.Fatal(err)
	}
	for _, pc := range r.approvals(t, r.decided) {
		d, err := approver.NewDecision(requestOf(t, pc), "other", approver.Choice{Approve: true}, otherKey, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.PublishDecision(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	bustest.Poll(t, bustest.Timeout, "the decided conversation's approvals applied", func() (bool, string) {
		c, err := o.Conversation(ctx, r.decided)
		if err != nil {
			return false, err.Error()
		}
		return len(approvalCalls(c)) == 0, fmt.Sprint(approvalCalls(c))
	})
	r.pending = r.approvals(t, r.live)
	return r
}

// approvals waits for conv to pause on its approvals and returns them.
func (r *settledRig) approvals(t *testing.T, conv string) []wire.PendingCall {
	t.Helper()
	var pcs []wire.PendingCall
	bustest.Poll(t, bustest.Timeout, "conversation "+conv+" paused on approvals", func() (bool, string) {
		c, err := r.orch.Conversation(bustest.Context(t), conv)
		if err != nil {
			return false, err.Error()
		}
		pcs = approvalCalls(c)
		return c.Status == conversation.StatusPaused && len(pcs) > 0, string(c.Status)
	})
	return pcs
}

func approvalCalls(c *conversation.State) []wire.PendingCall {
	var out []wire.PendingCall
	for _, pc := range c.PendingCalls() {
		if pc.Kind == wire.ReplyKindApproval {
			out = append(out, pc)
		}
	}
	return out
}

// requestOf is the approval request of a pending call, as far as a
// decision needs it.
func requestOf(t *testing.T, pc wire.PendingCall) wire.ApprovalRequest {
	t.Helper()
	digest, err := wire.DigestArgs(pc.Args)
	if err != nil {
		t.Fatal(err)
	}
	return wire.ApprovalRequest{RunID: pc.RunID, ConversationID: pc.ConversationID, ToolCallID: pc.ToolCallID,
		ToolName: pc.ToolName, Args: pc.Args, ArgsDigest: digest, Deadline: pc.Deadline}
}

// liveRefs are the runs/calls of the live conversation's approvals.
func (r *settledRig) liveRefs() []string {
	var out []string
	for _, pc := range r.pending {
		out = append(out, pc.RunID+"/"+pc.ToolCallID)
	}
	slices.Sort(out)
	return out
}

// recordingAsker is a person who gives every request the same answer
// (skips it by default), remembering each and what it was told.
type recordingAsker struct {
	answer approver.Action
	mu     sync.Mutex
	asked  []string
	told   []string
}

func (a *recordingAsker) Ask(_ context.Context, req wire.ApprovalRequest) (approver.Verdict, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.asked = append(a.asked, req.RunID+"/"+req.ToolCallID)
	return approver.Verdict{Action: cmp.Or(a.answer, approver.ActionEscalate)}, nil
}

func (a *recordingAsker) Tell(msg string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.told = append(a.told, msg)
}

// An interactive approver asks a person only about pending requests: the
// deleted conversation's and the decided ones are skipped as settled.
func TestInteractiveApproverAsksOnlyAboutPendingRequests(t *testing.T) {
	t.Parallel()
	r := newSettledRig(t, orchestrator.Config{})
	asker := &recordingAsker{}
	events := runApprover(t, approver.Config{Bus: r.bus, ID: "person", Asker: asker})
	got := map[approver.Outcome][]string{}
	for range 3 * len(r.pending) {
		h := next(t, events)
		got[h.outcome] = append(got[h.outcome], h.req.RunID+"/"+h.req.ToolCallID)
	}
	asker.mu.Lock()
	asked := slices.Sorted(slices.Values(asker.asked))
	asker.mu.Unlock()
	if want := r.liveRefs(); !slices.Equal(asked, want) {
		t.Errorf("asked about %v, want only the pending %v", asked, want)
	}
	if n := len(got[approver.OutcomeSettled]); n != 2*len(r.pending) {
		t.Errorf("%d requests skipped as settled, want %d: %v", n, 2*len(r.pending), got)
	}
}

// A decision the orchestrator refuses (its signer is not trusted) is
// reported as refused: the outcome, the person told, the metric.
func TestApproverReportsARefusedDecision(t *testing.T) {
	t.Parallel()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	r := newSettledRig(t, orchestrator.Config{TrustedApprovers: map[string]ed25519.PublicKey{"bot": pub}})
	pol, err := approver.ParsePolicy([]byte("rules:\n  - action: approve\n"))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	events := runApprover(t, approver.Config{Bus: r.bus, ID: "bot", Policy: pol, Metrics: telemetry.NewApproverMetrics(reg)})
	got := map[approver.Outcome][]string{}
	for range 3 * len(r.pending) {
		h := next(t, events)
		got[h.outcome] = append(got[h.outcome], h.req.RunID+"/"+h.req.ToolCallID)
	}
	slices.Sort(got[approver.OutcomeRefused])
	if want := r.liveRefs(); !slices.Equal(got[approver.OutcomeRefused], want) {
		t.Errorf("refused %v, want %v (all outcomes %v)", got[approver.OutcomeRefused], want, got)
	}
	if len(got[approver.OutcomeApproved]) != 0 {
		t.Errorf("reported approved: %v", got[approver.OutcomeApproved])
	}
	fams := telemetrytest.Scrape(t, telemetry.Handler(reg))
	if n, _ := fams.Value("toolgate_decisions_total", "approver", "bot", "action", "refused"); int(n) != len(r.pending) {
		t.Errorf("toolgate_decisions_total{action=refused} = %v, want %d", n, len(r.pending))
	}
}

// refusedReason returns the reason of a *RefusedError, or fails.
func refusedReason(t *testing.T, err error) string {
	t.Helper()
	var refused *approver.RefusedError
	if !errors.As(err, &refused) {
		t.Fatalf("err = %v, want a *RefusedError", err)
	}
	return refused.Reason
}

// approver list shows only the pending requests, and approve by a tool
// call id the three conversations share resolves to the live one (not
// "ambiguous"), is applied, and says so; a second approval of it is
// refused and reported as such.
func TestCLIListsAndDecidesOnlyPendingRequests(t *testing.T) {
	t.Parallel()
	r := newSettledRig(t, orchestrator.Config{})
	ctx := bustest.Context(t)
	var out, progress strings.Builder
	c := &approver.CLI{Bus: r.bus, ID: "cli", Out: &out, Progress: &progress}
	ps, err := c.Pending(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, p := range ps {
		listed = append(listed, p.Request.RunID+"/"+p.Request.ToolCallID)
	}
	slices.Sort(listed)
	if want := r.liveRefs(); !slices.Equal(listed, want) {
		t.Fatalf("listed %v, want only %v", listed, want)
	}
	if err := c.List(ctx); err != nil {
		t.Fatal(err)
	}
	for _, conv := range []string{r.deleted, r.decided} {
		if strings.Contains(out.String(), conv) {
			t.Errorf("list shows settled conversation %s:\n%s", conv, out.String())
		}
	}

	pc := r.pending[0]
	out.Reset()
	if err := c.Approve(ctx, pc.ToolCallID, nil, nil); err != nil {
		t.Fatalf("approve %s: %v", pc.ToolCallID, err)
	}
	if want := "approved " + pc.RunID + "/" + pc.ToolCallID; !strings.Contains(out.String(), want) {
		t.Errorf("approve said %q, want %q", out.String(), want)
	}
	cv, err := r.orch.Conversation(ctx, r.live)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range approvalCalls(cv) {
		if p.ToolCallID == pc.ToolCallID {
			t.Errorf("%s still pending after approve said applied", pc.ToolCallID)
		}
	}
	// Decided already: the CLI no longer finds it.
	if err := c.Approve(ctx, pc.ToolCallID, nil, nil); !errors.Is(err, approver.ErrNoRequest) {
		t.Errorf("second approve: err = %v, want ErrNoRequest", err)
	}
}

// A decision the orchestrator refuses (an unsigned one where keys are
// trusted) is an error naming the reason, not "approved".
func TestCLIReportsARefusedDecision(t *testing.T) {
	t.Parallel()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	r := newSettledRig(t, orchestrator.Config{TrustedApprovers: map[string]ed25519.PublicKey{"cli": pub}})
	var out strings.Builder
	c := &approver.CLI{Bus: r.bus, ID: "cli", Out: &out}
	err = c.Approve(bustest.Context(t), r.pending[0].RunID+"/"+r.pending[0].ToolCallID, nil, nil)
	if reason := refusedReason(t, err); !strings.Contains(reason, "not signed") {
		t.Errorf("refused for %q, want the signature named", reason)
	}
	if out.Len() != 0 {
		t.Errorf("approve printed %q for a refused decision", out.String())
	}
}

// startInbox runs an inbox (no --orchestrator) until the test ends.
func startInbox(t *testing.T, cfg inbox.Config) *inbox.Inbox {
	t.Helper()
	cfg.Logger = bustest.Logger(t)
	in, err := inbox.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	bustest.Run(t, "inbox", in.Run)
	return in
}

// cards are the run/call of the requests an inbox shows.
func cards(in *inbox.Inbox) []string {
	var out []string
	for _, it := range in.Pending() {
		out = append(out, it.RunID+"/"+it.ToolCallID)
	}
	slices.Sort(out)
	return out
}

// An inbox started right after a conversation was deleted, without
// --orchestrator, takes requests at once (it does not wait for a replay of
// events the delete purged) and shows only the pending ones, once it has
// looked at every request of the stream.
func TestInboxShowsOnlyPendingRequests(t *testing.T) {
	t.Parallel()
	r := newSettledRig(t, orchestrator.Config{})
	in := startInbox(t, inbox.Config{Bus: r.bus, ID: "person", CatchUpTimeout: time.Hour})
	ctx := bustest.Context(t)
	bustest.Poll(t, bustest.Timeout, "the inbox to show the pending requests, having seen all", func() (bool, string) {
		if !in.Ready() {
			return false, "not ready"
		}
		c, err := r.bus.JetStream().Consumer(ctx, wire.StreamApprovals, "person-inbox")
		if err != nil {
			return false, err.Error()
		}
		info, err := c.Info(ctx)
		if err != nil {
			return false, err.Error()
		}
		shown := cards(in)
		return info.NumPending == 0 && info.NumAckPending == len(shown) && slices.Equal(shown, r.liveRefs()),
			fmt.Sprintf("shown %v, want %v; consumer pending %d, unacked %d", shown, r.liveRefs(), info.NumPending, info.NumAckPending)
	})
}

// A decision made in the inbox that the orchestrator refuses (unsigned,
// where keys are trusted) is reported as refused, not as decided; the
// card stays, since the call still waits.
func TestInboxReportsARefusedDecision(t *testing.T) {
	t.Parallel()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	r := newSettledRig(t, orchestrator.Config{TrustedApprovers: map[string]ed25519.PublicKey{"person": pub}})
	in := startInbox(t, inbox.Config{Bus: r.bus, ID: "person"})
	bustest.Poll(t, bustest.Timeout, "the pending requests shown", func() (bool, string) {
		return slices.Equal(cards(in), r.liveRefs()), fmt.Sprint(cards(in))
	})
	pc := r.pending[0]
	_, err = in.Decide(bustest.Context(t), pc.RunID, pc.ToolCallID, approver.Choice{Approve: true})
	if reason := refusedReason(t, err); !strings.Contains(reason, "not signed") {
		t.Errorf("refused for %q", reason)
	}
	if !slices.Equal(cards(in), r.liveRefs()) {
		t.Errorf("cards after a refused decision: %v, want %v", cards(in), r.liveRefs())
	}
}

// Under toolgate's users an approver may ask what is pending and hear the
// outcome of its decision, and the orchestrator may answer it.
func TestStatusAndOutcomeUnderRolePermissions(t *testing.T) {
	t.Parallel()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	r := newSettledRigWith(t, orchestrator.Config{TrustedApprovers: map[string]ed25519.PublicKey{"cli": pub}}, true)
	ctx := bustest.Context(t)
	c := &approver.CLI{Bus: r.bus, ID: "cli", Out: io.Discard}
	ps, err := c.Pending(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != len(r.pending) {
		t.Errorf("%d pending listed, want %d", len(ps), len(r.pending))
	}
	err = c.Approve(ctx, r.pending[0].RunID+"/"+r.pending[0].ToolCallID, nil, nil)
	if reason := refusedReason(t, err); !strings.Contains(reason, "not signed") {
		t.Errorf("refused for %q", reason)
	}
}

// A person at --interactive whose answer the orchestrator refuses is told
// so, with the reason.
func TestInteractiveApproverTellsTheRefusal(t *testing.T) {
	t.Parallel()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	r := newSettledRig(t, orchestrator.Config{TrustedApprovers: map[string]ed25519.PublicKey{"person": pub}})
	asker := &recordingAsker{answer: approver.ActionApprove}
	events := runApprover(t, approver.Config{Bus: r.bus, ID: "person", Asker: asker})
	refused := 0
	for range 3 * len(r.pending) {
		if next(t, events).outcome == approver.OutcomeRefused {
			refused++
		}
	}
	asker.mu.Lock()
	defer asker.mu.Unlock()
	if refused != len(r.pending) || len(asker.told) != len(r.pending) {
		t.Fatalf("%d refused, told %q; want %d each", refused, asker.told, len(r.pending))
	}
	for _, m := range asker.told {
		if !strings.Contains(m, "refused") || !strings.Contains(m, "not signed") {
			t.Errorf("told %q", m)
		}
	}
}

// A decision the orchestrator finds a duplicate is applied as far as its
// approver is concerned when the call was decided by that approver (an
// earlier decision of its own, or this one handled again after a
// restart), and refused, naming who decided, when another approver did.
func TestDuplicateDecisionReportedByWhoDecided(t *testing.T) {
	t.Parallel()
	r := newSettledRig(t, orchestrator.Config{})
	ctx := bustest.Context(t)
	req := requestOf(t, r.pending[0])
	send := func(id string, at time.Time) error {
		d, err := approver.NewDecision(req, id, approver.Choice{Approve: true}, nil, at)
		if err != nil {
			t.Fatal(err)
		}
		return approver.SendDecision(ctx, r.bus, d, bustest.Timeout)
	}
	now := time.Now()
	if err := send("cli", now); err != nil {
		t.Fatalf("first decision: %v", err)
	}
	if err := send("cli", now.Add(time.Second)); err != nil {
		t.Errorf("a second decision of the approver whose decision was applied: %v", err)
	}
	err := send("other", now.Add(2*time.Second))
	var refused *approver.RefusedError
	if !errors.As(err, &refused) || refused.Verdict != wire.StateDecided || !strings.Contains(refused.Reason, "by cli") {
		t.Errorf("another approver's decision: %v, want refused as decided by cli", err)
	}
}
