package telemetry

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Directions of toolgate_model_tokens_total.
const (
	TokensInput  = "input"
	TokensOutput = "output"
)

// OrchestratorMetrics are the orchestrator's collectors:
//
//	toolgate_runs_total{agent,status}            runs ended, by agent and status
//	toolgate_deferred_pending{tool,kind}         deferred calls published and not yet settled
//	toolgate_decision_seconds{tool}              approval request published → decision accepted
//	toolgate_result_seconds{tool}                call published → worker result accepted
//	toolgate_expiries_total{kind}                deferred calls settled by their deadline
//	toolgate_denials_total{tool}                 approvals denied by an approver
//	toolgate_replies_total{kind,verdict}         replies consumed, by what became of them
//	toolgate_model_request_seconds{model}        model request latency
//	toolgate_model_tokens_total{model,direction} tokens reported by the model
//	toolgate_model_errors_total{model}           model requests that failed
//	toolgate_redeliveries_total{component="orchestrator",tool}
//	toolgate_dead_letters_total{component="orchestrator",reason}
//	toolgate_reconcile_errors_total
//	toolgate_calls_unserved_total{tool}          calls published while no worker took calls of their tool
//	toolgate_append_outcome_unknown_total        rounds of the store's timeout that left a log append's outcome unknown
//	toolgate_state_cache_evictions_total         paused (unfinished) states the state cache pushed out for room
//
// kind is "call" or "approval". toolgate_deferred_pending comes either from
// PendingAdd/PendingDone, counted by this process (sum over replicas; a
// restart loses it), or, once CountPending is set, from the store at
// scrape time (every replica reports the same total: use max). A nil
// *OrchestratorMetrics records nothing.
type OrchestratorMetrics struct {
	runs         *prometheus.CounterVec
	pending      *pendingCollector
	decision     *prometheus.HistogramVec
	result       *prometheus.HistogramVec
	expiries     *prometheus.CounterVec
	denials      *prometheus.CounterVec
	replies      *prometheus.CounterVec
	modelLatency *prometheus.HistogramVec
	modelTokens  *prometheus.CounterVec
	modelErrors  *prometheus.CounterVec
	redeliveries *prometheus.CounterVec
	deadLetters  *prometheus.CounterVec
	reconcile    prometheus.Counter
	unserved     *prometheus.CounterVec
	unresolved   prometheus.Counter
	evictions    prometheus.Counter
}

// NewOrchestratorMetrics registers the orchestrator's collectors on reg.
func NewOrchestratorMetrics(reg prometheus.Registerer) *OrchestratorMetrics {
	return &OrchestratorMetrics{
		runs: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "toolgate_runs_total",
			Help: "Agent runs that ended, by agent and status (e.g. completed, paused, failed).",
		}, []string{"agent", "status"})),
		pending: register(reg, newPendingCollector()), decision: register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "toolgate_decision_seconds",
			Help:    "Time from publishing an approval request to accepting its decision.",
			Buckets: waitBuckets,
		}, []string{"tool"})),
		result: register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "toolgate_result_seconds",
			Help:    "Time from publishing an external call to accepting its result.",
			Buckets: waitBuckets,
		}, []string{"tool"})),
		expiries: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "toolgate_expiries_total",
			Help: "Deferred calls settled because their deadline passed, by kind (approval: denied; call: failed).",
		}, []string{"kind"})),
		denials: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "toolgate_denials_total",
			Help: "Approval requests an approver denied, by tool (expiries are counted apart).",
		}, []string{"tool"})),
		replies: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "toolgate_replies_total",
			Help: "Replies consumed, by kind (call, approval) and verdict (e.g. accepted, duplicate, refused).",
		}, []string{"kind", "verdict"})),
		modelLatency: register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "toolgate_model_request_seconds",
			Help:    "Latency of one model request.",
			Buckets: modelBuckets,
		}, []string{"model"})),
		modelTokens: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "toolgate_model_tokens_total",
			Help: "Tokens the model reported, by model and direction (input, output).",
		}, []string{"model", "direction"})),
		modelErrors: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "toolgate_model_errors_total",
			Help: "Model requests that returned an error.",
		}, []string{"model"})),
		redeliveries: redeliveries(reg),
		deadLetters:  deadLetters(reg),
		reconcile: register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "toolgate_reconcile_errors_total",
			Help: "Conversations a reconcile pass or a retention sweep had to leave as they were: a record it could not read, a change that failed (see the log).",
		})),
		unserved: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "toolgate_calls_unserved_total",
			Help: "External calls published while no worker took calls of their tool (none pulled them, none held one); each also has a tool_unserved event.",
		}, []string{"tool"})),
		unresolved: register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "toolgate_append_outcome_unknown_total",
			Help: "Rounds of the store's timeout (10 s) that ended with an append to a conversation's log unanswered and its outcome unknown: the server or the stream cannot be reached. The append is followed up until the log answers (see the log).",
		})),
		evictions: register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "toolgate_state_cache_evictions_total",
			Help: "Unfinished (paused or running) conversation states the state cache pushed out for room: each is read from its log when its reply comes. Growing with paused conversations means the cache is too small for them (--state-cache).",
		})),
	}
}

// StateCacheEvicted counts n unfinished states pushed out of the state
// cache.
func (m *OrchestratorMetrics) StateCacheEvicted(n int) {
	if m == nil {
		return
	}
	m.evictions.Add(float64(n))
}

// AppendUnresolved counts a round of the store's timeout that left an
// append's outcome unknown.
func (m *OrchestratorMetrics) AppendUnresolved() {
	if m == nil {
		return
	}
	m.unresolved.Inc()
}

// UnservedCall counts a call of tool published while no worker took its
// tool's calls.
func (m *OrchestratorMetrics) UnservedCall(tool string) {
	if m == nil {
		return
	}
	m.unserved.WithLabelValues(tool).Inc()
}

// ReconcileError counts a conversation a reconcile pass or a retention
// sweep had to leave.
func (m *OrchestratorMetrics) ReconcileError() {
	if m == nil {
		return
	}
	m.reconcile.Inc()
}

// RunFinished counts a run of agent that ended with status.
func (m *OrchestratorMetrics) RunFinished(agent, status string) {
	if m == nil {
		return
	}
	m.runs.WithLabelValues(agent, status).Inc()
}

// PendingAdd counts a deferred call published.
func (m *OrchestratorMetrics) PendingAdd(tool, kind string) {
	if m == nil {
		return
	}
	m.pending.add(tool, kind, 1)
}

// PendingDone uncounts a deferred call settled (reply accepted or expired).
func (m *OrchestratorMetrics) PendingDone(tool, kind string) {
	if m == nil {
		return
	}
	m.pending.add(tool, kind, -1)
}

// PendingCount is how many deferred calls of one tool and kind wait.
type PendingCount struct {
	Tool, Kind string
	N          int
}

// CountPending makes toolgate_deferred_pending come from fn, called at
// each scrape (bounded by 10s): the calls waiting across every replica,
// right after a restart too. PendingAdd and PendingDone are then ignored.
// A scrape during which fn fails reports the error for this metric only.
func (m *OrchestratorMetrics) CountPending(fn func(ctx context.Context) ([]PendingCount, error)) {
	if m == nil {
		return
	}
	m.pending.mu.Lock()
	m.pending.fn = fn
	m.pending.mu.Unlock()
}

// Known makes the series of the label values known at start exist from
// the first scrape, at 0, instead of appearing only once something happens
// (Prometheus' "avoid missing metrics"): runs by each of agents and every
// status, replies by every kind and verdict, expiries by kind, denials and
// the pending gauge by each of tools (with both kinds), and the reconcile
// errors.
func (m *OrchestratorMetrics) Known(agents, tools []string) {
	if m == nil {
		return
	}
	for _, a := range agents {
		for _, st := range []string{"completed", "failed", "paused", "interrupted", "lease_lost", "not_stored", "dropped"} {
			m.runs.WithLabelValues(a, st)
		}
	}
	kinds := []string{"call", "approval"}
	for _, k := range kinds {
		m.expiries.WithLabelValues(k)
		for _, v := range []string{"applied", "duplicate", "refused", "late", "invalid", "unknown_run", "error"} {
			m.replies.WithLabelValues(k, v)
		}
	}
	m.pending.mu.Lock()
	defer m.pending.mu.Unlock()
	for _, t := range tools {
		m.denials.WithLabelValues(t)
		for _, k := range kinds {
			m.pending.known = append(m.pending.known, pendingKey{t, k})
		}
	}
}

type pendingKey struct{ tool, kind string }

// pendingCollector reports either its own counts or those of a function
// called at scrape time.
type pendingCollector struct {
	desc *prometheus.Desc

	mu     sync.Mutex
	counts map[pendingKey]float64
	fn     func(ctx context.Context) ([]PendingCount, error)
	// known are reported at 0 when nothing is pending for them.
	known []pendingKey
}

func newPendingCollector() *pendingCollector {
	return &pendingCollector{
		desc: prometheus.NewDesc("toolgate_deferred_pending",
			"Deferred calls published and not yet settled, by tool and kind (call, approval).",
			[]string{"tool", "kind"}, nil),
		counts: map[pendingKey]float64{},
	}
}

func (c *pendingCollector) add(tool, kind string, d float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counts[pendingKey{tool, kind}] += d
}

func (c *pendingCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *pendingCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	fn := c.fn
	known := c.known
	counts := make(map[pendingKey]float64, len(c.counts))
	for k, v := range c.counts {
		counts[k] = v
	}
	c.mu.Unlock()
	if fn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		list, err := fn(ctx)
		if err != nil {
			ch <- prometheus.NewInvalidMetric(c.desc, err)
			return
		}
		counts = map[pendingKey]float64{}
		for _, p := range list {
			counts[pendingKey{p.Tool, p.Kind}] += float64(p.N)
		}
	}
	for _, k := range known {
		if _, ok := counts[k]; !ok {
			counts[k] = 0
		}
	}
	for k, v := range counts {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, v, k.tool, k.kind)
	}
}

// DecisionLatency records publish → accepted decision for an approval.
func (m *OrchestratorMetrics) DecisionLatency(tool string, d time.Duration) {
	if m == nil {
		return
	}
	m.decision.WithLabelValues(tool).Observe(seconds(max(d, 0)))
}

// ResultLatency records publish → accepted result for an external call.
func (m *OrchestratorMetrics) ResultLatency(tool string, d time.Duration) {
	if m == nil {
		return
	}
	m.result.WithLabelValues(tool).Observe(seconds(max(d, 0)))
}

// Expired counts a deferred call settled by its deadline.
func (m *OrchestratorMetrics) Expired(kind string) {
	if m == nil {
		return
	}
	m.expiries.WithLabelValues(kind).Inc()
}

// Denied counts an accepted decision that denied the call.
func (m *OrchestratorMetrics) Denied(tool string) {
	if m == nil {
		return
	}
	m.denials.WithLabelValues(tool).Inc()
}

// Reply counts a consumed reply by kind and a verdict from a fixed list.
func (m *OrchestratorMetrics) Reply(kind, verdict string) {
	if m == nil {
		return
	}
	m.replies.WithLabelValues(kind, verdict).Inc()
}

// ModelRequest records one successful model request: its latency and the
// tokens the model reported (zero when it reports none).
func (m *OrchestratorMetrics) ModelRequest(model string, took time.Duration, inTokens, outTokens int64) {
	if m == nil {
		return
	}
	m.modelLatency.WithLabelValues(model).Observe(seconds(max(took, 0)))
	if inTokens > 0 {
		m.modelTokens.WithLabelValues(model, TokensInput).Add(float64(inTokens))
	}
	if outTokens > 0 {
		m.modelTokens.WithLabelValues(model, TokensOutput).Add(float64(outTokens))
	}
}

// ModelError counts a failed model request.
func (m *OrchestratorMetrics) ModelError(model string) {
	if m == nil {
		return
	}
	m.modelErrors.WithLabelValues(model).Inc()
}

// Redelivered counts a reply delivered more than once.
func (m *OrchestratorMetrics) Redelivered(tool string) {
	if m == nil {
		return
	}
	m.redeliveries.WithLabelValues(ComponentOrchestrator, tool).Inc()
}

// DeadLetter counts a message the orchestrator dead-lettered, by a reason
// from a fixed list.
func (m *OrchestratorMetrics) DeadLetter(reason string) {
	if m == nil {
		return
	}
	m.deadLetters.WithLabelValues(ComponentOrchestrator, reason).Inc()
}
