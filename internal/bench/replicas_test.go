package bench_test

import (
	"context"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/bench"
	"github.com/toolgate/toolgate/internal/bus/bustest"
)

// The replica case runs its orchestrators and nats-server as processes of
// their own and charges each its CPU.
func TestReplicas(t *testing.T) {
	ctx, rt := replicaTarget(t)
	ms, err := rt.RunReplicas(ctx, 2, false, []int{3}, 30, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 1 {
		t.Fatalf("%d measurements, want 1", len(ms))
	}
	m := ms[0]
	if m.Calls != 30 || m.Elapsed <= 0 || m.Orchestrators <= 0 || m.NATS <= 0 || m.Load <= 0 {
		t.Errorf("measurement %+v: want 30 calls and every figure positive", m)
	}
}

// The replica floor runs its processes and nats-server as processes of
// their own, completes every conversation, and charges each part its CPU
// (enough calls for every process to pass /proc's 10 ms tick).
func TestReplicaFloor(t *testing.T) {
	ctx, rt := replicaTarget(t)
	for _, r := range []bench.ReplicaFloorRun{
		{Processes: 1},
		{Processes: 2},
		{Processes: 2, OneProcess: true},
	} {
		r.InFlight, r.Calls, r.Warmup, r.Sizes = []int{3}, 300, 10, bench.StorageSizesOf(nil)
		ms, err := rt.RunReplicaFloor(ctx, r)
		if err != nil {
			t.Fatalf("%+v: %v", r, err)
		}
		if len(ms) != 1 {
			t.Fatalf("%+v: %d measurements, want 1", r, len(ms))
		}
		m := ms[0]
		if m.Calls != 300 || m.Elapsed <= 0 || m.Orchestrators <= 0 || m.NATS <= 0 || m.Load <= 0 {
			t.Errorf("%+v: measurement %+v: want 300 completed calls and every figure positive", r, m)
		}
	}
}

// replicaTarget builds the replica case's binaries for t, with five
// minutes for its case.
func replicaTarget(t *testing.T) (context.Context, *bench.ReplicaTarget) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	t.Cleanup(cancel)
	rt, err := bench.NewReplicaTarget(ctx, bustest.NewLogWriter(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Close)
	return ctx, rt
}
