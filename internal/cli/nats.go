package cli

import (
	"context"
	"flag"
	"log/slog"
	"time"

	"github.com/toolgate/toolgate/internal/bus"
)

// NATS holds the NATS connection flags of a worker or an approver.
type NATS struct {
	URL, User, Password, PasswordFile, Creds string
	ConnectTimeout                           time.Duration
}

// NATSEnv documents the variables RegisterNATS reads.
var NATSEnv = []Env{
	{"TOOLGATE_NATS_URL", "default of --nats"},
	{"TOOLGATE_NATS_PASSWORD", "default of --password"},
}

// RegisterNATS registers --nats, --user, --password, --creds and
// --connect-timeout on fs.
func RegisterNATS(fs *flag.FlagSet) *NATS {
	n := &NATS{}
	fs.StringVar(&n.URL, "nats", EnvOr("TOOLGATE_NATS_URL", "nats://127.0.0.1:4222"), "NATS server URL(s), comma-separated")
	fs.StringVar(&n.User, "user", "", "NATS user")
	// Taken out of the environment, so that no program the process starts
	// inherits it.
	fs.StringVar(&n.Password, "password", bus.TakeEnvPassword(), "NATS password; --password-file keeps it out of the command line")
	fs.StringVar(&n.PasswordFile, "password-file", "", "file holding the NATS password; overrides --password")
	fs.StringVar(&n.Creds, "creds", "", "NATS credentials file; overrides --user/--password")
	fs.DurationVar(&n.ConnectTimeout, "connect-timeout", 30*time.Second, "how long to wait for the NATS server")
	return n
}

// Connect connects as client name in role, waiting up to --connect-timeout.
func (n *NATS) Connect(ctx context.Context, name, role string, logger *slog.Logger) (*bus.Bus, error) {
	cctx, cancel := context.WithTimeout(ctx, n.ConnectTimeout)
	defer cancel()
	return bus.Connect(cctx, bus.ConnConfig{
		URL: n.URL, Name: name, User: n.User, Password: n.Password, PasswordFile: n.PasswordFile, CredsFile: n.Creds, Role: role,
		Logger: logger,
	})
}

// Check refuses a malformed --nats before anything else starts.
func (n *NATS) Check() error {
	_, err := bus.CheckURL(n.URL)
	return err
}

// TraceEnv documents the OpenTelemetry variables telemetry.StartTracing
// reads.
var TraceEnv = []Env{
	{"OTEL_EXPORTER_OTLP_ENDPOINT", "export traces over OTLP/HTTP to this endpoint (also OTEL_EXPORTER_OTLP_TRACES_*, OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER[_ARG], OTEL_SDK_DISABLED)"},
}
