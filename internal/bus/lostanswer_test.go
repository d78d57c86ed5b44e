package bus_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
)

// An append whose answer is lost is neither reported as failed when it
// was stored nor stored twice when it was not: AppendLog finds it in the
// log, or sends it again, and a message of another writer that came first
// is a conflict.
func TestAppendLogAnswerLost(t *testing.T) {
	t.Parallel()
	direct, proxy, b := cutSetup(t)
	ctx := bustest.Context(t)

	// appendCut appends data as the first message of conversation id's
	// log through the proxy, muting the connection as the append goes;
	// during runs once the append was stored (forward) or dropped, and the
	// connection is cut.
	appendCut := func(id string, data []byte, forward bool, during func()) (uint64, error) {
		t.Helper()
		subj := bus.ConversationSubject(id)
		pattern := subj
		if len(data) > b.LogPartSize() {
			// Muted at the last part: the first's answer lets the rest go.
			n := (len(data) + b.LogPartSize() - 1) / b.LogPartSize()
			pattern = fmt.Sprintf("%s: %d/%d", bus.HeaderLogPart, n, n)
		}
		fired := proxy.Arm(pattern, forward)
		type result struct {
			seq uint64
			err error
		}
		done := make(chan result, 1)
		go func() {
			seq, err := b.AppendLog(ctx, bus.StreamConversations, subj, 0, data, nil)
			done <- result{seq, err}
		}()
		bustest.Recv(t, fired, "the append to reach the proxy")
		if forward {
			bustest.WaitFor(t, "the append stored", func() bool {
				return bustest.SubjectMsgs(t, direct, bus.StreamConversations, subj) > 0
			})
		}
		if during != nil {
			during()
		}
		proxy.Cut()
		r := bustest.Recv(t, done, "the append to return")
		return r.seq, r.err
	}
	read := func(id string) []string { return readLog(t, direct, id) }

	t.Run("stored", func(t *testing.T) {
		seq, err := appendCut("lost1", []byte("one"), true, nil)
		if err != nil {
			t.Fatalf("an append stored whose answer was lost: %v", err)
		}
		if got := read("lost1"); len(got) != 1 || got[0] != "one" {
			t.Fatalf("log %q; want the one message", got)
		}
		// The sequence returned is the one to expect next.
		if _, err := direct.AppendLog(ctx, bus.StreamConversations, bus.ConversationSubject("lost1"), seq, []byte("two"), nil); err != nil {
			t.Fatalf("append after the sequence returned (%d): %v", seq, err)
		}
	})
	t.Run("stored in parts", func(t *testing.T) {
		big := bytes.Repeat([]byte("0123456789"), b.LogPartSize()/4) // 2.5 parts
		seq, err := appendCut("lost2", big, true, nil)
		if err != nil {
			t.Fatalf("an append in parts stored whose answer was lost: %v", err)
		}
		if got := read("lost2"); len(got) != 1 || got[0] != string(big) {
			t.Fatalf("log of %d messages; want the one", len(got))
		}
		if _, err := direct.AppendLog(ctx, bus.StreamConversations, bus.ConversationSubject("lost2"), seq, []byte("two"), nil); err != nil {
			t.Fatalf("append after the sequence returned (%d): %v", seq, err)
		}
	})
	t.Run("never arrived", func(t *testing.T) {
		if _, err := appendCut("lost3", []byte("one"), false, nil); err != nil {
			t.Fatalf("an append lost on its way: %v", err)
		}
		if got := read("lost3"); len(got) != 1 || got[0] != "one" {
			t.Fatalf("log %q; want the one message, once", got)
		}
	})
	t.Run("another came first", func(t *testing.T) {
		_, err := appendCut("lost4", []byte("mine"), false, func() {
			if _, err := direct.AppendLog(ctx, bus.StreamConversations, bus.ConversationSubject("lost4"), 0, []byte("theirs"), nil); err != nil {
				t.Fatal(err)
			}
		})
		if !errors.Is(err, bus.ErrLogConflict) {
			t.Fatalf("err = %v; want ErrLogConflict", err)
		}
		if got := read("lost4"); len(got) != 1 || got[0] != "theirs" {
			t.Fatalf("log %q; want theirs alone", got)
		}
	})
}

// An append whose outcome is still unknown when its context ends says
// so (*LogOutcomeError), and ResumeAppend learns it later: the append
// found stored, sent again when it never arrived, or refused when
// another's came first; never stored twice.
func TestResumeAppendAfterItsContextEnded(t *testing.T) {
	t.Parallel()
	direct, proxy, b := cutSetup(t)
	ctx := bustest.Context(t)

	// unknown appends data as the first message of id's log through the
	// muted proxy, within a context that ends while no answer can come.
	unknown := func(id string, forward bool) *bus.LogOutcomeError {
		t.Helper()
		subj := bus.ConversationSubject(id)
		fired := proxy.Arm(subj, forward)
		actx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
		defer cancel()
		_, err := b.AppendLog(actx, bus.StreamConversations, subj, 0, []byte("mine"), nil)
		bustest.Recv(t, fired, "the append to reach the proxy")
		var oe *bus.LogOutcomeError
		if !errors.As(err, &oe) {
			t.Fatalf("err = %v; want a *LogOutcomeError", err)
		}
		return oe
	}
	read := func(id string) []string { return readLog(t, direct, id) }

	for _, tc := range []struct {
		name    string
		forward bool
	}{{"stored", true}, {"never arrived", false}} {
		t.Run(tc.name, func(t *testing.T) {
			id := "unknown-" + strings.ReplaceAll(tc.name, " ", "-")
			oe := unknown(id, tc.forward)
			proxy.Cut()
			seq, err := b.ResumeAppend(ctx, oe)
			if err != nil {
				t.Fatalf("resume: %v", err)
			}
			if got := read(id); len(got) != 1 || got[0] != "mine" {
				t.Fatalf("log %q; want the one message, once", got)
			}
			if _, err := direct.AppendLog(ctx, bus.StreamConversations, bus.ConversationSubject(id), seq, []byte("next"), nil); err != nil {
				t.Fatalf("append after the sequence returned (%d): %v", seq, err)
			}
		})
	}
	t.Run("another came first", func(t *testing.T) {
		oe := unknown("unknown-other", false)
		if _, err := direct.AppendLog(ctx, bus.StreamConversations, bus.ConversationSubject("unknown-other"), 0, []byte("theirs"), nil); err != nil {
			t.Fatal(err)
		}
		proxy.Cut()
		if _, err := b.ResumeAppend(ctx, oe); !errors.Is(err, bus.ErrLogConflict) {
			t.Fatalf("err = %v; want ErrLogConflict", err)
		}
		if got := read("unknown-other"); len(got) != 1 || got[0] != "theirs" {
			t.Fatalf("log %q; want theirs alone", got)
		}
	})
}

// cutSetup is a server set up for toolgate, a connection to it (direct)
// and one through a CutProxy (b).
func cutSetup(t *testing.T) (direct *bus.Bus, proxy *bustest.CutProxy, b *bus.Bus) {
	t.Helper()
	srv := bustest.NewServer(t)
	direct = bustest.Connect(t, srv, "direct")
	bustest.Setup(t, direct)
	proxy = bustest.NewCutProxy(t, srv.ClientURL())
	b, err := bus.Connect(bustest.Context(t), bus.ConnConfig{URL: proxy.URL(), Name: "cut", PublishTimeout: time.Second, Logger: bustest.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return direct, proxy, b
}

// readLog is the messages of conversation id's log.
func readLog(t *testing.T, b *bus.Bus, id string) []string {
	t.Helper()
	var got []string
	if _, err := b.ReadLog(bustest.Context(t), bus.StreamConversations, bus.ConversationSubject(id), 0, func(m bus.LogMsg) error {
		got = append(got, string(m.Data))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return got
}
