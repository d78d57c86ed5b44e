package orchestrator_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/orchestrator"
	"github.com/toolgate/toolgate/internal/worker"
	"github.com/toolgate/toolgate/wire"
)

// A conversation's external call that is still queued when the
// orchestrator settles it itself (cancelled, expired) or deletes the
// conversation is withdrawn from the work queue, so that a worker that
// comes later never runs it. Each case: no worker runs while the call is
// published and settled; the queue is then empty; a real worker with an
// exec executor (a script that writes a file when it runs) starts and
// pulls, and the script never ran. Before, the call stayed queued and the
// first worker to come ran it (its reply then refused as late).
//
// deleted: a copy of the call published again after the cancel (as a
// replica republishing a stale batch would) is withdrawn by the delete.
func TestSettledCallsNeverRunAtALaterWorker(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		toolExtra string
		settle    func(t *testing.T, e *env, o *orchestrator.Orchestrator, c *conversation.State)
	}{
		{"cancelled", "", func(t *testing.T, e *env, o *orchestrator.Orchestrator, c *conversation.State) {
			if _, err := o.Cancel(ctxT(t), c.ID); err != nil {
				t.Fatal(err)
			}
		}},
		{"expired", "    deadline: 1s\n", func(t *testing.T, e *env, o *orchestrator.Orchestrator, c *conversation.State) {
			waitStatus(t, o, c.ID, conversation.StatusCompleted)
		}},
		{"deleted", "", func(t *testing.T, e *env, o *orchestrator.Orchestrator, c *conversation.State) {
			if _, err := o.Cancel(ctxT(t), c.ID); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the cancelled call withdrawn", func() (bool, string) {
				n := bustest.StreamMsgs(t, e.connect("ops"), wire.StreamCalls)
				return n == 0, fmt.Sprint(n)
			})
			pc := c.Batch.Calls[0]
			again := wire.CallRequest{RunID: c.Batch.RunID, ConversationID: c.ID, ToolCallID: pc.ToolCallID, ToolName: pc.ToolName,
				Args: pc.Args, Deadline: time.Now().Add(time.Hour), Attempt: 2}
			if _, err := e.connect("stale").PublishCall(ctxT(t), again); err != nil {
				t.Fatal(err)
			}
			if n := bustest.StreamMsgs(t, e.connect("ops"), wire.StreamCalls); n != 1 {
				t.Fatalf("%d calls queued, want the copy published again", n)
			}
			if err := o.Delete(ctxT(t), c.ID); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			o, _ := e.orch(orchestrator.Config{Agent: externalAgent(t, tc.toolExtra)})
			info, err := o.StartRun(ctxT(t), "what is the answer?", "")
			if err != nil {
				t.Fatal(err)
			}
			c := waitPublished(t, o, info.ConversationID, 1)
			ops := e.connect("ops")
			// The call that expires may be withdrawn already: its publish
			// was acked, so it was queued.
			if n := bustest.StreamMsgs(t, ops, wire.StreamCalls); n != 1 && tc.name != "expired" {
				t.Fatalf("%d calls queued, want 1", n)
			}
			tc.settle(t, e, o, c)
			waitFor(t, "the call withdrawn from the queue", func() (bool, string) {
				n := bustest.StreamMsgs(t, ops, wire.StreamCalls)
				return n == 0, fmt.Sprintf("%d queued", n)
			})

			ran := filepath.Join(t.TempDir(), "ran")
			script := &worker.Command{Argv: []string{"sh", "-c", `cat >/dev/null; echo "$TOOLGATE_RUN_ID" >> "$RAN"; echo 42`}, Env: []string{"RAN=" + ran}}
			spec := worker.ToolSpec{Name: "calculate_answer", Parameters: json.RawMessage(`{"type":"object"}`)}
			w, err := worker.New(worker.Config{Bus: e.connect("worker"), Tools: []worker.Tool{{Spec: spec, Executor: script, Kind: "exec"}}, ID: "late-worker", Logger: testLogger(t)})
			if err != nil {
				t.Fatal(err)
			}
			e.run("worker", w.Run)
			cons, err := ops.JetStream().Consumer(ctxT(t), wire.StreamCalls, "call_calculate_answer")
			if err != nil {
				t.Fatal(err)
			}
			// A waiting pull and nothing pending nor unacked: whatever the
			// queue held was delivered and acked, or there was nothing.
			waitFor(t, "the worker pulling with nothing left to take", func() (bool, string) {
				ci, err := cons.Info(ctxT(t))
				if err != nil {
					return false, err.Error()
				}
				return ci.NumWaiting > 0 && ci.NumPending == 0 && ci.NumAckPending == 0,
					fmt.Sprintf("waiting %d, pending %d, unacked %d", ci.NumWaiting, ci.NumPending, ci.NumAckPending)
			})
			if got, err := os.ReadFile(ran); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the settled call ran at the worker that came later: %q %v", got, err)
			}
		})
	}
}
