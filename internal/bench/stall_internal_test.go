package bench

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"
)

// stallingTarget stalls its first stalls runs.
type stallingTarget struct {
	stalls, runs int
}

func (t *stallingTarget) Name() string { return "raw" }

func (t *stallingTarget) Run(context.Context, Case) (Measurement, error) {
	t.runs++
	m := Measurement{Calls: 10, Elapsed: 12 * time.Second, Gap: 5 * time.Millisecond}
	if t.runs <= t.stalls {
		m.Gap = 10 * time.Second // a pull waited out without a heartbeat error
	}
	return m, nil
}

func TestMeasureAgainAfterStall(t *testing.T) {
	t.Parallel()
	c := Case{Workers: 1, Batch: 1, Window: 1, Calls: 10}
	for _, tt := range []struct {
		name                   string
		stalls, runs           int
		remeasured, unreliable string
	}{
		{"no stall", 0, 1, "", ""},
		{"one stall", 1, 2, "attempt 1: no batch completed for 10.0 s", ""},
		{"always stalled", 99, 3, "", "attempt 3: no batch completed for 10.0 s"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			target := &stallingTarget{stalls: tt.stalls}
			res := &Results{}
			if _, err := measure(context.Background(), res, io.Discard, c, target); err != nil {
				t.Fatal(err)
			}
			key := c.Name() + " raw"
			if target.runs != tt.runs {
				t.Errorf("ran %d times, want %d", target.runs, tt.runs)
			}
			if got := res.Remeasured[key]; !strings.Contains(got, tt.remeasured) || (tt.remeasured == "") != (got == "") {
				t.Errorf("remeasured = %q, want %q", got, tt.remeasured)
			}
			if got := res.Unreliable[key]; !strings.Contains(got, tt.unreliable) || (tt.unreliable == "") != (got == "") {
				t.Errorf("unreliable = %q, want %q", got, tt.unreliable)
			}
		})
	}
}

func TestLongestGap(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return start.Add(time.Duration(ms) * time.Millisecond) }
	if got := longestGap(start, []time.Time{at(30), at(10), at(2040), at(2050)}); got != 2010*time.Millisecond {
		t.Errorf("longest gap = %s, want 2.01s", got)
	}
	if got := longestGap(start, nil); got != 0 {
		t.Errorf("longest gap of nothing = %s, want 0", got)
	}
}

// stallingMemoryTarget's resume stalls in its first stalls runs.
type stallingMemoryTarget struct {
	stalls, runs int
}

func (t *stallingMemoryTarget) Name() string { return "raw" }

func (t *stallingMemoryTarget) RunMemory(context.Context, MemoryCase) (MemoryMeasurement, error) {
	t.runs++
	m := MemoryMeasurement{Conversations: 10, Figures: map[string]float64{MetricHeapPerConversation: 300, MetricResumeSeconds: 3}, ResumeGap: 2 * time.Millisecond}
	if t.runs <= t.stalls {
		m.Figures[MetricResumeSeconds], m.ResumeGap = 33, 30*time.Second
	}
	return m, nil
}

// A resume that stalled is measured again, and the figures kept are the
// attempt's without a stall.
func TestMeasureMemoryAgainAfterResumeStall(t *testing.T) {
	t.Parallel()
	c := MemoryCase{Conversations: 10}
	target := &stallingMemoryTarget{stalls: 1}
	res := &Results{}
	m, err := measureMemory(context.Background(), res, io.Discard, c, target)
	if err != nil {
		t.Fatal(err)
	}
	if target.runs != 2 {
		t.Errorf("ran %d times, want 2", target.runs)
	}
	if got := m.Figures[MetricResumeSeconds]; got != 3 {
		t.Errorf("resume_seconds = %v, want the attempt without a stall's 3", got)
	}
	if got, want := res.Remeasured[c.Name()+" raw"], "attempt 1: no batch completed for 30.0 s"; got != want {
		t.Errorf("remeasured = %q, want %q", got, want)
	}
}
