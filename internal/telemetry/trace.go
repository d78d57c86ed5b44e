package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolgate/toolgate/internal/telemetry/natstrace"
)

// InstrumentationName names toolgate's tracers.
const InstrumentationName = natstrace.InstrumentationName

// Tracer returns toolgate's tracer from tp, or from the global provider
// (set by Setup; a no-op one otherwise) when tp is nil.
func Tracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tp.Tracer(InstrumentationName)
}

// TraceConfig configures span export. The zero value exports nothing.
type TraceConfig struct {
	// ServiceName is the service.name resource attribute. Defaults to
	// "toolgate".
	ServiceName string
	// Endpoint is the OTLP/HTTP URL spans are POSTed to, e.g.
	// http://localhost:4318/v1/traces. Empty, with Exporter nil, turns
	// tracing off.
	Endpoint string
	// Headers are sent with each export (authentication, tenancy).
	Headers map[string]string
	// Timeout bounds one export. Defaults to the exporter's (10s).
	Timeout time.Duration
	// Sampler decides which traces are kept. Defaults to
	// ParentBased(AlwaysSample): a trace sampled at its root is kept
	// across every component.
	Sampler sdktrace.Sampler
	// Attributes are extra resource attributes.
	Attributes []attribute.KeyValue
	// Exporter, when set, receives spans instead of an OTLP endpoint.
	Exporter sdktrace.SpanExporter
}

// Enabled reports whether cfg exports spans.
func (c TraceConfig) Enabled() bool { return c.Endpoint != "" || c.Exporter != nil }

// TraceConfigFromEnv reads the standard OpenTelemetry variables through
// getenv (mains pass os.Getenv). Tracing is on when OTEL_TRACES_EXPORTER is
// "otlp", or is unset and an OTLP endpoint is given; it is off when
// OTEL_SDK_DISABLED is true, OTEL_TRACES_EXPORTER is "none", or nothing is
// set. Read: OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES,
// OTEL_EXPORTER_OTLP[_TRACES]_{ENDPOINT,HEADERS,TIMEOUT,PROTOCOL} (only
// http/protobuf), OTEL_TRACES_SAMPLER[_ARG]. The exporter reads the TLS
// variables (OTEL_EXPORTER_OTLP_*CERTIFICATE*) itself.
func TraceConfigFromEnv(serviceName string, getenv func(string) string) (TraceConfig, error) {
	cfg := TraceConfig{ServiceName: serviceName}
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return cfg, nil
	}
	attrs, err := parseKeyValues(getenv("OTEL_RESOURCE_ATTRIBUTES"))
	if err != nil {
		return cfg, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	for k, v := range attrs {
		if k == "service.name" {
			cfg.ServiceName = v
			continue
		}
		cfg.Attributes = append(cfg.Attributes, attribute.String(k, v))
	}
	if v := getenv("OTEL_SERVICE_NAME"); v != "" {
		cfg.ServiceName = v
	}

	tracesEndpoint := getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	baseEndpoint := getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
	switch exp := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER"))); exp {
	case "none":
		return cfg, nil
	case "":
		if tracesEndpoint == "" && baseEndpoint == "" {
			return cfg, nil
		}
	case "otlp":
	default:
		return cfg, fmt.Errorf("OTEL_TRACES_EXPORTER: %q is not supported (otlp or none)", exp)
	}
	if err := otlpFromEnv(&cfg, tracesEndpoint, baseEndpoint, getenv); err != nil {
		return cfg, err
	}
	cfg.Sampler, err = samplerFromEnv(getenv("OTEL_TRACES_SAMPLER"), getenv("OTEL_TRACES_SAMPLER_ARG"))
	if err != nil {
		return cfg, err
	}
	return cfg, nil
}

// otlpFromEnv sets the OTLP exporter's endpoint, headers and timeout from
// the OTEL_EXPORTER_OTLP_* variables, the traces-specific ones first.
func otlpFromEnv(cfg *TraceConfig, tracesEndpoint, baseEndpoint string, getenv func(string) string) error {
	proto := firstNonEmpty(getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"), getenv("OTEL_EXPORTER_OTLP_PROTOCOL"))
	if proto != "" && proto != "http/protobuf" {
		return fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL: %q is not supported (http/protobuf)", proto)
	}
	switch {
	case tracesEndpoint != "":
		cfg.Endpoint = tracesEndpoint
	case baseEndpoint != "":
		cfg.Endpoint = strings.TrimRight(baseEndpoint, "/") + "/v1/traces"
	default:
		cfg.Endpoint = "http://localhost:4318/v1/traces"
	}
	if u, err := url.Parse(cfg.Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("OTLP traces endpoint %q is not an http(s) URL", cfg.Endpoint)
	}

	headers, err := parseKeyValues(getenv("OTEL_EXPORTER_OTLP_HEADERS"))
	if err != nil {
		return fmt.Errorf("OTEL_EXPORTER_OTLP_HEADERS: %w", err)
	}
	traceHeaders, err := parseKeyValues(getenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS"))
	if err != nil {
		return fmt.Errorf("OTEL_EXPORTER_OTLP_TRACES_HEADERS: %w", err)
	}
	for k, v := range traceHeaders {
		if headers == nil {
			headers = map[string]string{}
		}
		headers[k] = v
	}
	cfg.Headers = headers

	for _, name := range []string{"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT"} {
		if v := getenv(name); v != "" {
			ms, err := strconv.Atoi(v)
			if err != nil || ms < 0 {
				return fmt.Errorf("%s: %q is not a number of milliseconds", name, v)
			}
			cfg.Timeout = time.Duration(ms) * time.Millisecond
			break
		}
	}

	return nil
}

func firstNonEmpty(vs ...string) string {
	for _, v := range vs {
		if v = strings.TrimSpace(v); v != "" {
			return v
		}
	}
	return ""
}

// parseKeyValues parses the k=v,k=v lists of the OTEL variables, values
// percent-decoded.
func parseKeyValues(s string) (map[string]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	out := map[string]string{}
	for part := range strings.SplitSeq(s, ",") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, fmt.Errorf("%q is not key=value", part)
		}
		dv, err := url.PathUnescape(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("value of %s: %w", k, err)
		}
		out[k] = dv
	}
	return out, nil
}

func samplerFromEnv(name, arg string) (sdktrace.Sampler, error) {
	ratio := func() (float64, error) {
		if arg == "" {
			return 1, nil
		}
		r, err := strconv.ParseFloat(arg, 64)
		if err != nil || r < 0 || r > 1 {
			return 0, fmt.Errorf("OTEL_TRACES_SAMPLER_ARG: %q is not a ratio in [0, 1]", arg)
		}
		return r, nil
	}
	switch strings.ToLower(strings.TrimSpace(name)) {
	case "", "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), nil
	case "always_on":
		return sdktrace.AlwaysSample(), nil
	case "always_off":
		return sdktrace.NeverSample(), nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), nil
	case "traceidratio":
		r, err := ratio()
		if err != nil {
			return nil, err
		}
		return sdktrace.TraceIDRatioBased(r), nil
	case "parentbased_traceidratio":
		r, err := ratio()
		if err != nil {
			return nil, err
		}
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(r)), nil
	}
	return nil, fmt.Errorf("OTEL_TRACES_SAMPLER: %q is not supported", name)
}

// NewTracerProvider builds a provider that exports as cfg says, or returns
// nil when cfg exports nothing. The caller shuts it down (flushing what is
// batched). It sets no global.
func NewTracerProvider(ctx context.Context, cfg TraceConfig) (*sdktrace.TracerProvider, error) {
	if !cfg.Enabled() {
		return nil, nil
	}
	exp := cfg.Exporter
	if exp == nil {
		opts := []otlptracehttp.Option{otlptracehttp.WithEndpointURL(cfg.Endpoint)}
		if len(cfg.Headers) > 0 {
			opts = append(opts, otlptracehttp.WithHeaders(cfg.Headers))
		}
		if cfg.Timeout > 0 {
			opts = append(opts, otlptracehttp.WithTimeout(cfg.Timeout))
		}
		var err error
		if exp, err = otlptracehttp.New(ctx, opts...); err != nil {
			return nil, fmt.Errorf("otlp trace exporter: %w", err)
		}
	}
	name := cfg.ServiceName
	if name == "" {
		name = "toolgate"
	}
	attrs := append([]attribute.KeyValue{attribute.String("service.name", name)}, cfg.Attributes...)
	sampler := cfg.Sampler
	if sampler == nil {
		sampler = sdktrace.ParentBased(sdktrace.AlwaysSample())
	}
	return sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(resource.NewSchemaless(attrs...)),
		sdktrace.WithSampler(sampler),
	), nil
}

// Setup configures the process's tracing from the OTEL_* variables read
// through getenv: when they ask for an exporter it installs a global tracer
// provider and the W3C TraceContext propagator; otherwise it changes
// nothing. shutdown flushes
// and stops it; call it on the way out. Only mains call Setup.
func Setup(ctx context.Context, serviceName string, getenv func(string) string) (shutdown func(context.Context) error, err error) {
	cfg, err := TraceConfigFromEnv(serviceName, getenv)
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	tp, err := NewTracerProvider(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	if tp == nil {
		// Off: the globals stay as they are; toolgate's own propagation
		// does not depend on them.
		return func(context.Context) error { return nil }, nil
	}
	otel.SetTextMapPropagator(natstrace.Propagator())
	otel.SetTracerProvider(tp)
	return func(ctx context.Context) error {
		if err := tp.Shutdown(ctx); err != nil && !errors.Is(err, context.Canceled) {
			return fmt.Errorf("tracing: shutdown: %w", err)
		}
		return nil
	}, nil
}

// StartTracing is Setup for a main: flush, to defer, shuts tracing down
// within 5s, even once ctx has ended, and logs a failure on logger.
func StartTracing(ctx context.Context, serviceName string, getenv func(string) string, logger *slog.Logger) (flush func(), err error) {
	shutdown, err := Setup(ctx, serviceName, getenv)
	if err != nil {
		return nil, err
	}
	return func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := shutdown(sctx); err != nil {
			logger.Warn("flush traces", slog.Any("error", err))
		}
	}, nil
}
