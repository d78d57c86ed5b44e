package inbox

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/toolgate/toolgate/internal/approver"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/client"
	"github.com/toolgate/toolgate/internal/telemetry"
	"github.com/toolgate/toolgate/wire"
)

// Config configures an Inbox.
type Config struct {
	// Bus is the connection to read requests and events and publish
	// decisions on. Required; the Inbox does not close it.
	Bus *bus.Bus
	// ID is the approver_id of the decisions made here. Required; one
	// subject token. Use the bot's id when the orchestrator trusts one key
	// per approver id.
	ID string
	// Durable names the inbox's consumer on TOOLGATE_APPROVALS. Defaults
	// to ID + "-inbox", so that a bot and an inbox with the same ID each
	// see every request.
	Durable string
	// Key signs decisions. nil sends them unsigned.
	Key ed25519.PrivateKey
	// Filter narrows the requests shown, e.g. wire.ApprovalSubject(tool).
	// Defaults to wire.AllApprovals.
	Filter string
	// Token, when set, must come with every request but /healthz and
	// /login: as a bearer header or as the cookie the login form sets.
	// Empty: only loopback clients are served.
	Token string
	// Orchestrator, when set, is asked which calls are still pending
	// (requests it no longer lists leave the inbox) and for conversations.
	Orchestrator *client.Client
	// PollInterval is how often the orchestrator is asked. Defaults to 5s.
	PollInterval time.Duration
	// OutcomeTimeout bounds the wait for the orchestrator's outcome of a
	// decision made here. Defaults to 10s.
	OutcomeTimeout time.Duration
	// NotAppliedAfter is how long a decision made here whose outcome did
	// not come may leave its call pending before the inbox says it was not
	// applied and shows the request again. A replica that does not hold
	// the conversation's config hands a decision over for about 30s before
	// it is dead-lettered, never applied. Defaults to 45s.
	NotAppliedAfter time.Duration
	// AckWait is the consumer's ack wait; held requests are renewed every
	// third of it, and a crashed inbox's requests come back after it.
	// Defaults to 30s.
	AckWait time.Duration
	// MaxPending bounds the requests held at once (the consumer's
	// MaxAckPending). Defaults to 10000.
	MaxPending int
	// CatchUpTimeout bounds the wait for the event replay before requests
	// are taken, so that settled requests do not flash up. Defaults to 30s.
	CatchUpTimeout time.Duration
	// Metrics, when set, count the decisions made here and how long their
	// requests waited.
	Metrics *telemetry.ApproverMetrics
	// Logger receives the inbox's log. nil discards.
	Logger *slog.Logger
	// Clock is the clock for ages, deadlines and decided_at. Defaults to
	// time.Now.
	Clock func() time.Time
}

func (c Config) withDefaults() Config {
	if c.Durable == "" {
		c.Durable = c.ID + "-inbox"
	}
	if c.Filter == "" {
		c.Filter = wire.AllApprovals
	}
	if c.PollInterval <= 0 {
		c.PollInterval = 5 * time.Second
	}
	if c.AckWait <= 0 {
		c.AckWait = 30 * time.Second
	}
	if c.OutcomeTimeout <= 0 {
		c.OutcomeTimeout = 10 * time.Second
	}
	if c.NotAppliedAfter <= 0 {
		c.NotAppliedAfter = 45 * time.Second
	}
	if c.MaxPending <= 0 {
		c.MaxPending = 10000
	}
	if c.CatchUpTimeout <= 0 {
		c.CatchUpTimeout = 30 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	return c
}

func (c Config) validate() error {
	if c.Bus == nil {
		return errors.New("bus is required")
	}
	if err := wire.ValidateToken("approver id", c.ID); err != nil {
		return err
	}
	if err := wire.ValidateToken("durable name", c.Durable); err != nil {
		return err
	}
	if c.Key != nil && len(c.Key) != ed25519.PrivateKeySize {
		return fmt.Errorf("key is %d bytes, want %d", len(c.Key), ed25519.PrivateKeySize)
	}
	return nil
}

// Inbox holds the pending approval requests and serves the page.
type Inbox struct {
	cfg     Config
	log     *slog.Logger
	store   *store
	settled *approver.Settlements
	decided *decidedLog
	pages   *template.Template
	running atomic.Bool
	ready   atomic.Bool
	// tools is the toolgate_tools bucket (nil if it could not be opened),
	// read for the MCP server of each request's tool.
	tools *bus.KV
}

// New checks cfg and returns an Inbox; Run starts taking requests, Handler
// serves the page.
func New(cfg Config) (*Inbox, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("new inbox: %w", err)
	}
	pages, err := parsePages()
	if err != nil {
		return nil, fmt.Errorf("new inbox: %w", err)
	}
	return &Inbox{
		cfg:     cfg,
		log:     cfg.Logger.With(slog.String("component", "inbox"), slog.String("approver_id", cfg.ID)),
		store:   newStore(),
		settled: approver.NewSettlements(),
		decided: newDecidedLog(4096),
		pages:   pages,
	}, nil
}

// Ready reports whether the inbox has replayed the events and is taking
// requests.
func (in *Inbox) Ready() bool { return in.ready.Load() }

// Run follows the events, takes requests on the inbox's durable consumer
// and keeps them until ctx ends. On the way out it naks the requests it
// holds, so that the next inbox on the same durable gets them at once.
func (in *Inbox) Run(ctx context.Context) error {
	if !in.running.CompareAndSwap(false, true) {
		return errors.New("inbox: already running")
	}
	defer in.running.Store(false)
	// The goroutines below end with ctx: cancel runs before the wait.
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	caughtUp := make(chan struct{})
	lastSeq, err := in.eventsEnd(ctx)
	if err != nil {
		return fmt.Errorf("inbox: %w", err)
	}
	wg.Go(func() { in.followEvents(ctx, lastSeq, caughtUp) })
	// An orchestrator that answers status requests is asked about each
	// request before it is shown, so the replay need not be waited for
	// (a deleted conversation's events are gone: the replay may never
	// reach the last sequence it had).
	served := make(chan struct{})
	if approver.StatusServed(ctx, in.cfg.Bus) == nil {
		close(served)
	}
	select {
	case <-served:
	case <-caughtUp:
	case <-time.After(in.cfg.CatchUpTimeout):
		in.log.WarnContext(ctx, "event replay is slow; taking requests before it caught up",
			slog.Duration("waited", in.cfg.CatchUpTimeout))
	case <-ctx.Done():
		return nil
	}

	if in.tools, err = in.cfg.Bus.Tools(ctx); err != nil {
		in.log.WarnContext(ctx, "tool adverts not read: the MCP server of a tool is not shown", slog.Any("error", err))
	}
	sub, err := in.consume(ctx)
	if err != nil {
		return fmt.Errorf("inbox: %w", err)
	}
	in.ready.Store(true)
	in.log.InfoContext(ctx, "inbox taking requests", slog.String("durable", in.cfg.Durable),
		slog.String("filter", in.cfg.Filter), slog.Bool("signing", in.cfg.Key != nil))
	wg.Go(func() { in.tend(ctx) })
	wg.Go(func() { in.pollStatus(ctx) })
	if in.cfg.Orchestrator != nil {
		wg.Go(func() { in.pollOrchestrator(ctx) })
	}
	<-ctx.Done()
	in.ready.Store(false)
	// Stopping hands the held requests back now rather than after AckWait.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	in.store.drain()
	if err := sub.Stop(sctx); err != nil {
		in.log.Warn("stop taking requests", slog.Any("error", err))
	}
	return nil
}

// eventsEnd is the last sequence of TOOLGATE_EVENTS now: the replay has
// caught up when it has passed it.
func (in *Inbox) eventsEnd(ctx context.Context) (uint64, error) {
	return in.cfg.Bus.LastSequence(ctx, wire.StreamEvents)
}

// followEvents replays every conversation's events and follows new ones,
// dropping the requests they settle.
func (in *Inbox) followEvents(ctx context.Context, lastSeq uint64, caughtUp chan<- struct{}) {
	var once sync.Once
	done := func() { once.Do(func() { close(caughtUp) }) }
	if lastSeq == 0 {
		done()
	}
	for se, err := range in.cfg.Bus.Events(ctx, "", 0) {
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			in.log.WarnContext(ctx, "event stream", slog.Any("error", err))
			continue
		}
		if in.settled.Observe(se.Event) {
			in.dropSettled()
		}
		if se.Seq >= lastSeq {
			done()
		}
	}
}

// dropSettled acks and removes the held requests the events settled.
func (in *Inbox) dropSettled() {
	for _, e := range in.store.removeIf(func(e *entry) (string, bool) {
		if e.sent != nil {
			// Its outcome is learnt from the call's status (syncStatus).
			return "", false
		}
		st, ok := in.settled.Settled(e.req)
		if !ok {
			return "", false
		}
		return "settled:" + st.Reason, true
	}) {
		_ = e.msg.Ack()
	}
}

// consume starts the durable consumer, which holds each request shown
// until it is decided, settled elsewhere or expired (bus.Delivery.Hold:
// renewed every AckWait/3, handed back at once on a clean stop). No
// delivery limit: a held request is handed back on every clean stop and
// must come back each time.
func (in *Inbox) consume(ctx context.Context) (*bus.Subscription, error) {
	cfg := bus.ConsumeConfig{AckWait: in.cfg.AckWait, MaxDeliver: -1, MaxAckPending: in.cfg.MaxPending, PullMaxMessages: 64}
	return in.cfg.Bus.ConsumeApprovals(ctx, in.cfg.Durable, in.cfg.Filter, cfg, bus.HandlerFunc[wire.ApprovalRequest](in.take))
}

// take holds one delivered request, or lets it be acked when there is
// nothing to show. One that does not decode or is invalid the bus
// dead-letters before it gets here.
func (in *Inbox) take(ctx context.Context, d *bus.Delivery[wire.ApprovalRequest]) error {
	r := d.Msg
	log := in.log.With(slog.String("run_id", r.RunID), slog.String("tool_call_id", r.ToolCallID))
	now := in.cfg.Clock()
	switch {
	case !r.Deadline.IsZero() && !now.Before(r.Deadline):
		log.Debug("request past its deadline, not shown")
		return nil
	case in.decided.has(keyOf(r.RunID, r.ToolCallID)):
		return nil
	}
	if _, ok := in.settled.Settled(r); ok {
		return nil
	}
	// A call this approver may not decide is left to those who may: not
	// shown, and a decision on it sent anyway is refused (Decide).
	if err := approver.Admit(r, in.cfg.ID, true); err != nil {
		in.store.refuse(keyOf(r.RunID, r.ToolCallID), err)
		log.Debug("request left to its approvers, not shown", slog.String("reason", err.Error()))
		return nil
	}
	// Only a pending request is shown: the orchestrator is asked, when one
	// answers (the events do not tell of a deleted conversation).
	st, err := approver.Status(ctx, in.cfg.Bus, r)
	switch {
	case err == nil && !st.Pending():
		log.Debug("request no longer pending, not shown", slog.String("state", st.State))
		return nil
	case err != nil && !errors.Is(err, approver.ErrNoOrchestrator):
		return err
	}
	if err := d.Hold(); err != nil {
		return err
	}
	old := in.store.put(&entry{req: r, msg: d, seq: d.StreamSeq, received: d.Timestamp, mcpServer: in.mcpServerOf(r.ToolName)})
	if old != nil && old.seq != d.StreamSeq {
		// A newer attempt of the same call replaces the old one.
		_ = old.msg.Ack()
	}
	if old == nil {
		log.Info("request pending", slog.String("tool", r.ToolName), slog.Time("deadline", r.Deadline))
	}
	return nil
}

// tend drops expired requests every second (the bus renews the others'
// ack deadlines).
func (in *Inbox) tend(ctx context.Context) {
	expiry := time.NewTicker(time.Second)
	defer expiry.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-expiry.C:
			in.dropExpired()
		}
	}
}

func (in *Inbox) dropExpired() {
	now := in.cfg.Clock()
	for _, e := range in.store.removeIf(func(e *entry) (string, bool) {
		return "expired", !e.req.Deadline.IsZero() && !now.Before(e.req.Deadline)
	}) {
		_ = e.msg.Ack()
	}
}

// pollOrchestrator drops the requests the orchestrator no longer lists as
// pending. Only requests held before the poll started can be judged: a
// newer one may not have reached its answer yet.
func (in *Inbox) pollOrchestrator(ctx context.Context) {
	t := time.NewTicker(in.cfg.PollInterval)
	defer t.Stop()
	for {
		in.syncOrchestrator(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (in *Inbox) syncOrchestrator(ctx context.Context) {
	started := in.store.generation()
	pctx, cancel := context.WithTimeout(ctx, in.cfg.PollInterval)
	defer cancel()
	pending, err := in.cfg.Orchestrator.Pending(pctx)
	if err != nil {
		if ctx.Err() == nil {
			in.log.Warn("ask the orchestrator what is pending", slog.Any("error", err))
		}
		return
	}
	open := make(map[string]bool, len(pending))
	for _, p := range pending {
		open[keyOf(p.RunID, p.ToolCallID)] = true
	}
	for _, e := range in.store.removeIf(func(e *entry) (string, bool) {
		return "settled:orchestrator", e.sent == nil && e.gen <= started && !open[e.key()]
	}) {
		_ = e.msg.Ack()
	}
}

// pollStatus drops the held requests the orchestrator says are no longer
// pending, every PollInterval. Like syncOrchestrator, it judges only
// requests held before it asked.
func (in *Inbox) pollStatus(ctx context.Context) {
	t := time.NewTicker(in.cfg.PollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		in.syncStatus(ctx)
	}
}

func (in *Inbox) syncStatus(ctx context.Context) {
	started := in.store.generation()
	// Every held request, those awaiting the outcome of a decision made
	// here (not shown) included.
	reqs := in.store.held()
	if len(reqs) == 0 {
		return
	}
	statuses, err := approver.Statuses(ctx, in.cfg.Bus, reqs)
	switch {
	case errors.Is(err, approver.ErrNoOrchestrator):
		return
	case err != nil:
		if ctx.Err() == nil {
			in.log.Warn("ask the orchestrator what is pending", slog.Any("error", err))
		}
		return
	}
	now := in.cfg.Clock()
	for _, e := range in.store.removeIf(func(e *entry) (string, bool) {
		st, ok := statuses[approver.Ref(e.req)]
		if !ok {
			return "", false
		}
		if e.sent != nil {
			return in.sentOutcome(e, st)
		}
		return "settled:" + st.State, e.gen <= started && !st.Pending()
	}) {
		_ = e.msg.Ack()
	}
	in.resend(statuses, now)
}

// mcpServerOf is the MCP server that tool comes from, as the advert in
// toolgate_tools says; empty when the tool is not from one or no worker
// advertises it now. A read that does not answer soon shows nothing rather
// than holding the request back.
func (in *Inbox) mcpServerOf(tool string) string {
	if in.tools == nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	e, err := in.tools.Get(ctx, tool)
	if err != nil {
		if !errors.Is(err, bus.ErrKeyNotFound) {
			in.log.Warn("read tool advert", slog.String("tool", tool), slog.Any("error", err))
		}
		return ""
	}
	a, err := bus.DecodeToolAdvert(e.Value)
	if err != nil {
		in.log.Warn("tool advert ignored", slog.String("tool", tool), slog.Any("error", err))
		return ""
	}
	return a.MCPServer
}
