package orchestrator_test

import (
	"sync"
	"testing"

	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/orchestrator"
)

// OnRunEnd is told of each run's end once it is stored, a paused run's
// after its calls are published (one publish for the batch), with the
// conversation as stored.
func TestOnRunEnd(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var (
		mu   sync.Mutex
		ends []conversation.Status
		runs []int
	)
	var o *orchestrator.Orchestrator
	o, _ = e.orch(orchestrator.Config{Agent: externalAgent(t, ""), OnRunEnd: func(c *conversation.State) {
		mu.Lock()
		defer mu.Unlock()
		ends = append(ends, c.Status)
		runs = append(runs, len(c.Runs))
		if c.Status == conversation.StatusPaused && o.Stats().CallBatches.Load() != 1 {
			t.Errorf("paused run's end seen after %d call publishes, want 1", o.Stats().CallBatches.Load())
		}
	}})
	info, err := o.StartRun(ctxT(t), "What is the answer?", "")
	if err != nil {
		t.Fatal(err)
	}
	waitStatus(t, o, info.ConversationID, conversation.StatusPaused)
	e.worker("calculate_answer")
	waitStatus(t, o, info.ConversationID, conversation.StatusCompleted, conversation.StatusFailed)
	waitFor(t, "the follow-up's end", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return len(ends) == 2, "no second end"
	})
	mu.Lock()
	defer mu.Unlock()
	if ends[0] != conversation.StatusPaused || ends[1] != conversation.StatusCompleted || runs[0] != 1 || runs[1] != 2 {
		t.Errorf("ends %v with %v runs, want paused with 1, completed with 2", ends, runs)
	}
	if n := o.Stats().CallBatches.Load(); n != 1 {
		t.Errorf("call publishes = %d, want 1", n)
	}
}
