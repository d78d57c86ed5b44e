package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/bus/bustest"
)

// -replica-gomaxprocs sets GOMAXPROCS in the orchestrators' environment
// only, as a container's CPU limit would; the nats-server keeps the
// harness's, and the results say which was measured.
func TestReplicaGOMAXPROCS(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	rt, err := NewReplicaTarget(ctx, bustest.NewLogWriter(t))
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	rt.GOMAXPROCS = 1
	s, err := rt.start(ctx, 2, false)
	if err != nil {
		t.Fatal(err)
	}
	defer s.stop()
	environ := func(pid int) [][]byte {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err != nil {
			t.Fatal(err)
		}
		return bytes.Split(b, []byte{0})
	}
	has := func(env [][]byte) bool {
		for _, kv := range env {
			if string(kv) == "GOMAXPROCS=1" {
				return true
			}
		}
		return false
	}
	for i, cmd := range s.orchs {
		if !has(environ(cmd.Process.Pid)) {
			t.Errorf("orchestrator %d runs without GOMAXPROCS=1 in its environment", i)
		}
	}
	for _, cmd := range s.servers {
		if os.Getenv("GOMAXPROCS") == "" && has(environ(cmd.Process.Pid)) {
			t.Error("the nats-server was given the orchestrators' GOMAXPROCS")
		}
	}
	if got := newResults(Config{ReplicaGOMAXPROCS: 1}).ReplicaGOMAXPROCS; got != 1 {
		t.Errorf("results record replica_gomaxprocs %d, want 1", got)
	}
}
