package orchestrator_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/api"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/client"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/orchestrator"
	"github.com/toolgate/toolgate/wire"
)

// pauseModel pauses on a calculate_answer call when the prompt says
// "pause", and answers at once otherwise.
var pauseModel = agent.FunctionModel("pause", func(_ context.Context, req agent.ModelRequest) (agent.ModelResponse, error) {
	last := req.Messages[len(req.Messages)-1]
	for _, p := range last.Parts {
		if p.Kind == agent.PartUserPrompt && strings.Contains(p.Content, "pause") {
			return agent.ModelResponse{Parts: []agent.Part{{Kind: agent.PartToolCall, ToolName: "calculate_answer",
				ToolCallID: "calc", Args: json.RawMessage(`{"question":"q"}`)}}}, nil
		}
	}
	return agent.ModelResponse{Parts: []agent.Part{{Kind: agent.PartText, Content: "done"}}}, nil
})

// startAll starts one conversation per prompt and waits for each to reach
// the status its prompt leads to; it returns their ids.
func startAll(t *testing.T, o *orchestrator.Orchestrator, prompts ...string) []string {
	t.Helper()
	var ids []string
	for _, p := range prompts {
		info, err := o.StartRun(ctxT(t), p, "")
		if err != nil {
			t.Fatal(err)
		}
		want := conversation.StatusCompleted
		if strings.Contains(p, "pause") {
			want = conversation.StatusPaused
		}
		waitStatus(t, o, info.ConversationID, want)
		ids = append(ids, info.ConversationID)
	}
	return ids
}

// completeMany starts n conversations that complete at once, all before
// waiting for any, and returns their ids once all have completed.
func completeMany(t *testing.T, o *orchestrator.Orchestrator, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		info, err := o.StartRun(ctxT(t), "done", "")
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = info.ConversationID
	}
	for _, id := range ids {
		waitStatus(t, o, id, conversation.StatusCompleted)
	}
	return ids
}

// Pages of a conversation list cover every conversation once, in the order
// they were created (those under way: in id order); a status filter keeps
// only those in it; bad parameters are refused.
func TestListConversations(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	o, _ := e.orch(orchestrator.Config{Model: pauseModel})
	srv := httptest.NewServer(api.Handler(o, api.Config{}))
	t.Cleanup(srv.Close)
	ids := startAll(t, o, "a", "pause b", "c", "pause d", "e")
	paused := []string{ids[1], ids[3]}
	slices.Sort(paused)

	list := func(query string) ([]string, []map[string]any) {
		t.Helper()
		var got []string
		var rows []map[string]any
		cursor := ""
		for pages := 0; ; pages++ {
			if pages > len(ids) {
				t.Fatalf("%s: more pages than conversations", query)
			}
			status, body := doJSON(t, "GET", srv.URL+"/v1/conversations?"+query+"&cursor="+cursor, "", "")
			if status != 200 {
				t.Fatalf("list %s: %d %v", query, status, body)
			}
			for _, c := range body["conversations"].([]any) {
				row := c.(map[string]any)
				got = append(got, row["conversation_id"].(string))
				rows = append(rows, row)
			}
			next, _ := body["next_cursor"].(string)
			if next == "" {
				return got, rows
			}
			cursor = next
		}
	}
	got, rows := list("limit=2")
	if !slices.Equal(got, ids) {
		t.Errorf("pages of 2 gave %v, want %v", got, ids)
	}
	for _, r := range rows {
		created, err1 := time.Parse(time.RFC3339Nano, r["created_at"].(string))
		updated, err2 := time.Parse(time.RFC3339Nano, r["updated_at"].(string))
		if err1 != nil || err2 != nil || created.IsZero() || updated.Before(created) || r["status"] == "" {
			t.Errorf("row %v: want a status and created_at <= updated_at", r)
		}
	}
	if got, _ := list("status=paused&limit=1"); !slices.Equal(got, paused) {
		t.Errorf("paused ones: %v, want %v", got, paused)
	}
	if got, _ := list("status=completed"); len(got) != 3 {
		t.Errorf("completed ones: %v, want 3", got)
	}
	for _, q := range []string{"status=sleeping", "limit=0", "limit=x", "limit=100000", "cursor=a.b", "cursor=" + ids[0], "status=paused&cursor=a.b"} {
		if status, body := doJSON(t, "GET", srv.URL+"/v1/conversations?"+q, "", ""); status != 400 {
			t.Errorf("list %s: %d %v, want 400", q, status, body)
		}
	}
}

// Only a finished conversation can be deleted; deleting it removes its
// state and its events and keeps its audit records.
func TestDeleteConversation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	o, _ := e.orch(orchestrator.Config{Model: pauseModel})
	srv := httptest.NewServer(api.Handler(o, api.Config{}))
	t.Cleanup(srv.Close)
	b := e.connect("test")
	id := startAll(t, o, "pause")[0]
	url := srv.URL + "/v1/conversations/" + id

	if status, body := doJSON(t, "DELETE", url, "", ""); status != 409 || !strings.Contains(fmt.Sprint(body["error"]), "cancel it first") {
		t.Fatalf("delete a paused one: %d %v, want 409", status, body)
	}
	c, err := o.Cancel(ctxT(t), id)
	if err != nil {
		t.Fatal(err)
	}
	// A late result leaves an audit record.
	publishRaw(t, b, callSubject(t, c.Batch.RunID), "late", wire.CallReply{RunID: c.Batch.RunID, ToolCallID: "calc", Outcome: wire.OutcomeReturn, Value: json.RawMessage(`1`), WorkerID: "w"})
	waitDeadLetter(t, b, "was cancelled")
	evSubj, _ := wire.EventSubject(id)
	count := func(stream, subject string) uint64 {
		s, err := b.JetStream().Stream(ctxT(t), stream)
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(ctxT(t), jetstream.WithSubjectFilter(subject))
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Subjects[subject]
	}
	auditSubj, _ := wire.AuditSubject(c.Batch.RunID)
	waitFor(t, "the events and the audit record", func() (bool, string) {
		ev, au := count(wire.StreamEvents, evSubj), count(wire.StreamAudit, auditSubj)
		return ev > 0 && au > 0, fmt.Sprintf("events %d, audit %d", ev, au)
	})

	if status := statusOf(t, "DELETE", url); status != 204 {
		t.Fatalf("delete a cancelled one: %d, want 204", status)
	}
	if _, err := o.Conversation(ctxT(t), id); !errors.Is(err, orchestrator.ErrNotFound) {
		t.Errorf("after delete: %v, want not found", err)
	}
	if n := count(wire.StreamEvents, evSubj); n != 0 {
		t.Errorf("%d events left", n)
	}
	if n := count(wire.StreamAudit, auditSubj); n == 0 {
		t.Error("the audit record went with the conversation")
	}
	if status, body := doJSON(t, "DELETE", url, "", ""); status != 404 {
		t.Errorf("delete again: %d %v, want 404", status, body)
	}
	if status, _ := doJSON(t, "GET", url, "", ""); status != 404 {
		t.Errorf("get after delete: %d, want 404", status)
	}
}

// A delete of a finished conversation puts no due entry: a deleted
// conversation is no more under way than the finished one it was. Before,
// the tombstone's write took the change from finished to "deleted", which
// Terminal() did not count as finished, for a restart, and put the entry
// (removed again by the delete's purge, or left behind when that failed).
func TestDeleteWritesNoDueEntry(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	o, _ := e.orch(orchestrator.Config{Model: pauseModel})
	id := startAll(t, o, "hello")[0]
	var puts []string
	o.OnRestartIndexed(func(id string) { puts = append(puts, id) })
	if err := o.Delete(ctxT(t), id); err != nil {
		t.Fatal(err)
	}
	o.OnRestartIndexed(nil)
	if len(puts) != 0 {
		t.Errorf("the delete put the due entries of %v, want none", puts)
	}
	if indexed(t, e.index(), id) {
		t.Error("the deleted conversation is in the due index")
	}
}

// A delete is a change like any other: a replica that still caches the
// conversation reads it as gone and cannot start a run on it, a new prompt
// and a delete racing on two replicas never both win, and a delete that
// stopped after its tombstone is finished by the next one and by the
// retention sweep.
func TestDeleteAgainstOtherReplicas(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	o1, _ := e.orch(orchestrator.Config{Model: pauseModel, InstanceID: "one", Retention: time.Hour})
	o2, _ := e.orch(orchestrator.Config{Model: pauseModel, InstanceID: "two"})
	b := e.connect("test")
	messages := func(id string) uint64 {
		s, err := b.JetStream().Stream(ctxT(t), bus.StreamConversations)
		if err != nil {
			t.Fatal(err)
		}
		subj := bus.ConversationSubject(id)
		info, err := s.Info(ctxT(t), jetstream.WithSubjectFilter(subj))
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Subjects[subj]
	}

	// A stale cache.
	id := startAll(t, o1, "done")[0]
	if _, err := o2.Conversation(ctxT(t), id); err != nil {
		t.Fatal(err)
	}
	if err := o1.Delete(ctxT(t), id); err != nil {
		t.Fatal(err)
	}
	if c, err := o2.Conversation(ctxT(t), id); !errors.Is(err, orchestrator.ErrNotFound) {
		t.Errorf("the other replica still reads it: %v %v", c, err)
	}
	if info, err := o2.StartRun(ctxT(t), "pause", id); !errors.Is(err, orchestrator.ErrNotFound) {
		t.Errorf("the other replica started %+v on it: %v", info, err)
	}
	if n := messages(id); n != 1 {
		t.Errorf("%d records left, want only the tombstone", n)
	}

	// A new prompt on one replica, a delete on the other, at once.
	const rounds = 12
	wins := map[string]int{}
	for range rounds {
		id := startAll(t, o1, "done")[0]
		if _, err := o2.Conversation(ctxT(t), id); err != nil {
			t.Fatal(err)
		}
		var delErr, startErr error
		done := make(chan struct{})
		go func() { defer close(done); delErr = o1.Delete(ctxT(t), id) }()
		_, startErr = o2.StartRun(ctxT(t), "pause again", id)
		<-done
		c, getErr := o1.Conversation(ctxT(t), id)
		var ce *conversation.ConflictError
		switch {
		case delErr == nil && errors.Is(startErr, orchestrator.ErrNotFound) && errors.Is(getErr, orchestrator.ErrNotFound):
			wins["delete"]++
		case startErr == nil && errors.As(delErr, &ce) && getErr == nil:
			wins["prompt"]++
			waitStatus(t, o1, id, conversation.StatusPaused)
			if c.Runs[len(c.Runs)-1].Prompt != "pause again" {
				t.Errorf("runs %+v: the prompt's run is missing", c.Runs)
			}
		default:
			t.Fatalf("delete: %v; prompt: %v; then %+v, %v", delErr, startErr, c, getErr)
		}
	}
	t.Logf("of %d races: %v", rounds, wins)

	// Deletes that stopped after their tombstones: the first is finished
	// by a delete, the second by the sweep of tombstones.
	id = startAll(t, o1, "done")[0]
	if err := o1.Tombstone(ctxT(t), id); err != nil {
		t.Fatal(err)
	}
	left := startAll(t, o1, "done")[0]
	if err := o1.Tombstone(ctxT(t), left); err != nil {
		t.Fatal(err)
	}
	if n := messages(left); n < 2 {
		t.Fatalf("%d records of the delete left to the sweep", n)
	}
	if _, err := o2.Conversation(ctxT(t), id); !errors.Is(err, orchestrator.ErrNotFound) {
		t.Errorf("a tombstoned one reads %v, want not found", err)
	}
	page, err := o1.Conversations(ctxT(t), orchestrator.ListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range page.Conversations {
		if s.ID == id {
			t.Errorf("listed: %+v", s)
		}
	}
	if n := messages(id); n < 2 {
		t.Fatalf("%d records before the purge", n)
	}
	if err := o2.Delete(ctxT(t), id); !errors.Is(err, orchestrator.ErrNotFound) {
		t.Errorf("delete again: %v, want not found", err)
	}
	if n := messages(id); n != 1 {
		t.Errorf("%d records after the second delete, want the tombstone", n)
	}
	if _, err := o1.Sweep(ctxT(t), time.Now().Add(23*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if n := messages(id); n != 1 {
		t.Errorf("a young tombstone went: %d records", n)
	}
	if _, err := o1.Sweep(ctxT(t), time.Now().Add(25*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if n := messages(id); n != 0 {
		t.Errorf("%d records of a day-old tombstone left", n)
	}
	if n := messages(left); n != 0 {
		t.Errorf("%d records of a day-old tombstone of a delete that stopped before its purge left", n)
	}
}

// Retention deletes finished conversations older than it, and nothing
// else: not a younger one, not one under way.
func TestRetention(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	o, _ := e.orch(orchestrator.Config{Model: pauseModel, Retention: time.Hour})
	ids := startAll(t, o, "done", "pause", "pause")
	done, paused, cancelled := ids[0], ids[1], ids[2]
	if _, err := o.Cancel(ctxT(t), cancelled); err != nil {
		t.Fatal(err)
	}
	if n, err := o.Sweep(ctxT(t), time.Now()); err != nil || n != 0 {
		t.Fatalf("sweep of young ones: %d deleted, %v", n, err)
	}
	n, err := o.Sweep(ctxT(t), time.Now().Add(2*time.Hour))
	if err != nil || n != 2 {
		t.Fatalf("sweep two hours on: %d deleted, %v; want 2", n, err)
	}
	for _, id := range []string{done, cancelled} {
		if _, err := o.Conversation(ctxT(t), id); !errors.Is(err, orchestrator.ErrNotFound) {
			t.Errorf("finished %s kept: %v", id, err)
		}
	}
	if c, err := o.Conversation(ctxT(t), paused); err != nil || c.Status != conversation.StatusPaused {
		t.Errorf("paused one: %v, %v", c, err)
	}

	// The loop does the same on its own.
	e2 := newEnv(t)
	o2, _ := e2.orch(orchestrator.Config{Model: pauseModel, Retention: 50 * time.Millisecond})
	ids = startAll(t, o2, "done", "pause")
	waitFor(t, "the finished one to be deleted", func() (bool, string) {
		_, err := o2.Conversation(ctxT(t), ids[0])
		return errors.Is(err, orchestrator.ErrNotFound), fmt.Sprint(err)
	})
	if _, err := o2.Conversation(ctxT(t), ids[1]); err != nil {
		t.Errorf("the paused one: %v", err)
	}
}

// statusOf sends a request without a body and returns the status.
func statusOf(t *testing.T, method, url string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t), method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// The Go client lists, cancels and deletes.
func TestClientLifecycle(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	o, _ := e.orch(orchestrator.Config{Model: pauseModel})
	srv := httptest.NewServer(api.Handler(o, api.Config{}))
	t.Cleanup(srv.Close)
	c := &client.Client{BaseURL: srv.URL}
	id := startAll(t, o, "pause")[0]

	page, err := c.List(ctxT(t), client.ListOptions{Status: "paused", Limit: 10})
	if err != nil || len(page.Conversations) != 1 || page.Conversations[0].ConversationID != id || page.NextCursor != "" {
		t.Fatalf("list: %+v, %v", page, err)
	}
	var apiErr *client.APIError
	if err := c.Delete(ctxT(t), id); !errors.As(err, &apiErr) || apiErr.Status != 409 {
		t.Errorf("delete a paused one: %v, want 409", err)
	}
	if err := c.Cancel(ctxT(t), id); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctxT(t), id); err != nil {
		t.Fatal(err)
	}
	if page, err := c.List(ctxT(t), client.ListOptions{}); err != nil || len(page.Conversations) != 0 {
		t.Errorf("list after delete: %+v, %v", page, err)
	}
	if err := c.Delete(ctxT(t), id); !errors.As(err, &apiErr) || apiErr.Status != 404 {
		t.Errorf("delete again: %v, want 404", err)
	}
}

// A retention sweep reads only what aged past its cutoff since the last
// sweep: nothing of the conversations younger than the retention, however
// many are stored, and nothing it went through before. A backlog of more
// than a batch goes in one sweep, and the tombstones the deletes leave go
// a day later.
func TestRetentionReadsOnlyWhatAged(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// Stopped clocks: no replica's index loop indexes the paused one, whose
	// reads would be a reconcile pass's, not a sweep's.
	o, _ := e.orch(orchestrator.Config{Model: pauseModel, Retention: time.Hour, Clock: stoppedClock()})
	const n = 600 // over two batches of a sweep
	ids := completeMany(t, o, n)
	paused := startAll(t, o, "pause")[0]
	reads := o.Stats().StateReads.Load
	var now time.Time
	// sweep runs a sweep at now+after that should delete want finished
	// conversations, and returns the logs' reads it made.
	sweep := func(after time.Duration, want int) int64 {
		t.Helper()
		r0 := reads()
		k, err := o.Sweep(ctxT(t), now.Add(after))
		if err != nil || k != want {
			t.Fatalf("sweep %s on: %d deleted, %v; want %d", after, k, err, want)
		}
		return reads() - r0
	}
	now = time.Now()
	if r := sweep(0, 0); r != 0 {
		t.Errorf("a sweep with all %d conversations younger than the retention read %d times", n+1, r)
	}
	if r := sweep(2*time.Hour, n); r != (n+255)/256 {
		t.Errorf("the sweep of %d read %d times; want one a batch", n, r)
	}
	if _, err := o.Conversation(ctxT(t), ids[n-1]); !errors.Is(err, orchestrator.ErrNotFound) {
		t.Errorf("a finished one read %v after the sweep", err)
	}
	if c, err := o.Conversation(ctxT(t), paused); err != nil || c.Status != conversation.StatusPaused {
		t.Fatalf("the paused one: %v, %v", c, err)
	}
	// Past what it went through: the deletes' tombstones, the paused
	// conversation's records.
	if r := sweep(3*time.Hour, 0); r != 0 {
		t.Errorf("a sweep after the one that deleted all read %d times", r)
	}
	// Another replica goes on from there too.
	other, _ := e.orch(orchestrator.Config{Model: pauseModel, Retention: time.Hour, Clock: stoppedClock()})
	if k, err := other.Sweep(ctxT(t), now.Add(3*time.Hour)); err != nil || k != 0 || other.Stats().StateReads.Load() != 0 {
		t.Errorf("another replica's sweep: %d deleted, %v, %d reads; want none", k, err, other.Stats().StateReads.Load())
	}

	index := e.index()
	convs, err := e.connect("conversations").JetStream().Stream(ctxT(t), bus.StreamConversations)
	if err != nil {
		t.Fatal(err)
	}
	stored := func() uint64 {
		info, err := convs.Info(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Msgs
	}
	if got := stored(); got < n {
		t.Fatalf("%d records stored; want the %d tombstones at least", got, n)
	}
	// A day later the tombstones go, swept by a replica that has none of
	// them cached: their logs are not read, one read a batch.
	r0 := other.Stats().StateReads.Load()
	if k, err := other.Sweep(ctxT(t), now.Add(25*time.Hour)); err != nil || k != 0 {
		t.Fatalf("the sweep a day later: %d deleted, %v; want none", k, err)
	}
	if r := other.Stats().StateReads.Load() - r0; r != (n+255)/256 {
		t.Errorf("the sweep of %d tombstones read %d times; want one a batch", n, r)
	}
	if got := stored(); got > 2 {
		t.Errorf("%d records stored a day after the deletes; want the paused conversation's only", got)
	}
	// The retention sweep keeps a cursor per retention.
	for _, key := range []string{"sweep.finished.3600000", "sweep.tombstones"} {
		if _, err := index.Get(ctxT(t), key); err != nil {
			t.Errorf("cursor %s: %v", key, err)
		}
	}
}

// A list of conversations under way goes over the due index (and the
// replica's own fresh conversations), not over every stored conversation:
// what it reads does not grow with the finished ones. Another replica
// lists a conversation once it is indexed.
func TestListUnderWayReadsOnlyTheIndex(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// A short lease: the index loop runs every third of it. No reconcile
	// loop: its passes' reads would be counted with the list's; a pass
	// run here removes the entries of the conversations that lasted past
	// a tick of the index loop before they completed, as the loop would.
	cfg := orchestrator.Config{Model: pauseModel, LeaseTTL: 3 * time.Second, ReconcileInterval: time.Hour}
	o, _ := e.orch(cfg)
	const n = 600 // over two requests of last records
	completeMany(t, o, n)
	paused := startAll(t, o, "pause")[0]
	if err := o.Reconcile(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	list := func(o *orchestrator.Orchestrator, status conversation.Status) ([]string, int64) {
		t.Helper()
		r0 := o.Stats().StateReads.Load()
		page, err := o.Conversations(ctxT(t), orchestrator.ListRequest{Status: status, Limit: orchestrator.MaxListLimit})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, c := range page.Conversations {
			got = append(got, c.ID)
		}
		return got, o.Stats().StateReads.Load() - r0
	}
	got, reads := list(o, conversation.StatusPaused)
	if !slices.Equal(got, []string{paused}) || reads != 1 {
		t.Errorf("paused: %v in %d reads; want %s in 1", got, reads, paused)
	}
	if got, reads := list(o, conversation.StatusCompleted); len(got) != n || reads != (n+255)/256 {
		t.Errorf("completed: %d in %d reads; want %d in one a 256", len(got), reads, n)
	}

	other, _ := e.orch(cfg)
	waitFor(t, "the other replica to list the paused one", func() (bool, string) {
		got, _ := list(other, conversation.StatusPaused)
		return slices.Equal(got, []string{paused}), fmt.Sprint(got)
	})
}
