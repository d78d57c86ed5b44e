package orchestrator_test

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/orchestrator"
	"github.com/toolgate/toolgate/internal/telemetry"
	"github.com/toolgate/toolgate/internal/telemetry/telemetrytest"
)

// A state cache too small for the paused conversations says so: the
// evictions of unfinished states are counted in a metric and a warning is
// logged, once per interval however many there are; one with room for
// them says nothing.
func TestStateCacheTellsOfEvictedPausedStates(t *testing.T) {
	t.Parallel()
	const paused = 6
	for _, tc := range []struct {
		name      string
		cache     int64
		evictions bool
	}{
		{name: "too small", cache: 1, evictions: true},
		{name: "room for all", cache: 64 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			reg := telemetry.NewRegistry()
			var logs logBuffer
			o, _ := e.orch(orchestrator.Config{
				StateCacheBytes: tc.cache, Metrics: telemetry.NewOrchestratorMetrics(reg),
				Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
			})
			for range paused {
				startPaused(t, o)
			}
			fams := telemetrytest.Scrape(t, telemetry.Handler(reg))
			got, _ := fams.Value("toolgate_state_cache_evictions_total")
			warnings := strings.Count(logs.String(), "state cache full")
			if !tc.evictions {
				if got != 0 || warnings != 0 {
					t.Errorf("%v evictions counted and %d warnings with room for every state; log:\n%s", got, warnings, logs.String())
				}
				return
			}
			// Each conversation's first state pushes out the one before.
			if got < paused-1 {
				t.Errorf("toolgate_state_cache_evictions_total = %v, want at least %d", got, paused-1)
			}
			if warnings != 1 {
				t.Errorf("%d warnings of the full cache, want 1 (once a minute); log:\n%s", warnings, logs.String())
			}
			if !strings.Contains(logs.String(), fmt.Sprintf("cache_bytes=%d", tc.cache)) {
				t.Errorf("the warning does not give the cache's size; log:\n%s", logs.String())
			}
		})
	}
}
