package telemetry_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolgate/toolgate/internal/telemetry"
	"github.com/toolgate/toolgate/internal/telemetry/telemetrytest"
)

type series struct {
	name   string
	labels []string
	want   float64
}

func checkSeries(t *testing.T, fams telemetrytest.Families, want []series) {
	t.Helper()
	for _, s := range want {
		got, ok := fams.Value(s.name, s.labels...)
		if !ok {
			t.Errorf("%s%v: no such series; families: %v", s.name, s.labels, fams.Names())
			continue
		}
		if got != s.want {
			t.Errorf("%s%v = %v, want %v", s.name, s.labels, got, s.want)
		}
	}
}

func TestMetricsScrape(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		record func(reg *prometheus.Registry)
		want   []series
	}{
		{
			name: "worker",
			record: func(reg *prometheus.Registry) {
				m := telemetry.NewWorkerMetrics(reg)
				m.CallStarted("weather")
				m.CallFinished("weather", telemetry.CallOutcomeReturn, 20*time.Millisecond)
				m.CallStarted("weather")
				m.CallFinished("weather", telemetry.CallOutcomeExpired, -1)
				m.CallStarted("weather") // still running
				m.CallSkipped("crm", telemetry.CallOutcomeInterrupted)
				m.Redelivered("weather")
				m.DeadLetter("decode")
			},
			want: []series{
				{"toolgate_tool_calls_total", []string{"tool", "weather", "outcome", "return"}, 1},
				{"toolgate_tool_calls_total", []string{"tool", "weather", "outcome", "expired"}, 1},
				{"toolgate_tool_calls_total", []string{"tool", "crm", "outcome", "interrupted"}, 1},
				{"toolgate_tool_call_seconds", []string{"tool", "weather"}, 1}, // the expired call did not run
				{"toolgate_tool_calls_in_flight", []string{"tool", "weather"}, 1},
				{"toolgate_redeliveries_total", []string{"component", "worker", "tool", "weather"}, 1},
				{"toolgate_dead_letters_total", []string{"component", "worker", "reason", "decode"}, 1},
			},
		},
		{
			name: "approver",
			record: func(reg *prometheus.Registry) {
				m := telemetry.NewApproverMetrics(reg)
				m.Handled("bot", "approved")
				m.Handled("bot", "approved")
				m.Handled("bot", "escalated")
				m.Decided("bot", "approved", 2*time.Second)
				m.Decided("bot", "approved", -time.Second) // clock skew: observed as 0
				m.Redelivered("delete_file")
				m.DeadLetter("policy")
			},
			want: []series{
				{"toolgate_decisions_total", []string{"approver", "bot", "action", "approved"}, 2},
				{"toolgate_decisions_total", []string{"approver", "bot", "action", "escalated"}, 1},
				{"toolgate_approver_decision_seconds", []string{"approver", "bot", "action", "approved"}, 2},
				{"toolgate_redeliveries_total", []string{"component", "approver", "tool", "delete_file"}, 1},
				{"toolgate_dead_letters_total", []string{"component", "approver", "reason", "policy"}, 1},
			},
		},
		{
			name: "orchestrator",
			record: func(reg *prometheus.Registry) {
				m := telemetry.NewOrchestratorMetrics(reg)
				m.RunFinished("support", "paused")
				m.RunFinished("support", "completed")
				m.RunFinished("support", "completed")
				m.PendingAdd("delete_file", "approval")
				m.PendingAdd("delete_file", "approval")
				m.PendingAdd("weather", "call")
				m.PendingDone("delete_file", "approval")
				m.DecisionLatency("delete_file", 3*time.Second)
				m.ResultLatency("weather", 50*time.Millisecond)
				m.Expired("approval")
				m.Denied("delete_file")
				m.Reply("approval", "refused")
				m.ModelRequest("gpt-x", 800*time.Millisecond, 120, 30)
				m.ModelRequest("gpt-x", 400*time.Millisecond, 80, 0)
				m.ModelError("gpt-x")
				m.Redelivered("weather")
				m.DeadLetter("invalid")
			},
			want: []series{
				{"toolgate_runs_total", []string{"agent", "support", "status", "completed"}, 2},
				{"toolgate_runs_total", []string{"agent", "support", "status", "paused"}, 1},
				{"toolgate_deferred_pending", []string{"tool", "delete_file", "kind", "approval"}, 1},
				{"toolgate_deferred_pending", []string{"tool", "weather", "kind", "call"}, 1},
				{"toolgate_decision_seconds", []string{"tool", "delete_file"}, 1},
				{"toolgate_result_seconds", []string{"tool", "weather"}, 1},
				{"toolgate_expiries_total", []string{"kind", "approval"}, 1},
				{"toolgate_denials_total", []string{"tool", "delete_file"}, 1},
				{"toolgate_replies_total", []string{"kind", "approval", "verdict", "refused"}, 1},
				{"toolgate_model_request_seconds", []string{"model", "gpt-x"}, 2},
				{"toolgate_model_tokens_total", []string{"model", "gpt-x", "direction", "input"}, 200},
				{"toolgate_model_tokens_total", []string{"model", "gpt-x", "direction", "output"}, 30},
				{"toolgate_model_errors_total", []string{"model", "gpt-x"}, 1},
				{"toolgate_redeliveries_total", []string{"component", "orchestrator", "tool", "weather"}, 1},
				{"toolgate_dead_letters_total", []string{"component", "orchestrator", "reason", "invalid"}, 1},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			reg := telemetry.NewRegistry()
			tt.record(reg)
			fams := telemetrytest.Scrape(t, telemetry.Handler(reg))
			checkSeries(t, fams, tt.want)
			runtimeSeries := []string{"go_goroutines"}
			if runtime.GOOS == "linux" { // the process collector reads /proc
				runtimeSeries = append(runtimeSeries, "process_cpu_seconds_total")
			}
			for _, name := range runtimeSeries {
				if fams[name] == nil {
					t.Errorf("%s missing from the scrape", name)
				}
			}
		})
	}
}

func TestHistogramSums(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := telemetry.NewOrchestratorMetrics(reg)
	m.DecisionLatency("delete_file", 1500*time.Millisecond)
	m.DecisionLatency("delete_file", 500*time.Millisecond)
	fams := telemetrytest.Scrape(t, telemetry.Handler(reg))
	got, ok := fams.Sum("toolgate_decision_seconds", "tool", "delete_file")
	if !ok || got != 2 {
		t.Errorf("toolgate_decision_seconds sum = %v (found %v), want 2", got, ok)
	}
}

// One process may run several components on one registry: the collectors
// they share are registered once and count for each component apart.
func TestComponentsShareRegistry(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	w := telemetry.NewWorkerMetrics(reg)
	a := telemetry.NewApproverMetrics(reg)
	o := telemetry.NewOrchestratorMetrics(reg)
	again := telemetry.NewWorkerMetrics(reg)
	w.Redelivered("weather")
	again.Redelivered("weather")
	a.Redelivered("weather")
	o.DeadLetter("invalid")
	fams := telemetrytest.Scrape(t, telemetry.Handler(reg))
	checkSeries(t, fams, []series{
		{"toolgate_redeliveries_total", []string{"component", "worker", "tool", "weather"}, 2},
		{"toolgate_redeliveries_total", []string{"component", "approver", "tool", "weather"}, 1},
		{"toolgate_dead_letters_total", []string{"component", "orchestrator", "reason", "invalid"}, 1},
	})
}

func TestNilMetricsRecordNothing(t *testing.T) {
	t.Parallel()
	var w *telemetry.WorkerMetrics
	var a *telemetry.ApproverMetrics
	var o *telemetry.OrchestratorMetrics
	// Components hold nil metrics when none are configured; every method
	// must be callable.
	w.CallStarted("t")
	w.CallFinished("t", "return", time.Second)
	w.CallSkipped("t", "interrupted")
	w.Redelivered("t")
	w.DeadLetter("r")
	a.Handled("a", "approved")
	a.Decided("a", "approved", time.Second)
	a.Redelivered("t")
	a.DeadLetter("r")
	o.RunFinished("support", "completed")
	o.PendingAdd("t", "call")
	o.PendingDone("t", "call")
	o.DecisionLatency("t", time.Second)
	o.ResultLatency("t", time.Second)
	o.Expired("call")
	o.Denied("t")
	o.Reply("call", "accepted")
	o.ModelRequest("m", time.Second, 1, 1)
	o.ModelError("m")
	o.Redelivered("t")
	o.DeadLetter("r")
}

func TestServeListener(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	telemetry.NewWorkerMetrics(reg).Redelivered("weather")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- telemetry.ServeListener(ctx, ln, reg) }()

	url := "http://" + ln.Addr().String() + "/metrics"
	fams, err := telemetrytest.ScrapeURL(t.Context(), url)
	if err != nil {
		cancel()
		<-done
		t.Fatal(err)
	}
	checkSeries(t, fams, []series{{"toolgate_redeliveries_total", []string{"component", "worker", "tool", "weather"}, 1}})

	resp, err := http.Get("http://" + ln.Addr().String() + "/other")
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET /other: status %d, want 404", resp.StatusCode)
		}
	}
	http.DefaultClient.CloseIdleConnections()

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("ServeListener after cancel: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ServeListener did not return after its context ended")
	}
	if _, err := telemetrytest.ScrapeURL(t.Context(), url); err == nil {
		t.Error("scrape after shutdown succeeded")
	}
}

func TestServeBadAddress(t *testing.T) {
	t.Parallel()
	err := telemetry.Serve(t.Context(), "127.0.0.1:not-a-port", prometheus.NewRegistry())
	var opErr *net.OpError
	if !errors.As(err, &opErr) || opErr.Op != "listen" {
		t.Fatalf("Serve with a bad address: %v, want a listen error", err)
	}
}

// With CountPending the gauge is read from the store at scrape time; a
// failing read hides only that gauge.
func TestCountPending(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := telemetry.NewOrchestratorMetrics(reg)
	m.PendingAdd("ignored", "call")
	m.RunFinished("support", "completed")
	var fail error
	m.CountPending(func(ctx context.Context) ([]telemetry.PendingCount, error) {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return []telemetry.PendingCount{
			{Tool: "delete_file", Kind: "approval", N: 2},
			{Tool: "weather", Kind: "call", N: 1},
			{Tool: "delete_file", Kind: "approval", N: 1},
		}, fail
	})
	fams := telemetrytest.Scrape(t, telemetry.Handler(reg))
	checkSeries(t, fams, []series{
		{"toolgate_deferred_pending", []string{"tool", "delete_file", "kind", "approval"}, 3},
		{"toolgate_deferred_pending", []string{"tool", "weather", "kind", "call"}, 1},
	})
	if _, ok := fams.Value("toolgate_deferred_pending", "tool", "ignored"); ok {
		t.Error("PendingAdd counted although CountPending is set")
	}

	fail = errors.New("kv unavailable")
	fams = telemetrytest.Scrape(t, telemetry.Handler(reg))
	if _, ok := fams.Value("toolgate_deferred_pending"); ok {
		t.Error("pending reported although the store could not be read")
	}
	checkSeries(t, fams, []series{{"toolgate_runs_total", []string{"status", "completed"}, 1}})
}
