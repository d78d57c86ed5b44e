// Package soak drives a whole toolgate system — an embedded NATS server,
// orchestrator replicas, tool-workers and an approver, in one process — with
// many conversations of many deferred calls while it injects faults at
// random (seeded): workers killed mid-call and restarted, duplicate replies
// published on the bus, orchestrator replicas restarted, malformed messages
// on the reply and call subjects. When every conversation has ended it
// checks the invariants: every deferred call issued got exactly one applied
// reply, every batch exactly one follow-up, every conversation completed,
// and the dead-letter stream holds exactly the malformed messages injected
// (D35). Real process kills (SIGKILL) are the e2e package's tests.
package soak

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/agentconfig"
	"github.com/toolgate/toolgate/internal/approver"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/orchestrator"
	"github.com/toolgate/toolgate/internal/testkit"
	"github.com/toolgate/toolgate/internal/worker"
	"github.com/toolgate/toolgate/wire"
)

// Config sizes a soak run. Zero values take the defaults.
type Config struct {
	// Conversations is how many conversations run at once. Defaults to 20.
	Conversations int
	// Calls is how many tool calls the model makes per conversation, two
	// per response; every fourth needs an approval first, so it is two
	// deferred calls (the approval, then the external call). Defaults to 6.
	Calls int
	// Workers is how many tool-workers serve the calls. Defaults to 3.
	Workers int
	// Replicas is how many orchestrators share the work. Defaults to 2.
	Replicas int
	// Seed makes the faults (their kinds, targets and timing) and the
	// executors' delays repeatable. Defaults to 1.
	Seed uint64
	// Duration bounds the time faults are injected; they stop earlier once
	// every conversation has ended. Defaults to 30s.
	Duration time.Duration
	// Ramp spreads the conversations' starts evenly over this long, so that
	// faults meet conversations at every stage. Defaults to Duration/2.
	Ramp time.Duration
	// FaultEvery is the mean gap between two faults. Defaults to 100ms.
	FaultEvery time.Duration
	// Timeout bounds the whole run. Defaults to Duration + 2m.
	Timeout time.Duration
	// Dir holds the server's store. Defaults to a temporary folder,
	// removed at the end.
	Dir string
	// Logger receives the components' logs. nil discards them.
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.Conversations <= 0 {
		c.Conversations = 20
	}
	if c.Calls <= 0 {
		c.Calls = 6
	}
	if c.Workers <= 0 {
		c.Workers = 3
	}
	if c.Replicas <= 0 {
		c.Replicas = 2
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	if c.Duration <= 0 {
		c.Duration = 30 * time.Second
	}
	if c.Ramp <= 0 {
		c.Ramp = c.Duration / 2
	}
	if c.FaultEvery <= 0 {
		c.FaultEvery = 100 * time.Millisecond
	}
	if c.Timeout <= 0 {
		c.Timeout = c.Duration + 2*time.Minute
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Timings short enough that redeliveries, lease takeovers and reconciling
// happen many times within a run. ackWait stays at least 3× the minimum
// pull expiry (1s) so that a killed worker's pulls are gone before its
// call is delivered again.
const (
	ackWait           = 3 * time.Second
	leaseTTL          = 2 * time.Second
	reconcileInterval = 250 * time.Millisecond
	replyAckWait      = 2 * time.Second
	stopTimeout       = 5 * time.Second
)

// Tools of the soak agent.
const (
	toolWork    = "work"    // external, answered by the workers
	toolGuarded = "guarded" // approved by the approver first, then external
)

// Fault kinds, the keys of Report.Faults.
const (
	FaultWorkerKill          = "worker_kill"          // a worker's connection cut, its calls in flight abandoned
	FaultWorkerKillMidCall   = "worker_kill_mid_call" // of those, kills while it ran a call
	FaultDuplicateReply      = "duplicate_reply"      // a result published again under a new message id
	FaultOrchestratorRestart = "orchestrator_restart" // a replica stopped (runs in flight interrupted) and replaced
	FaultBadReplyBody        = "bad_reply_body"       // undecodable bytes on a run's reply subject
	FaultBadReplyRun         = "bad_reply_run"        // a result whose body names another run than its subject
	FaultUnknownRun          = "reply_unknown_run"    // a well-formed result for a run that never existed
	FaultBadCall             = "bad_call"             // undecodable bytes on a tool's call subject
)

// headerBad marks an injected malformed message, so that its dead letter
// can be told from one that should not exist.
const headerBad = "Soak-Bad"

// Run runs the soak and returns its report. An error means the system
// could not be set up or driven; failed invariants are in the report
// (Report.OK).
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	dir := cfg.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "toolgate-soak-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	s := &system{
		cfg:       cfg,
		log:       cfg.Logger,
		rng:       rand.New(rand.NewPCG(cfg.Seed, 0x50a6)),
		executed:  map[string]int{},
		bad:       map[string]string{},
		faults:    map[string]int{},
		startedAt: time.Now(),
	}
	sys, err := testkit.Start(ctx, testkit.Options{Dir: dir, Logger: cfg.Logger, StopTimeout: stopTimeout})
	if err != nil {
		return nil, err
	}
	s.sys = sys
	defer s.shutdown()
	if s.ctl, err = s.connect(ctx, "soak"); err != nil {
		return nil, err
	}
	defer s.ctl.Close()
	if s.agent, err = agentConfig(); err != nil {
		return nil, err
	}
	s.script = script(cfg.Calls)
	if err := s.startParts(ctx); err != nil {
		return nil, err
	}
	return s.play(ctx)
}

// startParts starts the orchestrator replicas, the workers and the
// approver.
func (s *system) startParts(ctx context.Context) error {
	for i := range s.cfg.Replicas {
		r := &replica{name: fmt.Sprintf("o%d", i)}
		s.replicas = append(s.replicas, r)
		if err := s.startReplica(ctx, r); err != nil {
			return err
		}
	}
	for i := range s.cfg.Workers {
		w := &workerSlot{name: fmt.Sprintf("w%d", i)}
		s.workers = append(s.workers, w)
		if err := s.startWorker(ctx, w); err != nil {
			return err
		}
	}
	return s.startApprover(ctx)
}

// play starts the conversations and injects faults until every one ended
// or Duration passed; then every part is brought back, the system must
// finish on its own, and the invariants are checked.
func (s *system) play(ctx context.Context) (*Report, error) {
	faultCtx, stopFaults := context.WithTimeout(ctx, s.cfg.Duration)
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.injectFaults(faultCtx)
	}()
	startErr := s.startConversations(ctx)
	ended := startErr == nil && s.waitEnded(faultCtx)
	stopFaults()
	<-done
	if startErr != nil {
		return nil, startErr
	}
	if err := s.reviveAll(ctx); err != nil {
		return nil, err
	}
	if !ended {
		s.waitEnded(ctx)
	}
	s.waitDeadLetters(ctx)
	s.waitRepliesSettled(ctx)
	// Read with a time of its own: a run that used up its Timeout is
	// reported by what each conversation was doing, not by the reads'
	// expired context.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	return s.check(cctx), nil
}

// system is the running deployment and what the soak recorded about it.
type system struct {
	cfg    Config
	log    *slog.Logger
	sys    *testkit.System
	ctl    *bus.Bus // the soak's own connection: faults, reading streams
	agent  *orchestrator.AgentConfig
	script []agent.ScriptResponse

	mu        sync.Mutex
	rng       *rand.Rand
	replicas  []*replica
	retired   []*orchestrator.Counts // what stopped replicas counted
	workers   []*workerSlot
	convs     []string
	executed  map[string]int    // run:call → executor runs
	answered  []answer          // results the executors produced, for duplicates
	bad       map[string]string // injected malformed message id → fault kind
	faults    map[string]int
	startedAt time.Time
}

type answer struct{ runID, callID string }

type replica struct {
	name string
	gen  int
	orch *testkit.Orchestrator
}

type workerSlot struct {
	name     string
	gen      int
	c        *testkit.Part // nil while killed
	inflight int
}

func (s *system) connect(ctx context.Context, name string) (*bus.Bus, error) {
	return s.sys.Connect(ctx, bus.ConnConfig{Name: name})
}

func agentConfig() (*orchestrator.AgentConfig, error) {
	data, err := json.Marshal(map[string]any{
		"model": map[string]any{"provider": agentconfig.ProviderTest},
		"tools": []map[string]any{
			{"name": toolWork, "parameters": map[string]any{"type": "object", "properties": map[string]any{"i": map[string]any{"type": "integer"}}}},
			{"name": toolGuarded, "approval": agentconfig.ApprovalAlways, "parameters": map[string]any{"type": "object", "properties": map[string]any{"i": map[string]any{"type": "integer"}}}},
		},
	})
	if err != nil {
		return nil, err
	}
	return agentconfig.Parse(data, nil)
}

// script is the model of every conversation: calls tools two at a time,
// every fourth call a guarded one, then answers.
func script(calls int) []agent.ScriptResponse {
	var out []agent.ScriptResponse
	for i := 0; i < calls; i += 2 {
		var r agent.ScriptResponse
		for j := i; j < min(i+2, calls); j++ {
			tool := toolWork
			if j%4 == 3 {
				tool = toolGuarded
			}
			r.Calls = append(r.Calls, agent.ScriptCall{Tool: tool, ID: fmt.Sprintf("k%d", j), Args: json.RawMessage(fmt.Sprintf(`{"i":%d}`, j))})
		}
		out = append(out, r)
	}
	return append(out, agent.ScriptResponse{Text: "done"})
}

func (s *system) startReplica(ctx context.Context, r *replica) error {
	o, err := s.sys.Orchestrator(ctx, "orchestrator-"+r.name, orchestrator.Config{
		Agent: s.agent, Model: agent.NewScriptModel("soak", s.script),
		InstanceID: fmt.Sprintf("%s-%d", r.name, r.gen), LeaseTTL: leaseTTL,
		ReconcileInterval: reconcileInterval, ReplyAckWait: replyAckWait,
	})
	if err != nil {
		return err
	}
	s.mu.Lock()
	r.orch = o
	s.mu.Unlock()
	return nil
}

// restartReplica stops a replica as a deploy would (runs in flight get a
// short while, then are interrupted and left to their lease) and starts a
// new one in its place.
func (s *system) restartReplica(ctx context.Context, r *replica, grace time.Duration) error {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
	err := r.orch.Stop(sctx)
	cancel()
	if err != nil {
		s.log.Info("soak: replica stopped with runs in flight", slog.String("replica", r.name), slog.String("error", err.Error()))
	}
	s.mu.Lock()
	s.retired = append(s.retired, r.orch.Counts)
	s.mu.Unlock()
	r.gen++
	return s.startReplica(ctx, r)
}

func (s *system) startWorker(ctx context.Context, w *workerSlot) error {
	exec := worker.ExecutorFunc(func(ctx context.Context, req wire.CallRequest) (wire.CallReply, error) {
		return s.execute(ctx, w, req)
	})
	c, err := s.sys.Worker(ctx, "worker-"+w.name, worker.Config{
		ID: fmt.Sprintf("%s-%d", w.name, w.gen), Concurrency: 8,
		Tools: []worker.Tool{
			{Spec: worker.ToolSpec{Name: toolWork}, Executor: exec},
			{Spec: worker.ToolSpec{Name: toolGuarded}, Executor: exec},
		},
		AckWait: ackWait, MaxDeliver: 100, BackOff: []time.Duration{100 * time.Millisecond},
		DrainTimeout: 2 * time.Second, PublishTimeout: 2 * time.Second,
	})
	if err != nil {
		return err
	}
	s.mu.Lock()
	w.c = c
	s.mu.Unlock()
	return nil
}

// execute is every worker's executor: it takes a little while (so that
// kills land mid-call), records the run, and answers with the call's
// idempotency key.
func (s *system) execute(ctx context.Context, w *workerSlot, req wire.CallRequest) (wire.CallReply, error) {
	key := worker.IdempotencyKey(req)
	s.mu.Lock()
	w.inflight++
	s.executed[key]++
	delay := time.Duration(20+s.rng.IntN(280)) * time.Millisecond
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		w.inflight--
		s.mu.Unlock()
	}()
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return wire.CallReply{}, ctx.Err()
	case <-t.C:
	}
	s.mu.Lock()
	s.answered = append(s.answered, answer{req.RunID, req.ToolCallID})
	s.mu.Unlock()
	return worker.ReturnValue(resultValue(key)), nil
}

func resultValue(key string) json.RawMessage {
	b, _ := json.Marshal(map[string]string{"key": key})
	return b
}

// killWorker cuts the worker's connection at once, like a process that
// died: nothing it was doing is acked or published afterwards.
func (s *system) killWorker(w *workerSlot) {
	s.mu.Lock()
	c := w.c
	w.c = nil
	s.mu.Unlock()
	c.Kill()
	w.gen++
}

// startApprover runs the approver, which approves everything; Close
// stops it.
func (s *system) startApprover(ctx context.Context) error {
	_, err := s.sys.Approver(ctx, approver.Config{ID: "soak-approver"}, "rules:\n  - action: approve\n")
	return err
}

// startConversations starts the conversations, spread over the ramp.
func (s *system) startConversations(ctx context.Context) error {
	every := s.cfg.Ramp / time.Duration(s.cfg.Conversations)
	t := time.NewTicker(max(every, time.Millisecond))
	defer t.Stop()
	for i := range s.cfg.Conversations {
		id, err := s.startConversation(ctx, i)
		if err != nil {
			return err
		}
		s.mu.Lock()
		s.convs = append(s.convs, id)
		s.mu.Unlock()
		if i == s.cfg.Conversations-1 {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// startConversation starts one conversation on some replica, trying the
// others if that one is being replaced (stopping, or its connection just
// closed). The start carries an idempotency key, so a retry after an
// attempt that did start it answers with that conversation.
func (s *system) startConversation(ctx context.Context, i int) (string, error) {
	var errs []error
	req := orchestrator.StartRequest{Prompt: fmt.Sprintf("job %d", i), IdempotencyKey: fmt.Sprintf("soak-job-%d", i)}
	for attempt := range 2 * len(s.replicas) {
		s.mu.Lock()
		r := s.replicas[(i+attempt)%len(s.replicas)]
		o := r.orch
		s.mu.Unlock()
		info, err := o.StartRunWith(ctx, req)
		if err == nil {
			return info.ConversationID, nil
		}
		errs = append(errs, err)
		if !errors.Is(err, orchestrator.ErrStopped) && !errors.Is(err, nats.ErrConnectionClosed) {
			break
		}
	}
	return "", fmt.Errorf("start conversation %d: %w", i, errors.Join(errs...))
}

// anyOrch is a replica to read state through.
func (s *system) anyOrch() *orchestrator.Orchestrator {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.replicas[0].orch.Orchestrator
}

// waitEnded polls the conversations until every one is completed or failed
// (true) or ctx ends (false).
func (s *system) waitEnded(ctx context.Context) bool {
	s.mu.Lock()
	pending := append([]string(nil), s.convs...)
	s.mu.Unlock()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		var still []string
		for _, id := range pending {
			c, err := s.anyOrch().Conversation(ctx, id)
			if err != nil || !c.Status.Terminal() {
				still = append(still, id)
			}
		}
		pending = still
		if len(pending) == 0 {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
}

// reviveAll restarts every killed worker.
func (s *system) reviveAll(ctx context.Context) error {
	for _, w := range s.workers {
		if w.c == nil {
			if err := s.startWorker(ctx, w); err != nil {
				return err
			}
		}
	}
	return nil
}

// shutdown stops everything still running, each part bounded by
// stopTimeout (a replica's runs in flight are interrupted then).
func (s *system) shutdown() {
	if err := s.sys.Close(context.Background()); err != nil {
		s.log.Warn("soak: stop", slog.String("error", err.Error()))
	}
}

func (s *system) elapsed() time.Duration { return time.Since(s.startedAt) }
