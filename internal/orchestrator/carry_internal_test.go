package orchestrator

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/conversation"
)

// TestCarryAllocs: carrying out an effect that needs no memory takes none.
// Each of a call's ten or so effects once cost a copy of the effect on the
// heap (a closure of one arm captured it), and a log line its attributes
// whether or not the logger wrote it.
func TestCarryAllocs(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	e := newTestEffector(newMemStore(), &fakeEffects{}, now)
	c := &conversation.State{ID: "c1"}
	ctx := context.Background()
	tests := []struct {
		name string
		ef   conversation.Effect
	}{
		{"started", conversation.Effect{Kind: conversation.EffectStarted, RunID: "r1"}},
		{"endWritten", conversation.Effect{Kind: conversation.EffectEndWritten}},
		{"log below the logger's level", conversation.LogEffect(slog.LevelInfo, "run completed", slog.String("run_id", "r1"))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if n := testing.AllocsPerRun(100, func() { e.carry(ctx, c, 1, tt.ef, nil) }); n != 0 {
				t.Errorf("carry %s: %v allocations, want 0", tt.ef.Kind, n)
			}
		})
	}
}
