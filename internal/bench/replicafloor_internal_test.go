package bench

import (
	"testing"
	"time"
)

// A replica count's rows carry toolgate's figures and the floor's side by
// side, each ratio over one replica against its own side's.
func TestReplicaRowsWithFloor(t *testing.T) {
	c := ReplicaCase{Replicas: 3, InFlight: 10, Calls: 1000}
	tm := &ReplicaMeasurement{Calls: 1000, Elapsed: time.Second, Orchestrators: 3 * time.Second, NATS: time.Second, Load: time.Second}
	fm := &ReplicaMeasurement{Calls: 1000, Elapsed: time.Second, Orchestrators: time.Second, NATS: time.Second / 2, Load: time.Second / 2}
	rows := replicaRows(c, tm, fm, 4, 1.6)
	got := map[string]Row{}
	for _, r := range rows {
		got[r.Metric] = r
	}
	for metric, want := range map[string][2]float64{
		MetricCPUPerCall:              {5, 2},
		MetricCPUPerCallOrchestrators: {3, 1},
		MetricCallsPerSecond:          {1000, 1000},
		MetricCPUOverOneReplica:       {1.25, 1.25},
	} {
		r, ok := got[metric]
		if !ok || r.Toolgate == nil || r.Storage == nil {
			t.Errorf("%s: row %+v, want toolgate and floor figures", metric, r)
			continue
		}
		if *r.Toolgate != want[0] || *r.Storage != want[1] {
			t.Errorf("%s: toolgate %g, floor %g; want %g, %g", metric, *r.Toolgate, *r.Storage, want[0], want[1])
		}
	}

	// The floor alone, when toolgate's side failed.
	for _, r := range replicaRows(c, nil, fm, 0, 1.6) {
		if r.Toolgate != nil || r.Storage == nil {
			t.Errorf("%s: toolgate %v, floor %v; want only the floor's", r.Metric, r.Toolgate, r.Storage)
		}
	}
}
