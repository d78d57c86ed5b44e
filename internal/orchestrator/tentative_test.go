package orchestrator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/orchestrator"
	"github.com/toolgate/toolgate/internal/telemetry"
	"github.com/toolgate/toolgate/internal/telemetry/telemetrytest"
	"github.com/toolgate/toolgate/wire"
)

// answerModel asks calculate_answer once, then answers; onFollowUp runs
// at each request of a follow-up (after the tool's result) before it
// answers, with the number of such requests so far.
func answerModel(onFollowUp func(n int)) agent.Model {
	var followUps atomic.Int32
	return agent.FunctionModel("answer", func(_ context.Context, req agent.ModelRequest) (agent.ModelResponse, error) {
		last := req.Messages[len(req.Messages)-1]
		if !slices.ContainsFunc(last.Parts, func(p agent.Part) bool { return p.Kind == agent.PartToolReturn }) {
			return agent.ModelResponse{Parts: []agent.Part{{Kind: agent.PartToolCall, ToolName: "calculate_answer",
				ToolCallID: "call_1", Args: json.RawMessage(`{"question":"the answer"}`)}}}, nil
		}
		if onFollowUp != nil {
			onFollowUp(int(followUps.Add(1)))
		}
		return agent.ModelResponse{Parts: []agent.Part{{Kind: agent.PartText, Content: "42"}}}, nil
	})
}

// statusTool is a tool that, when it runs, reads its conversation from the
// store through reader and keeps the status it finds, which the returned
// value gives.
func statusTool(t *testing.T, name string, reader *bus.Bus) (agent.Tool, *atomic.Value) {
	t.Helper()
	var saw atomic.Value
	tool, err := agent.NewTool(name, "Look at the stored conversation", func(rc *agent.RunContext, _ struct{}) (string, error) {
		c, err := orchestrator.ReadConversation(rc.Context(), reader, rc.ConversationID)
		if err != nil {
			return "", err
		}
		saw.Store(c.Status)
		return "seen", nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return tool, &saw
}

// logLength is how many records conversation id's log holds.
func logLength(t *testing.T, b *bus.Bus, id string) int {
	t.Helper()
	n := 0
	if _, err := b.ReadLog(ctxT(t), bus.StreamConversations, bus.ConversationSubject(id), 0, func(bus.LogMsg) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}

// A follow-up that ends at once is stored with the replies and its claim
// as one record, and a first run that pauses at once with the start: a
// call's conversation is two records (start with pause, claim with end),
// and its events come in their order.
func TestFollowUpStoredWithItsClaim(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.worker("calculate_answer")
	// A window no busy machine can outlast: the test is of the record.
	o, _ := e.orch(orchestrator.Config{Agent: externalAgent(t, ""), Model: answerModel(nil), ClaimWindow: time.Hour})
	info, err := o.StartRun(ctxT(t), "What is the answer?", "")
	if err != nil {
		t.Fatal(err)
	}
	c := waitStatus(t, o, info.ConversationID, conversation.StatusCompleted, conversation.StatusFailed)
	if c.Status != conversation.StatusCompleted || c.Output != "42" || len(c.Runs) != 2 {
		t.Fatalf("%s; want completed with 42 after one follow-up", describe(c))
	}
	if n := o.Stats().ClaimedWithEnd.Load(); n != 1 {
		t.Errorf("%d follow-ups stored with their claim, want 1", n)
	}
	if n := o.Stats().StartedWithEnd.Load(); n != 1 {
		t.Errorf("%d starts stored with their first run's pause, want 1", n)
	}
	b := e.connect("reader")
	if n := logLength(t, b, info.ConversationID); n != 2 {
		t.Errorf("the log holds %d records, want 2", n)
	}
	// A reader that never saw it folds the same state.
	stored, err := orchestrator.ReadConversation(ctxT(t), b, info.ConversationID)
	if err != nil || stored.Status != conversation.StatusCompleted || len(stored.History) != len(c.History) || stored.Lease != nil {
		t.Errorf("folded from the log: %v, %s", err, describe(stored))
	}
	evs := collectEvents(t, b, info.ConversationID, func(evs []wire.Event) bool {
		return slices.ContainsFunc(evs, func(ev wire.Event) bool { return ev.Type == orchestrator.EventRunCompleted })
	})
	applied := slices.IndexFunc(evs, func(ev wire.Event) bool { return ev.Type == orchestrator.EventReplyApplied })
	followUp := slices.IndexFunc(evs, func(ev wire.Event) bool {
		return ev.Type == orchestrator.EventRunStarted && ev.RunID == c.Runs[1].RunID
	})
	if applied < 0 || followUp < applied {
		t.Errorf("events %s: want the reply applied, then the follow-up started", eventTypes(evs))
	}
}

// A conversation that changes while its follow-up runs unstored (here a
// prompt sent to it) drops that run and its events; the replies are
// recorded again and a follow-up runs from what is stored, prompt and all.
func TestTentativeFollowUpDroppedOnChange(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.worker("calculate_answer")
	var o *orchestrator.Orchestrator
	var convID string
	var prompted atomic.Bool
	model := answerModel(func(n int) {
		if n == 1 {
			// The first follow-up: the conversation is still paused in
			// the store.
			if _, err := o.StartRun(context.Background(), "And say it twice.", convID); err == nil {
				prompted.Store(true)
			}
		}
	})
	o, _ = e.orch(orchestrator.Config{Agent: externalAgent(t, ""), Model: model, ReconcileInterval: 1 << 40, ClaimWindow: time.Hour})
	info, err := o.StartRun(ctxT(t), "What is the answer?", "")
	convID = info.ConversationID
	if err != nil {
		t.Fatal(err)
	}
	c := waitStatus(t, o, info.ConversationID, conversation.StatusCompleted, conversation.StatusFailed)
	if !prompted.Load() {
		t.Fatal("the prompt sent during the follow-up was refused")
	}
	if c.Status != conversation.StatusCompleted || len(c.Runs) != 2 || c.Runs[1].Prompt != "And say it twice." {
		t.Fatalf("%s, runs %+v; want completed by one follow-up with the prompt", describe(c), c.Runs)
	}
	if d, w := o.Stats().TentativeDropped.Load(), o.Stats().ClaimedWithEnd.Load(); d != 1 || w != 0 {
		t.Errorf("%d dropped, %d stored with the claim; want 1 and 0", d, w)
	}
	if n := o.Stats().FollowUps.Load(); n != 1 {
		t.Errorf("%d follow-ups claimed, want 1", n)
	}
	evs := collectEvents(t, e.connect("reader"), info.ConversationID, func(evs []wire.Event) bool {
		return slices.ContainsFunc(evs, func(ev wire.Event) bool { return ev.Type == orchestrator.EventRunCompleted })
	})
	started, applied := 0, 0
	for _, ev := range evs {
		switch ev.Type {
		case orchestrator.EventRunStarted:
			started++
		case orchestrator.EventReplyApplied:
			applied++
		}
	}
	if started != 2 || applied != 1 {
		t.Errorf("events %s: %d runs started, %d replies applied; want 2 (the dropped one's events are not published) and 1 (recorded again, told once)", eventTypes(evs), started, applied)
	}
}

// A conversation cancelled while its follow-up runs unstored is not
// resumed: the run is dropped, and the reply is refused as late; the
// cancel's event is published, the dropped run's are not.
func TestTentativeFollowUpDroppedOnCancel(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.worker("calculate_answer")
	var o *orchestrator.Orchestrator
	var convID string
	model := answerModel(func(n int) {
		if _, err := o.Cancel(context.Background(), convID); err != nil {
			t.Errorf("cancel: %v", err)
		}
	})
	o, _ = e.orch(orchestrator.Config{Agent: externalAgent(t, ""), Model: model, ClaimWindow: time.Hour})
	info, err := o.StartRun(ctxT(t), "What is the answer?", "")
	convID = info.ConversationID
	if err != nil {
		t.Fatal(err)
	}
	c := waitStatus(t, o, info.ConversationID, conversation.StatusCancelled, conversation.StatusCompleted, conversation.StatusFailed)
	if c.Status != conversation.StatusCancelled || len(c.Runs) != 1 {
		t.Fatalf("%s, runs %+v; want cancelled, no follow-up", describe(c), c.Runs)
	}
	waitFor(t, "the run to be dropped", func() (bool, string) {
		return o.Stats().TentativeDropped.Load() == 1, "not yet"
	})
	if n := o.Stats().FollowUps.Load(); n != 0 {
		t.Errorf("%d follow-ups claimed, want 0", n)
	}
	evs := collectEvents(t, e.connect("reader"), info.ConversationID, func(evs []wire.Event) bool {
		return slices.ContainsFunc(evs, func(ev wire.Event) bool { return ev.Type == orchestrator.EventReplyRefused }) &&
			slices.ContainsFunc(evs, func(ev wire.Event) bool { return ev.Type == orchestrator.EventConversationCancelled })
	})
	if slices.ContainsFunc(evs, func(ev wire.Event) bool { return ev.Type == orchestrator.EventReplyApplied }) {
		t.Errorf("events %s: the reply is told applied", eventTypes(evs))
	}
	// The cancel came while the follow-up's events were kept apart: it is
	// told, and nothing of the dropped run is.
	if slices.ContainsFunc(evs, func(ev wire.Event) bool { return ev.RunID != "" && ev.RunID != c.Runs[0].RunID }) {
		t.Errorf("events %s: the dropped follow-up's are published", eventTypes(evs))
	}
}

// A follow-up that outlasts the claim window has its claim stored then,
// and its end after as usual.
func TestTentativeClaimStoredAtTheWindow(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.worker("calculate_answer")
	var o *orchestrator.Orchestrator
	var convID string
	storedStatus := func() conversation.Status {
		c, err := orchestrator.ReadConversation(context.Background(), e.connect("reader"), convID)
		if err != nil {
			t.Errorf("read: %v", err)
			return ""
		}
		return c.Status
	}
	slow := answerModel(func(int) {
		waitFor(t, "the claim to be stored at the window's end", func() (bool, string) {
			st := storedStatus()
			return st == conversation.StatusResuming, string(st)
		})
	})
	o, _ = e.orch(orchestrator.Config{Agent: externalAgent(t, ""), Model: slow, ClaimWindow: time.Millisecond})
	info, err := o.StartRun(ctxT(t), "What is the answer?", "")
	convID = info.ConversationID
	if err != nil {
		t.Fatal(err)
	}
	if c := waitStatus(t, o, convID, conversation.StatusCompleted, conversation.StatusFailed); c.Status != conversation.StatusCompleted {
		t.Fatalf("%s", describe(c))
	}
	if w, f := o.Stats().ClaimedWithEnd.Load(), o.Stats().FollowUps.Load(); w != 0 || f != 1 {
		t.Errorf("%d stored with the end, %d follow-ups; want 0 and 1", w, f)
	}
	// The start is stored with the pause if the first run paused within
	// the window's millisecond.
	want := 4 - int(o.Stats().StartedWithEnd.Load())
	if n := logLength(t, e.connect("reader"), convID); n != want {
		t.Errorf("the log holds %d records, want %d (start, pause, claim, end; the first two one if the start was stored with the pause)", n, want)
	}

}

// A follow-up that runs a tool has its claim stored before the tool runs.
func TestTentativeClaimStoredBeforeATool(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.worker("calculate_answer")
	note, sawStatus := statusTool(t, "note", e.connect("reader2"))
	withTool := agent.FunctionModel("with-tool", func(_ context.Context, req agent.ModelRequest) (agent.ModelResponse, error) {
		last := req.Messages[len(req.Messages)-1]
		switch {
		case slices.ContainsFunc(last.Parts, func(p agent.Part) bool { return p.ToolName == "note" }):
			return agent.ModelResponse{Parts: []agent.Part{{Kind: agent.PartText, Content: "42"}}}, nil
		case slices.ContainsFunc(last.Parts, func(p agent.Part) bool { return p.Kind == agent.PartToolReturn }):
			return agent.ModelResponse{Parts: []agent.Part{{Kind: agent.PartToolCall, ToolName: "note", ToolCallID: "note_1", Args: json.RawMessage(`{}`)}}}, nil
		}
		return agent.ModelResponse{Parts: []agent.Part{{Kind: agent.PartToolCall, ToolName: "calculate_answer",
			ToolCallID: "call_1", Args: json.RawMessage(`{"question":"the answer"}`)}}}, nil
	})
	o2, _ := e.orch(orchestrator.Config{Agent: externalAgent(t, ""), Model: withTool, Tools: []agent.Tool{note}, ClaimWindow: time.Hour, InstanceID: "with-tool"})
	completeRun(t, o2, "What is the answer?")
	if st, _ := sawStatus.Load().(conversation.Status); st != conversation.StatusResuming {
		t.Errorf("the tool ran with the conversation %q in the store; want its claim stored (resuming)", st)
	}
	if w := o2.Stats().ClaimedWithEnd.Load(); w != 0 {
		t.Errorf("%d follow-ups that ran a tool were stored with their end; want 0", w)
	}
}

// A follow-up that finds no run slot free has its claim stored at once,
// rather than hold its replies while it waits for one.
func TestTentativeClaimStoredWhenNoSlot(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	unblock := make(chan struct{})
	blocked := make(chan struct{}, 1)
	inner := answerModel(nil)
	model := agent.FunctionModel("slots", func(ctx context.Context, req agent.ModelRequest) (agent.ModelResponse, error) {
		if slices.ContainsFunc(req.Messages[0].Parts, func(p agent.Part) bool { return p.Content == "block" }) {
			blocked <- struct{}{}
			select {
			case <-unblock:
			case <-ctx.Done():
				return agent.ModelResponse{}, ctx.Err()
			}
			return agent.ModelResponse{Parts: []agent.Part{{Kind: agent.PartText, Content: "unblocked"}}}, nil
		}
		return inner.Request(ctx, req)
	})
	o, _ := e.orch(orchestrator.Config{Agent: externalAgent(t, ""), Model: model, MaxConcurrentRuns: 1, ClaimWindow: time.Hour})
	info, err := o.StartRun(ctxT(t), "What is the answer?", "")
	if err != nil {
		t.Fatal(err)
	}
	waitPublished(t, o, info.ConversationID, 1)
	// The only slot is taken; then the worker answers. The blocking run's
	// start is answered once stored: at the window's end, or with its end.
	started := make(chan error, 1)
	go func() {
		_, err := o.StartRun(ctxT(t), "block", "")
		started <- err
	}()
	var unblockOnce sync.Once
	release := func() { unblockOnce.Do(func() { close(unblock) }) }
	t.Cleanup(func() {
		if err := <-started; err != nil {
			t.Errorf("start the blocking run: %v", err)
		}
	})
	t.Cleanup(release) // first, should the test end early
	select {
	case <-blocked:
	case <-time.After(waitTimeout):
		t.Fatal("the blocking run never started")
	}
	e.worker("calculate_answer")
	reader := e.connect("reader")
	waitFor(t, "the claim to be stored while the follow-up waits for a slot", func() (bool, string) {
		c, err := orchestrator.ReadConversation(ctxT(t), reader, info.ConversationID)
		if err != nil {
			return false, err.Error()
		}
		return c.Status == conversation.StatusResuming, describe(c)
	})
	release()
	if c := waitStatus(t, o, info.ConversationID, conversation.StatusCompleted, conversation.StatusFailed); c.Status != conversation.StatusCompleted {
		t.Fatalf("%s", describe(c))
	}
	if w := o.Stats().ClaimedWithEnd.Load(); w != 0 {
		t.Errorf("%d follow-ups stored with their end, want 0", w)
	}
}

// A first run that ends at once is stored with its start: the
// conversation is one record, which a reader folds to the same state, and
// it is not left among the conversations to index.
func TestStartStoredWithItsEnd(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	text := agent.FunctionModel("text", func(context.Context, agent.ModelRequest) (agent.ModelResponse, error) {
		return agent.ModelResponse{Parts: []agent.Part{{Kind: agent.PartText, Content: "hello"}}}, nil
	})
	o, _ := e.orch(orchestrator.Config{Agent: externalAgent(t, ""), Model: text, ClaimWindow: time.Hour})
	info, err := o.StartRun(ctxT(t), "Hi", "")
	if err != nil {
		t.Fatal(err)
	}
	b := e.connect("reader")
	// Stored when the start is answered.
	stored, err := orchestrator.ReadConversation(ctxT(t), b, info.ConversationID)
	if err != nil || stored.Status != conversation.StatusCompleted || stored.Output != "hello" || len(stored.Runs) != 1 {
		t.Fatalf("folded from the log: %v, %s", err, describe(stored))
	}
	if n := logLength(t, b, info.ConversationID); n != 1 {
		t.Errorf("the log holds %d records, want 1", n)
	}
	if w, s := o.Stats().StartedWithEnd.Load(), o.Stats().RunsStarted.Load(); w != 1 || s != 1 {
		t.Errorf("%d starts stored with their end, %d started; want 1 and 1", w, s)
	}
	evs := collectEvents(t, b, info.ConversationID, func(evs []wire.Event) bool {
		return slices.ContainsFunc(evs, func(ev wire.Event) bool { return ev.Type == orchestrator.EventRunCompleted })
	})
	if evs[0].Type != orchestrator.EventRunStarted {
		t.Errorf("events %s: want the run started first", eventTypes(evs))
	}
	if n := o.FreshConversations(); n != 0 {
		t.Errorf("%d conversations left to index, want 0", n)
	}
}

// A first run that outlasts the window has its start stored then: the
// start is answered while the model still thinks.
func TestStartStoredAtTheWindow(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	release := make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock)
	slow := agent.FunctionModel("slow", func(ctx context.Context, _ agent.ModelRequest) (agent.ModelResponse, error) {
		select {
		case <-release:
		case <-ctx.Done():
			return agent.ModelResponse{}, ctx.Err()
		}
		return agent.ModelResponse{Parts: []agent.Part{{Kind: agent.PartText, Content: "late"}}}, nil
	})
	o, _ := e.orch(orchestrator.Config{Agent: externalAgent(t, ""), Model: slow, ClaimWindow: 20 * time.Millisecond})
	info, err := o.StartRun(ctxT(t), "Take your time", "")
	if err != nil {
		t.Fatal(err)
	}
	b := e.connect("reader")
	stored, err := orchestrator.ReadConversation(ctxT(t), b, info.ConversationID)
	if err != nil || stored.Status != conversation.StatusRunning || stored.Lease == nil {
		t.Fatalf("answered before the start was stored: %v, %s", err, describe(stored))
	}
	unblock()
	if c := waitStatus(t, o, info.ConversationID, conversation.StatusCompleted, conversation.StatusFailed); c.Status != conversation.StatusCompleted || c.Output != "late" {
		t.Fatalf("%s", describe(c))
	}
	if n := logLength(t, b, info.ConversationID); n != 2 {
		t.Errorf("the log holds %d records, want 2 (start, end)", n)
	}
	if w := o.Stats().StartedWithEnd.Load(); w != 0 {
		t.Errorf("%d starts stored with their end, want 0", w)
	}
}

// A first run that runs a tool has its start stored before the tool runs.
func TestStartStoredBeforeATool(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	peek, saw := statusTool(t, "peek", e.connect("reader"))
	model := agent.FunctionModel("peeker", func(_ context.Context, req agent.ModelRequest) (agent.ModelResponse, error) {
		last := req.Messages[len(req.Messages)-1]
		if slices.ContainsFunc(last.Parts, func(p agent.Part) bool { return p.Kind == agent.PartToolReturn }) {
			return agent.ModelResponse{Parts: []agent.Part{{Kind: agent.PartText, Content: "done"}}}, nil
		}
		return agent.ModelResponse{Parts: []agent.Part{{Kind: agent.PartToolCall, ToolName: "peek", ToolCallID: "p1", Args: json.RawMessage(`{}`)}}}, nil
	})
	o, _ := e.orch(orchestrator.Config{Agent: externalAgent(t, ""), Model: model, Tools: []agent.Tool{peek}, ClaimWindow: time.Hour})
	completeRun(t, o, "Look")
	if st, _ := saw.Load().(conversation.Status); st != conversation.StatusRunning {
		t.Errorf("the tool found the conversation %q in the store; want its start stored (running)", st)
	}
	if w := o.Stats().StartedWithEnd.Load(); w != 0 {
		t.Errorf("%d starts that ran a tool were stored with their end; want 0", w)
	}
}

// Starts with one idempotency key, at once on two replicas, start one
// run: those on one replica wait for the first, and a replica whose start
// finds the conversation stored by the other drops its run and answers
// with the stored one.
func TestConcurrentStartsWithOneKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var o [2]*orchestrator.Orchestrator
	for i := range o {
		o[i], _ = e.orch(orchestrator.Config{Agent: externalAgent(t, ""), Model: answerModel(nil), InstanceID: fmt.Sprintf("orch-%d", i), ClaimWindow: time.Hour})
	}
	var wg sync.WaitGroup
	infos := make([]orchestrator.RunInfo, 8)
	errs := make([]error, len(infos))
	for i := range infos {
		wg.Go(func() {
			infos[i], errs[i] = o[i%2].StartRunWith(ctxT(t), orchestrator.StartRequest{Prompt: "What is the answer?", IdempotencyKey: "once"})
		})
	}
	wg.Wait()
	for i := range infos {
		if errs[i] != nil || infos[i].RunID != infos[0].RunID || infos[i].ConversationID != infos[0].ConversationID {
			t.Fatalf("start %d: %+v, %v; want the run of start 0, %+v", i, infos[i], errs[i], infos[0])
		}
	}
	c := waitStatus(t, o[0], infos[0].ConversationID, conversation.StatusPaused)
	if len(c.Runs) != 1 {
		t.Errorf("%s; want one run", describe(c))
	}
	if n := o[0].Stats().RunsStarted.Load() + o[1].Stats().RunsStarted.Load(); n != 1 {
		t.Errorf("%d runs counted started, want 1", n)
	}
}

// A follow-up whose record (the replies, the claim and the run's end) was
// stored but whose answer was lost with the connection is not dropped as
// if it had failed: its events are published, nothing is recorded twice,
// and nothing waits for the lease to run out.
func TestFollowUpStoredThoughItsAnswerWasLost(t *testing.T) {
	t.Parallel()
	o, proxy, reader, id := followUpMuted(t, func(cfg orchestrator.Config) orchestrator.Config { return cfg })
	proxy.Cut()
	c := waitStatus(t, o, id, conversation.StatusCompleted, conversation.StatusFailed)
	if c.Status != conversation.StatusCompleted || c.Output != "42" || len(c.Runs) != 2 {
		t.Fatalf("%s; want completed with 42 after one follow-up", describe(c))
	}
	st := o.Stats()
	if d, w, f := st.TentativeDropped.Load(), st.ClaimedWithEnd.Load(), st.FollowUps.Load(); d != 0 || w != 1 || f != 1 {
		t.Errorf("%d dropped, %d stored with the claim, %d follow-ups; want 0, 1 and 1", d, w, f)
	}
	if n := logLength(t, reader, id); n != 2 {
		t.Errorf("the log holds %d records, want 2", n)
	}
	evs := collectEvents(t, reader, id, func(evs []wire.Event) bool {
		return slices.ContainsFunc(evs, func(ev wire.Event) bool { return ev.Type == orchestrator.EventRunCompleted })
	})
	counts := map[string]int{}
	for _, ev := range evs {
		counts[ev.Type]++
	}
	if counts[orchestrator.EventRunStarted] != 2 || counts[orchestrator.EventReplyApplied] != 1 || counts[orchestrator.EventRunCompleted] != 1 {
		t.Errorf("events %s; want two runs started, the reply applied once, completed once", eventTypes(evs))
	}
}

// A record whose append's outcome stays unknown past the store's timeout
// (the connection mute for longer) is followed up until the log says it
// was stored: the run's end is then told (its events, the completion) as
// if the answer had come. Taken as failed, the conversation would be
// completed in its log with no run_completed event ever, and no later
// pass would send it (they find the record and take it as done).
func TestRecordWhoseOutcomeStaysUnknownIsFollowedUp(t *testing.T) {
	t.Parallel()
	reg := telemetry.NewRegistry()
	o, proxy, reader, id := followUpMuted(t, func(cfg orchestrator.Config) orchestrator.Config {
		cfg.Metrics = telemetry.NewOrchestratorMetrics(reg)
		return orchestrator.WithAppendTimeout(cfg, time.Second)
	})
	waitFor(t, "a round of the store's timeout to end with the outcome unknown", func() (bool, string) {
		n := o.Stats().AppendsUnresolved.Load()
		return n >= 2, fmt.Sprintf("%d rounds", n)
	})
	proxy.Cut()
	evs := collectEvents(t, reader, id, func(evs []wire.Event) bool {
		return slices.ContainsFunc(evs, func(ev wire.Event) bool { return ev.Type == orchestrator.EventRunCompleted })
	})
	c := waitStatus(t, o, id, conversation.StatusCompleted, conversation.StatusFailed)
	if c.Status != conversation.StatusCompleted || c.Output != "42" || len(c.Runs) != 2 {
		t.Fatalf("%s; want completed with 42 after one follow-up", describe(c))
	}
	if n := logLength(t, reader, id); n != 2 {
		t.Errorf("the log holds %d records, want 2", n)
	}
	if d, w := o.Stats().TentativeDropped.Load(), o.Stats().ClaimedWithEnd.Load(); d != 0 || w != 1 {
		t.Errorf("%d dropped, %d stored with the claim; want 0 and 1", d, w)
	}
	counts := map[string]int{}
	for _, ev := range evs {
		counts[ev.Type]++
	}
	if counts[orchestrator.EventReplyApplied] != 1 || counts[orchestrator.EventRunCompleted] != 1 {
		t.Errorf("events %s; want the reply applied once, completed once", eventTypes(evs))
	}
	rounds := o.Stats().AppendsUnresolved.Load()
	if v, ok := telemetrytest.Scrape(t, telemetry.Handler(reg)).Value("toolgate_append_outcome_unknown_total"); !ok || v != float64(rounds) {
		t.Errorf("toolgate_append_outcome_unknown_total = %v (present %v), want the %d rounds counted", v, ok, rounds)
	}
}

// followUpMuted runs a conversation to its follow-up and stores the
// follow-up's record (the reply, the claim and the run's end, as one)
// while the orchestrator's connection is mute, which the test then cuts.
// adjust changes the orchestrator's config.
func followUpMuted(t *testing.T, adjust func(orchestrator.Config) orchestrator.Config) (o *orchestrator.Orchestrator, proxy *bustest.CutProxy, reader *bus.Bus, id string) {
	t.Helper()
	e := newEnvListening(t)
	e.worker("calculate_answer")
	proxy, ob := cutBus(t, e)
	fired := make(chan (<-chan struct{}), 1)
	model := answerModel(func(n int) {
		if n == 1 {
			// The test's one conversation: the next append to a log is
			// the follow-up's record.
			fired <- proxy.Arm("HPUB "+bus.ConversationSubject(""), true)
		}
	})
	o, _ = e.orch(adjust(orchestrator.Config{Bus: ob, EventBus: e.connect("events"), Agent: externalAgent(t, ""), Model: model, ClaimWindow: time.Hour}))
	info, err := o.StartRun(ctxT(t), "What is the answer?", "")
	if err != nil {
		t.Fatal(err)
	}
	reader = e.connect("reader")
	bustest.Recv(t, bustest.Recv(t, fired, "the follow-up"), "the follow-up's record to leave")
	waitFor(t, "the follow-up's record stored", func() (bool, string) {
		n := logLength(t, reader, info.ConversationID)
		return n == 2, fmt.Sprintf("%d records", n)
	})
	return o, proxy, reader, info.ConversationID
}
