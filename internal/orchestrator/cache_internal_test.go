package orchestrator

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// The warning of evicted states comes at most once per evictionWarnEvery
// and counts what was evicted since the last one; the metric counts every
// eviction.
func TestEvictionReportWarnsOncePerInterval(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	counted := 0
	r := newEvictionReport(slog.New(slog.NewTextHandler(&logs, nil)), func(n int) { counted += n }, func() time.Time { return now })
	r.tell(2, 100)
	now = now.Add(evictionWarnEvery / 2)
	r.tell(3, 100)
	if got := strings.Count(logs.String(), "state cache full"); got != 1 {
		t.Fatalf("%d warnings within an interval, want 1; log:\n%s", got, logs.String())
	}
	now = now.Add(evictionWarnEvery)
	r.tell(4, 100)
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "evicted=2") || !strings.Contains(lines[1], "evicted=7") {
		t.Errorf("warnings = %q, want two, of 2 then of the 7 evicted since", lines)
	}
	if counted != 9 {
		t.Errorf("counted %d evictions, want 9", counted)
	}
}
