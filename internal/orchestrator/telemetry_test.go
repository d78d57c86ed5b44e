package orchestrator_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/toolgate/toolgate/internal/api"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/orchestrator"
	"github.com/toolgate/toolgate/internal/telemetry"
	"github.com/toolgate/toolgate/internal/telemetry/telemetrytest"
)

// series is one expected value of a scrape: a counter's or gauge's value,
// a histogram's sample count. absent expects no such series.
type series struct {
	name   string
	labels []string
	want   float64
	absent bool
}

func (s series) String() string {
	return fmt.Sprintf("%s%v", s.name, s.labels)
}

// waitMetrics scrapes h until every expectation holds: metrics are recorded
// just after the state they count is written.
func waitMetrics(t *testing.T, h http.Handler, want []series) telemetrytest.Families {
	t.Helper()
	var fams telemetrytest.Families
	waitFor(t, "the metrics", func() (bool, string) {
		fams = telemetrytest.Scrape(t, h)
		var wrong []string
		for _, s := range want {
			v, ok := fams.Value(s.name, s.labels...)
			switch {
			case s.absent && ok && v != 0:
				wrong = append(wrong, fmt.Sprintf("%s = %v, want none", s, v))
			case !s.absent && (!ok || v != s.want):
				wrong = append(wrong, fmt.Sprintf("%s = %v (present %v), want %v", s, v, ok, s.want))
			}
		}
		return len(wrong) == 0, strings.Join(wrong, "; ")
	})
	return fams
}

// withToken adds the API's bearer token to every request.
func withToken(h http.Handler, token string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Set("Authorization", "Bearer "+token)
		h.ServeHTTP(w, r)
	})
}

// The seed approval example with metrics and traces on: /metrics (behind
// the API token) counts the runs, the replies, the times to decision and to
// result and the denial; and the spans of the two runs, of the approver
// and worker that answered, and of the replies consumed all belong to one
// trace, each follow-up the child of the reply that completed its batch.
func TestMetricsAndOneTraceAcrossThePause(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tp, exp := telemetrytest.Tracer(t)
	e.tp = tp
	e.worker()
	e.approverBot("bot", seedPolicy, nil)
	reg := telemetry.NewRegistry()
	o, _ := e.orch(orchestrator.Config{Metrics: telemetry.NewOrchestratorMetrics(reg), TracerProvider: tp})
	const token = "s3cret"
	api := api.Handler(o, api.Config{Token: token, Metrics: telemetry.Handler(reg)})

	rec := httptest.NewRecorder()
	api.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusUnauthorized {
		t.Errorf("GET /metrics without the token: %d, want 401", rec.Code)
	}

	info, err := o.StartRun(ctxT(t), seedPrompt, "")
	if err != nil {
		t.Fatal(err)
	}
	c := waitStatus(t, o, info.ConversationID, conversation.StatusCompleted, conversation.StatusFailed)
	if c.Status != conversation.StatusCompleted {
		t.Fatalf("conversation %s: %s", c.Status, c.Error)
	}

	// Runs: the prompt run pauses, its follow-up completes (the approved
	// .env update went to a worker when it was approved, and the follow-up
	// has its result).
	waitMetrics(t, withToken(api, token), []series{
		{name: "toolgate_runs_total", labels: []string{"agent", "default", "status", "completed"}, want: 1},
		{name: "toolgate_runs_total", labels: []string{"status", "paused"}, want: 1},
		{name: "toolgate_replies_total", labels: []string{"kind", "approval", "verdict", "applied"}, want: 2},
		{name: "toolgate_replies_total", labels: []string{"kind", "call", "verdict", "applied"}, want: 2},
		{name: "toolgate_decision_seconds", labels: []string{"tool", "delete_file"}, want: 1},
		{name: "toolgate_decision_seconds", labels: []string{"tool", "update_file"}, want: 1},
		{name: "toolgate_result_seconds", labels: []string{"tool", "update_file"}, want: 2},
		{name: "toolgate_denials_total", labels: []string{"tool", "delete_file"}, want: 1},
		{name: "toolgate_denials_total", labels: []string{"tool", "update_file"}, absent: true},
		{name: "toolgate_model_request_seconds", labels: []string{"model", "seed-approval"}, want: 2},
		{name: "toolgate_deferred_pending", absent: true},
	})

	var spans tracetest.SpanStubs
	waitFor(t, "the spans of two runs", func() (bool, string) {
		spans = exp.GetSpans()
		n := 0
		for _, s := range spans {
			if s.Name == "run" {
				n++
			}
		}
		return n == 2, telemetrytest.SpanNames(spans)
	})
	var runs []tracetest.SpanStub
	byID := map[string]tracetest.SpanStub{}
	for _, s := range spans {
		byID[s.SpanContext.SpanID().String()] = s
		if s.Name == "run" {
			runs = append(runs, s)
		}
	}
	slices.SortFunc(runs, func(a, b tracetest.SpanStub) int { return a.StartTime.Compare(b.StartTime) })
	if runs[0].Parent.IsValid() {
		t.Errorf("the prompt run has a parent: %v", runs[0].Parent)
	}
	traceID := runs[0].SpanContext.TraceID()
	for _, s := range spans {
		if s.SpanContext.TraceID() != traceID {
			t.Errorf("span %s is in trace %s, want %s", s.Name, s.SpanContext.TraceID(), traceID)
		}
	}
	parent := func(s tracetest.SpanStub) tracetest.SpanStub {
		t.Helper()
		p, ok := byID[s.Parent.SpanID().String()]
		if !ok {
			t.Fatalf("parent %s of span %s was not recorded; spans: %s", s.Parent.SpanID(), s.Name, telemetrytest.SpanNames(spans))
		}
		return p
	}
	for i, r := range runs[1:] {
		reply := parent(r)
		if !strings.HasPrefix(reply.Name, "process toolgate.reply.") {
			t.Errorf("follow-up %d's parent is %q, want a reply's span", i+1, reply.Name)
			continue
		}
		answer := parent(reply)
		if !strings.HasPrefix(answer.Name, "process toolgate.call.") && !strings.HasPrefix(answer.Name, "process toolgate.approval.") {
			t.Errorf("reply %q's parent is %q, want a worker's or approver's span", reply.Name, answer.Name)
			continue
		}
		if got := parent(answer); got.SpanContext.SpanID() != runs[i].SpanContext.SpanID() {
			t.Errorf("%q's parent is %q, want the paused run %d", answer.Name, got.Name, i)
		}
	}
	// The .env update, approved and then run by a worker, completes the
	// batch: the worker's result is the follow-up's parent.
	if w := parent(parent(runs[1])); w.Name != "process toolgate.call.update_file" {
		t.Errorf("the last follow-up follows from %q, want the worker's update_file", w.Name)
	}
	var approvals, models int
	for _, s := range spans {
		if strings.HasPrefix(s.Name, "process toolgate.approval.") {
			approvals++
		}
		if strings.HasPrefix(s.Name, "chat ") {
			models++
			if p := parent(s); p.Name != "run" {
				t.Errorf("model span's parent is %q, want a run", p.Name)
			}
		}
	}
	if approvals != 2 || models != 2 {
		t.Errorf("%d approver spans (want 2), %d model spans (want 2): %s", approvals, models, telemetrytest.SpanNames(spans))
	}
}

// The pending gauge is counted from the store when scraped: it shows the calls of
// a paused run by tool and kind, the same after a restart with fresh
// metrics, and drops a call once it is answered.
func TestPendingGaugeFromStoredState(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	reg := telemetry.NewRegistry()
	o, stop := e.orch(orchestrator.Config{Metrics: telemetry.NewOrchestratorMetrics(reg)})
	// A fresh orchestrator exports its series at 0, the pending gauge of
	// every configured tool among them, rather than nothing.
	waitMetrics(t, telemetry.Handler(reg), []series{
		{name: "toolgate_runs_total", labels: []string{"agent", "default", "status", "completed"}, want: 0},
		{name: "toolgate_replies_total", labels: []string{"kind", "approval", "verdict", "refused"}, want: 0},
		{name: "toolgate_deferred_pending", labels: []string{"tool", "delete_file", "kind", "approval"}, want: 0},
	})
	c := startPaused(t, o)
	all := []series{
		{name: "toolgate_deferred_pending", labels: []string{"tool", "delete_file", "kind", "approval"}, want: 1},
		{name: "toolgate_deferred_pending", labels: []string{"tool", "update_file", "kind", "approval"}, want: 1},
		{name: "toolgate_deferred_pending", labels: []string{"tool", "update_file", "kind", "call"}, want: 1},
	}
	waitMetrics(t, telemetry.Handler(reg), all)
	stop()

	reg2 := telemetry.NewRegistry()
	o2, _ := e.orch(orchestrator.Config{Metrics: telemetry.NewOrchestratorMetrics(reg2)})
	waitMetrics(t, telemetry.Handler(reg2), all)

	publishResult(t, e.connect("test"), c.Batch.RunID, "update_file_readme", "result-1")
	waitCall(t, o2, c.ID, "update_file_readme", "the result to apply", func(pc *conversation.PendingCall) bool { return pc.Reply != nil })
	waitMetrics(t, telemetry.Handler(reg2), []series{
		all[0], all[1],
		{name: "toolgate_deferred_pending", labels: []string{"tool", "update_file", "kind", "call"}, want: 0},
		{name: "toolgate_replies_total", labels: []string{"kind", "call", "verdict", "applied"}, want: 1},
		{name: "toolgate_result_seconds", labels: []string{"tool", "update_file"}, want: 1},
	})
}
