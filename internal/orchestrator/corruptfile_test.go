package orchestrator_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/api"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/orchestrator"
	"github.com/toolgate/toolgate/internal/testkit"
	"github.com/toolgate/toolgate/wire"
)

// damage stops the orchestrator (stop) and the server, has flip change the
// bytes of TOOLGATE_CONVERSATIONS's block file, and starts the server again
// on the same directory.
func (e *env) damage(stop func(), flip func([]byte)) {
	e.t.Helper()
	stop()
	e.srv().Shutdown()
	blk := filepath.Join(e.dir, "jetstream", "$G", "streams", bus.StreamConversations, "msgs", "1.blk")
	b, err := os.ReadFile(blk)
	if err != nil {
		e.t.Fatal(err)
	}
	flip(b)
	if err := os.WriteFile(blk, b, 0o600); err != nil {
		e.t.Fatal(err)
	}
	e.sys = testkit.Test(e.t, testkit.Options{Dir: e.dir, NoSetup: true, Logger: testLogger(e.t)})
}

// Damage on disk, as a disk does it: 32 bytes of one conversation's last
// record flipped in the block file of TOOLGATE_CONVERSATIONS while the
// server is stopped (its index.db left intact). nats-server restores the
// stream without looking (no warning) and, when the record is read, fails
// its checksum and answers it as missing: the log silently ended one record
// early, and the conversation read as still running with its pause gone, or
// (a conversation stored with its first pause is one record) as not there
// at all. Now the reader sees that the server counts a record it did not
// send: the orchestrator starts, the other conversations carry on whole,
// the damaged one is named (log, metric, HTTP) and can be deleted as
// corrupt, which is audited.
func TestCorruptBlockFileTouchesOnlyItsConversation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	o1, stop1 := e.orch(orchestrator.Config{})
	a, bad, c := startPaused(t, o1), startPaused(t, o1), startPaused(t, o1)
	st, err := e.connect("count").JetStream().Stream(ctxT(t), bus.StreamConversations)
	if err != nil {
		t.Fatal(err)
	}
	stored := st.CachedInfo().State.Msgs
	e.damage(stop1, func(b []byte) {
		i := bytes.LastIndex(b, []byte(bus.ConversationSubject(bad.ID)))
		if i < 0 || i+332 > len(b) {
			t.Fatalf("the last record of %s is not in the block file (%d bytes)", bad.ID, len(b))
		}
		for j := i + 300; j < i+332; j++ {
			b[j] ^= 0xff
		}
	})
	var logs logBuffer
	o2, _ := e.orch(orchestrator.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	waitFor(t, "a reconcile pass over the three", func() (bool, string) {
		return o2.Stats().ReconcileErrors.Load() >= 1 && o2.Stats().Published.Load() >= int64(len(a.Batch.Calls)+len(c.Batch.Calls)),
			logs.String()
	})
	if !strings.Contains(logs.String(), "conversation_id="+bad.ID) {
		t.Errorf("the damaged conversation is not named in the log:\n%s", logs.String())
	}
	var corrupt *orchestrator.CorruptError
	if _, err := o2.Conversation(ctxT(t), bad.ID); !errors.As(err, &corrupt) || corrupt.ConversationID != bad.ID {
		t.Fatalf("reading the damaged conversation: %v, want a CorruptError naming it", err)
	}
	for _, want := range []*conversation.State{a, c} {
		got, err := o2.Conversation(ctxT(t), want.ID)
		if err != nil || got.Status != conversation.StatusPaused || len(got.History) != len(want.History) || len(got.Batch.Calls) != len(want.Batch.Calls) {
			t.Errorf("conversation %s after the damage: %v %v, want paused with %d messages", want.ID, describe(got), err, len(want.History))
		}
	}
	// A list of all goes past the damaged record, which the server does
	// not send, and lists the others.
	if l, err := o2.Conversations(ctxT(t), orchestrator.ListRequest{}); err != nil || len(l.Conversations) != 2 ||
		l.Conversations[0].ID != a.ID || l.Conversations[1].ID != c.ID {
		t.Errorf("list after the damage: %+v, %v; want %s and %s", l, err, a.ID, c.ID)
	}
	if st, err := e.connect("count").JetStream().Stream(ctxT(t), bus.StreamConversations); err != nil || st.CachedInfo().State.Msgs < stored {
		t.Errorf("messages stored: %v (%v), want at least the %d before the damage", st, err, stored)
	}

	hs := httptest.NewServer(api.Handler(o2, api.Config{}))
	t.Cleanup(hs.Close)
	conv := hs.URL + "/v1/conversations/"
	if status, body := doJSON(t, "GET", conv+bad.ID, "", ""); status != http.StatusInternalServerError ||
		!strings.Contains(fmt.Sprint(body["error"]), "is corrupt") || !strings.Contains(fmt.Sprint(body["error"]), "?corrupt=true") {
		t.Errorf("GET of the damaged conversation: %d %v", status, body)
	}
	if status, body := doJSON(t, "DELETE", conv+bad.ID, "", ""); status != http.StatusInternalServerError {
		t.Errorf("plain DELETE of the damaged conversation: %d %v, want 500 (it cannot be read)", status, body)
	}
	if status, body := doJSON(t, "DELETE", conv+a.ID+"?corrupt=true", "", ""); status != http.StatusConflict {
		t.Errorf("DELETE ?corrupt=true of a readable conversation: %d %v, want 409", status, body)
	}
	if status, body := doJSON(t, "DELETE", conv+bad.ID+"?corrupt=yes", "", ""); status != http.StatusBadRequest {
		t.Errorf("DELETE ?corrupt=yes: %d %v, want 400", status, body)
	}
	req, err := http.NewRequestWithContext(ctxT(t), "DELETE", conv+bad.ID+"?corrupt=true", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE ?corrupt=true of the damaged conversation: %d, want 204", resp.StatusCode)
	}
	if status, body := doJSON(t, "GET", conv+bad.ID, "", ""); status != http.StatusNotFound {
		t.Errorf("GET after the delete: %d %v, want 404", status, body)
	}
	if status, body := doJSON(t, "DELETE", conv+bad.ID+"?corrupt=true", "", ""); status != http.StatusNotFound {
		t.Errorf("second DELETE ?corrupt=true: %d %v, want 404", status, body)
	}
	audit, err := e.connect("auditor").JetStream().Stream(ctxT(t), wire.StreamAudit)
	if err != nil {
		t.Fatal(err)
	}
	m, err := audit.GetLastMsgForSubject(ctxT(t), "toolgate.audit."+bad.ID)
	if err != nil {
		t.Fatalf("no audit record of the delete: %v", err)
	}
	var rec wire.AuditRecord
	if err := wire.Decode(m.Data, m.Header.Get("Content-Type"), &rec); err != nil || rec.Kind != orchestrator.AuditKindConversation || rec.Verdict != "deleted" ||
		rec.ConversationID != bad.ID || !strings.Contains(rec.Reason, "corrupt") {
		t.Errorf("audit record of the delete: %+v %v", rec, err)
	}
	for _, want := range []*conversation.State{a, c} {
		if got, err := o2.Conversation(ctxT(t), want.ID); err != nil || got.Status != conversation.StatusPaused {
			t.Errorf("conversation %s after the delete: %v %v", want.ID, describe(got), err)
		}
	}
	// A day later the sweep of tombstones goes past this one, which it
	// could not read as it reads the others.
	if _, err := o2.Sweep(ctxT(t), time.Now().Add(25*time.Hour)); err != nil {
		t.Errorf("sweep a day after: %v", err)
	}
	if !strings.Contains(logs.String(), "tombstones of deleted conversations removed") {
		t.Errorf("the sweep a day after did not remove the tombstone:\n%s", logs.String())
	}
}

// Retention leaves a finished conversation whose log cannot be read to an
// operator, says so once, and goes on with the others: it used to stop
// there, every sweep, and never delete what came after it.
func TestRetentionGoesPastADamagedConversation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	o1, stop1 := e.orch(orchestrator.Config{Model: pauseModel})
	ids := startAll(t, o1, "done", "done")
	bad, good := ids[0], ids[1]
	// A second run, so that the damaged record is not the last one, whose
	// headers say the conversation is finished.
	if _, err := o1.StartRun(ctxT(t), "done again", bad); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the second run to complete", func() (bool, string) {
		c, err := o1.Conversation(ctxT(t), bad)
		if err != nil {
			return false, err.Error()
		}
		return len(c.Runs) == 2 && c.Status == conversation.StatusCompleted, describe(c)
	})
	e.damage(stop1, func(b []byte) {
		subj := []byte(bus.ConversationSubject(bad))
		i, j := bytes.Index(b, subj), bytes.LastIndex(b, subj)
		if i < 0 || i == j {
			t.Fatalf("%s has fewer than two records in the block file", bad)
		}
		// The first record's headers, past its subject.
		for k := i + len(subj) + 8; k < i+len(subj)+40; k++ {
			b[k] ^= 0xff
		}
	})
	var logs logBuffer
	o2, _ := e.orch(orchestrator.Config{Model: pauseModel, Retention: time.Hour, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	var corrupt *orchestrator.CorruptError
	if _, err := o2.Conversation(ctxT(t), bad); !errors.As(err, &corrupt) {
		t.Fatalf("reading the damaged conversation: %v, want a CorruptError", err)
	}
	if n, err := o2.Sweep(ctxT(t), time.Now().Add(2*time.Hour)); err != nil || n != 1 {
		t.Fatalf("sweep: %d deleted, %v; want the undamaged one", n, err)
	}
	if _, err := o2.Conversation(ctxT(t), good); !errors.Is(err, orchestrator.ErrNotFound) {
		t.Errorf("the undamaged one after the sweep: %v", err)
	}
	left := "retention: conversation left as it is"
	if got := strings.Count(logs.String(), left); got != 1 || !strings.Contains(logs.String(), "conversation_id="+bad) {
		t.Errorf("the sweep told of the damaged one %d times:\n%s", got, logs.String())
	}
	if n, err := o2.Sweep(ctxT(t), time.Now().Add(3*time.Hour)); err != nil || n != 0 {
		t.Errorf("the next sweep: %d deleted, %v", n, err)
	}
	if got := strings.Count(logs.String(), left); got != 1 {
		t.Errorf("the next sweep told of it again (%d in all)", got)
	}
}
