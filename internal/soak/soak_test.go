package soak_test

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/toolgate/toolgate/internal/soak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The short soak of `make test`: two dozen conversations through two
// replicas and three workers while workers are killed mid-call, results
// are published twice, replicas are restarted and malformed messages are
// injected; every invariant must hold (D35).
func TestSoakShort(t *testing.T) {
	cfg := soak.Config{
		Conversations: 24,
		Calls:         6,
		Workers:       3,
		Replicas:      2,
		Seed:          7,
		Duration:      30 * time.Second,
		Ramp:          12 * time.Second,
		FaultEvery:    80 * time.Millisecond,
		Timeout:       2 * time.Minute,
		Dir:           t.TempDir(),
	}
	if os.Getenv("TOOLGATE_TEST_LOG") != "" {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	r, err := soak.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	r.Print(&out)
	t.Log("\n" + out.String())
	if !r.OK() {
		t.Fatal("invariants failed (see the report above)")
	}
	if r.FaultsTotal() == 0 || r.Faults[soak.FaultWorkerKill] == 0 || r.Faults[soak.FaultDuplicateReply] == 0 {
		t.Errorf("too few faults injected to mean anything: %v", r.Faults)
	}
	if r.Completed != cfg.Conversations || r.ExternalCalls < cfg.Conversations*cfg.Calls {
		t.Errorf("completed %d, external calls %d", r.Completed, r.ExternalCalls)
	}
}
