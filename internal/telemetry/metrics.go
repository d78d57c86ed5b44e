package telemetry

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/toolgate/toolgate/internal/telemetry/promreg"
	"github.com/toolgate/toolgate/internal/web"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Label values of the component label on collectors several components
// share (toolgate_redeliveries_total, toolgate_dead_letters_total).
const (
	ComponentOrchestrator = "orchestrator"
	ComponentWorker       = "worker"
	ComponentApprover     = "approver"
)

// Histogram buckets, in seconds. Waiting for a human spans seconds to days;
// tool calls and model requests span milliseconds to minutes.
var (
	waitBuckets  = []float64{0.01, 0.05, 0.1, 0.5, 1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 24 * 3600}
	modelBuckets = []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160}
)

// NewRegistry returns a registry holding the Go runtime and process
// collectors; the components' metrics are added by their constructors.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// register adds c to reg, or returns the collector of the same description
// already there (promreg.Register).
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	return promreg.Register(reg, c)
}

func redeliveries(reg prometheus.Registerer) *prometheus.CounterVec { return promreg.Redeliveries(reg) }

func deadLetters(reg prometheus.Registerer) *prometheus.CounterVec { return promreg.DeadLetters(reg) }

// Handler serves g in the Prometheus text format (or OpenMetrics when the
// scraper asks for it). A collector that fails is reported in the response
// without hiding the others.
func Handler(g prometheus.Gatherer) http.Handler {
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{
		ErrorHandling:     promhttp.ContinueOnError,
		EnableOpenMetrics: true,
	})
}

// Serve listens on addr and serves g at /metrics until ctx ends; see
// ServeListener.
func Serve(ctx context.Context, addr string, g prometheus.Gatherer) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	return ServeListener(ctx, ln, g)
}

// ServeListener serves g at /metrics on ln until ctx ends, then shuts the
// server down (waiting up to 5s for scrapes in progress) and returns nil.
// It closes ln. Mains listen first, so that a bad --metrics address fails
// at start-up, and run this in a goroutine.
func ServeListener(ctx context.Context, ln net.Listener, g prometheus.Gatherer) error {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", Handler(g))
	if err := web.Serve(ctx, ln, mux, web.ServeConfig{}); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	return nil
}

func seconds(d time.Duration) float64 { return d.Seconds() }
