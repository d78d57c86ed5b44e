package telemetry_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/toolgate/toolgate/internal/telemetry"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestTraceConfigFromEnv(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		env     map[string]string
		want    telemetry.TraceConfig
		wantErr bool
	}{
		{name: "nothing set: off", env: nil, want: telemetry.TraceConfig{ServiceName: "svc"}},
		{
			name: "base endpoint",
			env:  map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/"},
			want: telemetry.TraceConfig{ServiceName: "svc", Endpoint: "http://collector:4318/v1/traces"},
		},
		{
			name: "traces endpoint wins, used as is",
			env: map[string]string{
				"OTEL_EXPORTER_OTLP_ENDPOINT":        "http://collector:4318",
				"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://traces.example/ingest",
			},
			want: telemetry.TraceConfig{ServiceName: "svc", Endpoint: "https://traces.example/ingest"},
		},
		{
			name: "exporter otlp alone: default endpoint",
			env:  map[string]string{"OTEL_TRACES_EXPORTER": "otlp"},
			want: telemetry.TraceConfig{ServiceName: "svc", Endpoint: "http://localhost:4318/v1/traces"},
		},
		{
			name: "exporter none wins over an endpoint",
			env:  map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"},
			want: telemetry.TraceConfig{ServiceName: "svc"},
		},
		{
			name: "sdk disabled",
			env:  map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"},
			want: telemetry.TraceConfig{ServiceName: "svc"},
		},
		{
			name: "names, attributes, headers, timeout",
			env: map[string]string{
				"OTEL_EXPORTER_OTLP_ENDPOINT":       "http://c:4318",
				"OTEL_SERVICE_NAME":                 "orchestrator-a",
				"OTEL_RESOURCE_ATTRIBUTES":          "service.name=ignored,deployment.environment=prod%20eu",
				"OTEL_EXPORTER_OTLP_HEADERS":        "api-key=k1,tenant=t",
				"OTEL_EXPORTER_OTLP_TRACES_HEADERS": "api-key=k2",
				"OTEL_EXPORTER_OTLP_TIMEOUT":        "2500",
			},
			want: telemetry.TraceConfig{
				ServiceName: "orchestrator-a",
				Endpoint:    "http://c:4318/v1/traces",
				Headers:     map[string]string{"api-key": "k2", "tenant": "t"},
				Timeout:     2500 * time.Millisecond,
				Attributes:  []attribute.KeyValue{attribute.String("deployment.environment", "prod eu")},
			},
		},
		{name: "grpc is refused", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, wantErr: true},
		{name: "unknown exporter", env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, wantErr: true},
		{name: "endpoint not a URL", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "collector:4318"}, wantErr: true},
		{name: "bad timeout", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_TIMEOUT": "2s"}, wantErr: true},
		{name: "bad sampler ratio", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "2"}, wantErr: true},
		{name: "bad header list", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_HEADERS": "novalue"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := telemetry.TraceConfigFromEnv("svc", env(tt.env))
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if tt.wantErr {
				return
			}
			if got.Enabled() != (tt.want.Endpoint != "") {
				t.Errorf("Enabled = %v", got.Enabled())
			}
			if diff := cmp.Diff(tt.want, got, cmpopts.IgnoreFields(telemetry.TraceConfig{}, "Sampler"), cmp.Comparer(func(a, b attribute.KeyValue) bool { return a == b })); diff != "" {
				t.Errorf("config (-want +got):\n%s", diff)
			}
			if got.Enabled() && got.Sampler == nil {
				t.Error("enabled without a sampler")
			}
		})
	}
}

func TestSamplerFromEnv(t *testing.T) {
	t.Parallel()
	tests := []struct {
		sampler, arg string
		want         string // Sampler.Description
	}{
		{"", "", "ParentBased{root:AlwaysOnSampler,remoteParentSampled:AlwaysOnSampler,remoteParentNotSampled:AlwaysOffSampler,localParentSampled:AlwaysOnSampler,localParentNotSampled:AlwaysOffSampler}"},
		{"always_off", "", "AlwaysOffSampler"},
		{"traceidratio", "0.25", "TraceIDRatioBased{0.25}"},
	}
	for _, tt := range tests {
		cfg, err := telemetry.TraceConfigFromEnv("svc", env(map[string]string{
			"OTEL_TRACES_EXPORTER": "otlp", "OTEL_TRACES_SAMPLER": tt.sampler, "OTEL_TRACES_SAMPLER_ARG": tt.arg,
		}))
		if err != nil {
			t.Fatalf("%s: %v", tt.sampler, err)
		}
		if got := cfg.Sampler.Description(); got != tt.want {
			t.Errorf("%s %s: sampler %s, want %s", tt.sampler, tt.arg, got, tt.want)
		}
	}
}

func TestNewTracerProviderOff(t *testing.T) {
	t.Parallel()
	tp, err := telemetry.NewTracerProvider(t.Context(), telemetry.TraceConfig{ServiceName: "svc"})
	if err != nil || tp != nil {
		t.Fatalf("NewTracerProvider with no endpoint = %v, %v; want nil, nil", tp, err)
	}
}

// Spans reach an OTLP/HTTP collector, with the configured headers, once
// the provider flushes.
func TestNewTracerProviderExportsOTLP(t *testing.T) {
	t.Parallel()
	type export struct {
		path, apiKey, contentType string
		size                      int
	}
	var mu sync.Mutex
	var got []export
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, export{r.URL.Path, r.Header.Get("Api-Key"), r.Header.Get("Content-Type"), len(body)})
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	}))
	defer collector.Close()

	cfg, err := telemetry.TraceConfigFromEnv("tool-worker", env(map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": collector.URL,
		"OTEL_EXPORTER_OTLP_HEADERS":  "api-key=secret",
	}))
	if err != nil {
		t.Fatal(err)
	}
	tp, err := telemetry.NewTracerProvider(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, span := telemetry.Tracer(tp).Start(t.Context(), "call")
	span.End()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := tp.ForceFlush(ctx); err != nil {
		t.Fatalf("flush: %v", err)
	}
	if err := tp.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) == 0 {
		t.Fatal("the collector received nothing")
	}
	e := got[0]
	if e.path != "/v1/traces" || e.apiKey != "secret" || e.contentType != "application/x-protobuf" || e.size == 0 {
		t.Errorf("export %+v, want POST /v1/traces with api-key and a protobuf body", e)
	}
}

// An explicit exporter receives the spans and the service name.
func TestNewTracerProviderExporter(t *testing.T) {
	t.Parallel()
	rec := &recordingExporter{}
	tp, err := telemetry.NewTracerProvider(t.Context(), telemetry.TraceConfig{ServiceName: "approver", Exporter: rec})
	if err != nil {
		t.Fatal(err)
	}
	_, span := telemetry.Tracer(tp).Start(t.Context(), "decide")
	span.End()
	if err := tp.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.spans) != 1 || rec.spans[0].Name() != "decide" {
		t.Fatalf("exported %d spans", len(rec.spans))
	}
	name, _ := rec.spans[0].Resource().Set().Value("service.name")
	if name.AsString() != "approver" {
		t.Errorf("service.name = %q", name.AsString())
	}
}

type recordingExporter struct {
	mu    sync.Mutex
	spans []sdktrace.ReadOnlySpan
}

func (e *recordingExporter) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.spans = append(e.spans, spans...)
	return nil
}

func (e *recordingExporter) Shutdown(context.Context) error { return nil }

// Tracing off: StartTracing changes nothing and its flush has nothing to
// report. A bad variable fails it before anything is installed.
func TestStartTracing(t *testing.T) {
	t.Parallel()
	var logs strings.Builder
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	flush, err := telemetry.StartTracing(t.Context(), "svc", env(nil), logger)
	if err != nil {
		t.Fatalf("off: %v", err)
	}
	flush()
	if logs.Len() != 0 {
		t.Errorf("flush logged %q", logs.String())
	}
	if _, err := telemetry.StartTracing(t.Context(), "svc", env(map[string]string{
		"OTEL_TRACES_EXPORTER": "otlp", "OTEL_RESOURCE_ATTRIBUTES": "no-equals",
	}), logger); err == nil {
		t.Error("bad OTEL_RESOURCE_ATTRIBUTES: no error")
	}
}
