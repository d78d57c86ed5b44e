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

	"github.com/toolgate/toolgate/internal/api"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/orchestrator"
	"github.com/toolgate/toolgate/internal/testkit"
	"github.com/toolgate/toolgate/wire"
)

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
	dir := e.dir
	o1, stop1 := e.orch(orchestrator.Config{})
	a, bad, c := startPaused(t, o1), startPaused(t, o1), startPaused(t, o1)
	st, err := e.connect("count").JetStream().Stream(ctxT(t), bus.StreamConversations)
	if err != nil {
		t.Fatal(err)
	}
	stored := st.CachedInfo().State.Msgs
	stop1()
	e.srv().Shutdown()

	blk := filepath.Join(dir, "jetstream", "$G", "streams", bus.StreamConversations, "msgs", "1.blk")
	b, err := os.ReadFile(blk)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.LastIndex(b, []byte(bus.ConversationSubject(bad.ID)))
	if i < 0 || i+332 > len(b) {
		t.Fatalf("the last record of %s is not in %s (%d bytes)", bad.ID, blk, len(b))
	}
	for j := i + 300; j < i+332; j++ {
		b[j] ^= 0xff
	}
	if err := os.WriteFile(blk, b, 0o600); err != nil {
		t.Fatal(err)
	}

	e.sys = testkit.Test(t, testkit.Options{Dir: dir, NoSetup: true, Logger: testLogger(t)})
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
	for _, want := range []*orchestrator.Conversation{a, c} {
		got, err := o2.Conversation(ctxT(t), want.ID)
		if err != nil || got.Status != orchestrator.StatusPaused || len(got.History) != len(want.History) || len(got.Batch.Calls) != len(want.Batch.Calls) {
			t.Errorf("conversation %s after the damage: %v %v, want paused with %d messages", want.ID, describe(got), err, len(want.History))
		}
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
	audit, err := e.connect("auditor").JetStream().Stream(ctxT(t), bus.StreamAudit)
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
	for _, want := range []*orchestrator.Conversation{a, c} {
		if got, err := o2.Conversation(ctxT(t), want.ID); err != nil || got.Status != orchestrator.StatusPaused {
			t.Errorf("conversation %s after the delete: %v %v", want.ID, describe(got), err)
		}
	}
}
