package approver

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/telemetry"
	"github.com/toolgate/toolgate/wire"
)

// Asker decides escalated requests, typically a human at a terminal
// (*Prompt). A verdict with ActionEscalate means "skip": no decision.
type Asker interface {
	Ask(ctx context.Context, req wire.ApprovalRequest) (Verdict, error)
}

// Outcome says how the approver handled one request, for HandledFunc.
type Outcome string

const (
	OutcomeApproved  Outcome = "approved"
	OutcomeDenied    Outcome = "denied"
	OutcomeEscalated Outcome = "escalated" // no decision published
	OutcomeExpired   Outcome = "expired"   // past its deadline; no decision
	OutcomeDuplicate Outcome = "duplicate" // already handled by this approver
	OutcomeSettled   Outcome = "settled"   // no longer pending (the orchestrator says); no decision
	OutcomeRefused   Outcome = "refused"   // its decision was refused by the orchestrator
)

// Teller is an Asker that can be told what became of its answer: the
// decision refused by the orchestrator, or the request settled meanwhile.
type Teller interface {
	Tell(msg string)
}

// Config configures an Approver.
type Config struct {
	// Bus is the connection to consume requests and publish decisions on.
	// Required; the Approver does not close it. The streams must exist
	// (the orchestrator sets them up).
	Bus *bus.Bus
	// ID names this approver: its durable consumer on TOOLGATE_APPROVALS
	// and the approver_id of its decisions. Required; one subject token.
	ID string
	// Policy decides requests. nil escalates every request, which makes
	// sense only with an Asker. A shorthand for Decider.
	Policy *Policy
	// Decider decides requests (Policy is one); it wins over Policy.
	Decider Decider
	// Asker, when set, is asked about requests the policy escalates, one
	// at a time. nil leaves them unanswered for other approvers.
	Asker Asker
	// AllRequests gives the Decider the requests this approver may not
	// decide too (their approvers do not name ID), for one that decides
	// nothing, as the Notifier: a verdict on them other than escalate is
	// not sent, and no Asker is asked. Otherwise they are left to their
	// approvers unseen.
	AllRequests bool
	// Key signs decisions. nil sends them unsigned; an orchestrator that
	// trusts keys refuses those.
	Key ed25519.PrivateKey
	// Filter narrows the requests seen, e.g. wire.ApprovalSubject(tool).
	// Defaults to wire.AllApprovals.
	Filter string
	// Consume tunes the durable consumer. With an Asker, PullMaxMessages
	// defaults to 1 and AutoInProgress is on, so that requests do not wait
	// in a prefetch buffer, or get redelivered, while a human thinks.
	Consume bus.ConsumeConfig
	// StopTimeout bounds the wait for a running handler when Run's context
	// ends. Defaults to 10s.
	StopTimeout time.Duration
	// OutcomeTimeout bounds the wait for the orchestrator's outcome of a
	// decision (applied or refused). Defaults to 10s.
	OutcomeTimeout time.Duration
	// HandledFunc, if set, is called after each request is handled (its
	// delivery about to be acked). Called from the consume loop; keep it
	// short.
	HandledFunc func(req wire.ApprovalRequest, o Outcome)
	// RefusedFunc, if set, is told why the orchestrator refused a
	// decision (before HandledFunc with OutcomeRefused), or, later, that
	// one whose outcome did not come in time was not applied (its
	// Verdict the call's state: decided by another, or still pending
	// NotAppliedAfter after it). Calls never overlap.
	RefusedFunc func(req wire.ApprovalRequest, err *RefusedError)
	// StatusInterval is how often the calls of decisions whose outcome
	// did not come in time are asked about. Defaults to 5s.
	StatusInterval time.Duration
	// NotAppliedAfter is how long such a call may stay pending before the
	// decision counts as not applied: a replica that does not hold the
	// conversation's config hands a decision over for about 30s before it
	// is dead-lettered. Defaults to 45s.
	NotAppliedAfter time.Duration
	// Logger receives the approver's log. nil discards.
	Logger *slog.Logger
	// Clock is the clock for deadlines and decided_at. Defaults to time.Now.
	Clock func() time.Time
	// Metrics counts requests by outcome, the time from a request's
	// publication to its decision, redeliveries and dead letters. nil
	// records nothing.
	Metrics *telemetry.ApproverMetrics
	// TracerProvider makes one span per request, child of the trace
	// context in its headers; decisions carry the span's context. Defaults
	// to the global provider (no-op unless telemetry.Setup installed one;
	// the trace context then passes through unchanged).
	TracerProvider trace.TracerProvider
}

// Decider decides one approval request. A verdict with ActionEscalate
// leaves it to other approvers (or the Asker). An error hands the request
// back to be delivered again with back-off, unless it is bus.Terminal: then
// the request is dead-lettered.
type Decider interface {
	Decide(ctx context.Context, req wire.ApprovalRequest) (Verdict, error)
}

func (c Config) withDefaults() Config {
	if c.Decider == nil && c.Policy != nil {
		c.Decider = c.Policy
	}
	if c.Filter == "" {
		c.Filter = wire.AllApprovals
	}
	if c.Asker != nil {
		if c.Consume.PullMaxMessages == 0 {
			c.Consume.PullMaxMessages = 1
		}
		c.Consume.AutoInProgress = true
	}
	if c.StopTimeout <= 0 {
		c.StopTimeout = 10 * time.Second
	}
	if c.OutcomeTimeout <= 0 {
		c.OutcomeTimeout = 10 * time.Second
	}
	if c.StatusInterval <= 0 {
		c.StatusInterval = 5 * time.Second
	}
	if c.NotAppliedAfter <= 0 {
		c.NotAppliedAfter = 45 * time.Second
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
	if c.Decider == nil && c.Asker == nil {
		return errors.New("a policy, a decider or an asker is required")
	}
	if c.Key != nil && len(c.Key) != ed25519.PrivateKeySize {
		return fmt.Errorf("key is %d bytes, want %d", len(c.Key), ed25519.PrivateKeySize)
	}
	return nil
}

// Approver consumes approval requests on its own durable consumer (every
// approver sees every request), decides them by policy or by asking, and
// publishes signed decisions on toolgate.reply.<run>.approval.
type Approver struct {
	cfg     Config
	logger  *slog.Logger
	tracer  trace.Tracer
	running atomic.Bool
	seen    *seenSet
	fatal   chan error
	// unsettled are the decisions whose outcome did not come in time.
	unsettled unsettled
	// refusedMu keeps RefusedFunc's calls apart: the handler and the
	// follow-up of unsettled decisions both make them.
	refusedMu sync.Mutex
}

// New checks cfg and returns an Approver; Run starts it.
func New(cfg Config) (*Approver, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("new approver: %w", err)
	}
	return &Approver{
		cfg:    cfg,
		logger: cfg.Logger.With(slog.String("component", "approver"), slog.String("approver_id", cfg.ID)),
		tracer: telemetry.Tracer(cfg.TracerProvider),
		seen:   newSeenSet(4096),
		fatal:  make(chan error, 1),
	}, nil
}

// Run consumes requests until ctx ends (then it returns nil after the
// running handler finishes) or the Asker's input ends (an error).
func (a *Approver) Run(ctx context.Context) error {
	if !a.running.CompareAndSwap(false, true) {
		return errors.New("approver: already running")
	}
	defer a.running.Store(false)
	sub, err := a.cfg.Bus.ConsumeApprovals(ctx, a.cfg.ID, a.cfg.Filter, a.cfg.Consume,
		bus.HandlerFunc[wire.ApprovalRequest](a.handle))
	if err != nil {
		return fmt.Errorf("approver %s: %w", a.cfg.ID, err)
	}
	a.logger.InfoContext(ctx, "approver running", slog.String("filter", a.cfg.Filter),
		slog.Bool("signing", a.cfg.Key != nil), slog.Bool("interactive", a.cfg.Asker != nil))
	fctx, stopFollow := context.WithCancel(ctx)
	var follow sync.WaitGroup
	follow.Go(func() { a.followUnsettled(fctx) })
	defer func() {
		stopFollow()
		follow.Wait()
	}()
	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-a.fatal:
	}
	// Stop is bounded by its own timeout: ctx has usually ended already.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.cfg.StopTimeout)
	defer cancel()
	if err := sub.Stop(sctx); err != nil && runErr == nil {
		runErr = fmt.Errorf("approver %s: %w", a.cfg.ID, err)
	}
	return runErr
}

func (a *Approver) handle(ctx context.Context, d *bus.Delivery[wire.ApprovalRequest]) error {
	req := d.Msg
	log := a.logger.With(slog.String("run_id", req.RunID), slog.String("tool_call_id", req.ToolCallID),
		slog.String("tool", req.ToolName))
	ctx, span := telemetry.StartRequest(ctx, a.tracer, d.Subject, d.Header, telemetry.Request{
		RunID: req.RunID, ConversationID: req.ConversationID, ToolCallID: req.ToolCallID,
		Tool: req.ToolName, Attempt: req.Attempt, Delivered: d.NumDelivered,
	})
	defer span.End()
	if d.NumDelivered > 1 {
		a.cfg.Metrics.Redelivered(req.ToolName)
	}
	key := seenKey(req)
	if a.seen.has(key) {
		log.DebugContext(ctx, "request already handled", slog.Uint64("delivered", d.NumDelivered))
		a.handled(ctx, req, OutcomeDuplicate)
		return nil
	}
	if a.expired(req) {
		log.InfoContext(ctx, "request past its deadline, skipped", slog.Time("deadline", req.Deadline))
		a.done(ctx, key, req, OutcomeExpired)
		return nil
	}
	notOurs := Admit(req, a.cfg.ID, false) != nil
	if notOurs && !a.cfg.AllRequests {
		log.InfoContext(ctx, "not among the call's approvers: left to them", slog.Any("approvers", req.Approvers))
		a.done(ctx, key, req, OutcomeEscalated)
		return nil
	}
	known, err := a.pending(ctx, log, req)
	if err != nil || known == statusSettled {
		if err == nil {
			a.done(ctx, key, req, OutcomeSettled)
		}
		return err
	}

	v, err := a.decide(ctx, log, span, req)
	if err != nil {
		return err
	}
	if notOurs && v.Action != ActionEscalate {
		log.InfoContext(ctx, "not among the call's approvers: its verdict is not sent", slog.String("action", string(v.Action)),
			slog.Any("approvers", req.Approvers))
		v.Action = ActionEscalate
	}
	if v.Action == ActionEscalate && a.cfg.Asker != nil && !notOurs {
		var expired bool
		if v, expired, err = a.ask(ctx, log, req); err != nil {
			return err
		}
		if expired {
			a.done(ctx, key, req, OutcomeExpired)
			return nil
		}
		// A person may take long: the request may have been settled
		// elsewhere meanwhile.
		if v.Action != ActionEscalate && known == statusPending {
			if known, err = a.pending(ctx, log, req); err != nil || known == statusSettled {
				if err == nil {
					a.tell("not sent: " + req.RunID + "/" + req.ToolCallID + " was settled meanwhile")
					a.done(ctx, key, req, OutcomeSettled)
				}
				return err
			}
		}
	}
	if v.Action == ActionApprove && Admit(req, a.cfg.ID, true) != nil {
		// Its own call: the orchestrator would refuse the approval.
		log.InfoContext(ctx, "may not approve the call of its own run: left to other approvers", slog.Int("rule", v.Rule))
		a.tell("left to other approvers: " + req.RunID + "/" + req.ToolCallID + " is a call of your own run")
		v.Action = ActionEscalate
	}
	if v.Action == ActionEscalate {
		log.InfoContext(ctx, "escalated: left to other approvers", slog.Int("rule", v.Rule))
		a.done(ctx, key, req, OutcomeEscalated)
		return nil
	}
	dec, err := a.publish(ctx, span, req, v, known == statusPending)
	var refused *RefusedError
	switch {
	case errors.As(err, &refused):
		log.WarnContext(ctx, "decision refused by the orchestrator", slog.String("verdict", refused.Verdict),
			slog.String("reason", refused.Reason), slog.Bool("approved", dec.Approved), slog.Int("rule", v.Rule))
		a.tell(refused.Error())
		a.refused(req, refused)
		a.done(ctx, key, req, OutcomeRefused)
		return nil
	case errors.Is(err, ErrNoOutcome):
		log.WarnContext(ctx, "decision published; the orchestrator has not said yet what it did with it: its call's status is asked until it tells")
		a.unsettled.add(req, dec, a.cfg.Clock())
	case errors.Is(err, ErrNoOrchestrator):
		log.WarnContext(ctx, "decision published; the orchestrator has not said yet what it did with it")
	case err != nil:
		return err
	}
	o := OutcomeDenied
	if dec.Approved {
		o = OutcomeApproved
	}
	log.InfoContext(ctx, "decision published", slog.String("outcome", string(o)), slog.Int("rule", v.Rule),
		slog.Bool("override_args", len(dec.OverrideArgs) != 0), slog.Bool("signed", dec.Signature != nil))
	// From the request's storage in the stream (its publication) to now:
	// both are wall-clock readings, unlike the Clock seam.
	a.cfg.Metrics.Decided(a.cfg.ID, string(o), time.Since(d.Timestamp))
	a.done(ctx, key, req, o)
	return nil
}

// decide asks the Decider (escalate when there is none). An error that
// says the request can never be decided is dead-lettered; any other hands
// the request back for later.
func (a *Approver) decide(ctx context.Context, log *slog.Logger, span trace.Span, req wire.ApprovalRequest) (Verdict, error) {
	if a.cfg.Decider == nil {
		return Verdict{Action: ActionEscalate, Rule: -1}, nil
	}
	v, err := a.cfg.Decider.Decide(ctx, req)
	var term *bus.TermError
	switch {
	case errors.As(err, &term):
		// The request cannot be decided now or ever.
		a.deadLetter(span, "policy", err)
		return v, err
	case err != nil:
		span.RecordError(err)
		log.WarnContext(ctx, "decider failed; the request comes back later", slog.Any("error", err))
		return v, err
	}
	for _, s := range v.Skipped {
		log.WarnContext(ctx, "policy rule failed to evaluate; treated as not matching",
			slog.Int("rule", s.Index), slog.Any("error", s.Err))
	}
	log.DebugContext(ctx, "policy verdict", slog.String("action", string(v.Action)), slog.Int("rule", v.Rule))
	return v, nil
}

// ask puts an escalated request to the Asker (a person). It reports
// expired when the deadline passed before the answer, which is then not
// sent. An Asker that fails for good (its input closed) stops the
// approver, and the request goes back for an approver still there.
func (a *Approver) ask(ctx context.Context, log *slog.Logger, req wire.ApprovalRequest) (v Verdict, expired bool, err error) {
	v, err = a.cfg.Asker.Ask(ctx, req)
	switch {
	case errors.Is(err, ErrExpired):
		log.InfoContext(ctx, "request expired while asking", slog.Time("deadline", req.Deadline))
		return v, true, nil
	case err != nil && ctx.Err() == nil && !errors.Is(err, context.Canceled):
		select {
		case a.fatal <- fmt.Errorf("approver %s: %w", a.cfg.ID, err):
		default:
		}
		return v, false, err
	case err != nil:
		return v, false, err
	}
	if a.expired(req) {
		log.InfoContext(ctx, "answered after the deadline; not sent", slog.Time("deadline", req.Deadline))
		return v, true, nil
	}
	return v, false, nil
}

// Whether a request is pending, as far as the orchestrator says.
type pendingStatus int

const (
	statusUnknown pendingStatus = iota // no orchestrator answers
	statusPending
	statusSettled
)

// pending asks the orchestrator whether req is still pending. When none
// answers, nothing can be known (the request is handled as before, and
// the orchestrator refuses a decision it cannot apply when it comes); a
// failed request hands req back to be delivered again.
func (a *Approver) pending(ctx context.Context, log *slog.Logger, req wire.ApprovalRequest) (pendingStatus, error) {
	st, err := Status(ctx, a.cfg.Bus, req)
	switch {
	case errors.Is(err, ErrNoOrchestrator):
		log.DebugContext(ctx, "no orchestrator answers: whether the request is pending is not known")
		return statusUnknown, nil
	case err != nil:
		log.WarnContext(ctx, "asking the orchestrator whether the request is pending; it comes back later", slog.Any("error", err))
		return statusUnknown, err
	case !st.Pending():
		log.InfoContext(ctx, "request no longer pending, skipped", slog.String("state", st.State), slog.String("by", st.By))
		return statusSettled, nil
	}
	return statusPending, nil
}

// tell tells the Asker's person, if it can be told.
// refused tells RefusedFunc, one call at a time.
func (a *Approver) refused(req wire.ApprovalRequest, err *RefusedError) {
	if a.cfg.RefusedFunc == nil {
		return
	}
	a.refusedMu.Lock()
	defer a.refusedMu.Unlock()
	a.cfg.RefusedFunc(req, err)
}

func (a *Approver) tell(msg string) {
	if t, ok := a.cfg.Asker.(Teller); ok {
		t.Tell(msg)
	}
}

// publish signs (with a key) and publishes the decision of v; with wait,
// it waits for the orchestrator's outcome (a *RefusedError when it did not
// apply it). A failed publish hands the request back: its redelivery
// publishes again under the same Nats-Msg-Id.
func (a *Approver) publish(ctx context.Context, span trace.Span, req wire.ApprovalRequest, v Verdict, wait bool) (wire.Decision, error) {
	dec := wire.Decision{
		RunID:      req.RunID,
		ToolCallID: req.ToolCallID,
		ArgsDigest: req.ArgsDigest,
		Approved:   v.Action == ActionApprove,
		ApproverID: a.cfg.ID,
		DecidedAt:  a.cfg.Clock().UTC(),
	}
	if dec.Approved {
		dec.OverrideArgs = v.OverrideArgs
		dec.Metadata = v.Metadata
	} else {
		dec.Message = v.Message
	}
	if a.cfg.Key != nil {
		if err := Sign(a.cfg.Key, &dec); err != nil {
			a.deadLetter(span, "sign", err)
			return dec, bus.Terminal(err)
		}
	}
	// The decision continues the request's trace, so that the follow-up run
	// the orchestrator starts from it joins the same trace.
	hdr := nats.Header{}
	telemetry.Inject(ctx, hdr)
	if !wait {
		if _, err := a.cfg.Bus.PublishDecision(ctx, dec, hdr); err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, "publish decision")
			return dec, fmt.Errorf("decide %s: %w", req.ToolCallID, err)
		}
		return dec, nil
	}
	err := decisionSender{bus: a.cfg.Bus, timeout: a.cfg.OutcomeTimeout}.send(ctx, dec, hdr)
	var refused *RefusedError
	if err != nil && !errors.As(err, &refused) && !errors.Is(err, ErrNoOutcome) && !errors.Is(err, ErrNoOrchestrator) {
		span.RecordError(err)
		span.SetStatus(codes.Error, "publish decision")
		return dec, fmt.Errorf("decide %s: %w", req.ToolCallID, err)
	}
	return dec, err
}

func (a *Approver) deadLetter(span trace.Span, reason string, err error) {
	a.cfg.Metrics.DeadLetter(reason)
	span.RecordError(err)
	span.SetStatus(codes.Error, reason)
	span.SetAttributes(telemetry.AttrOutcome.String("dead_letter"))
}

func (a *Approver) expired(req wire.ApprovalRequest) bool {
	return !req.Deadline.IsZero() && !a.cfg.Clock().Before(req.Deadline)
}

func (a *Approver) done(ctx context.Context, key string, req wire.ApprovalRequest, o Outcome) {
	a.seen.add(key)
	a.handled(ctx, req, o)
}

func (a *Approver) handled(ctx context.Context, req wire.ApprovalRequest, o Outcome) {
	a.cfg.Metrics.Handled(a.cfg.ID, string(o))
	trace.SpanFromContext(ctx).SetAttributes(telemetry.AttrOutcome.String(string(o)))
	if a.cfg.HandledFunc != nil {
		a.cfg.HandledFunc(req, o)
	}
}

func seenKey(req wire.ApprovalRequest) string {
	return fmt.Sprintf("%s/%s/%d", req.RunID, req.ToolCallID, req.Attempt)
}

// seenSet remembers requests this approver has finished, so that a
// redelivery (an ack lost, a prefetched message past AckWait) does not ask a
// human twice. Bounded: the oldest entries go first.
type seenSet struct {
	mu    sync.Mutex
	max   int
	keys  map[string]struct{}
	order []string
}

func newSeenSet(max int) *seenSet {
	return &seenSet{max: max, keys: make(map[string]struct{})}
}

func (s *seenSet) has(k string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.keys[k]
	return ok
}

func (s *seenSet) add(k string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.keys[k]; ok {
		return
	}
	s.keys[k] = struct{}{}
	s.order = append(s.order, k)
	if len(s.order) > s.max {
		drop := len(s.order) - s.max
		for _, old := range s.order[:drop] {
			delete(s.keys, old)
		}
		s.order = append(s.order[:0:0], s.order[drop:]...)
	}
}
