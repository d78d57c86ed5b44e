package bustest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestDecisionsReadBack(t *testing.T) {
	t.Parallel()
	b := bustest.NewBus(t)
	if d := bustest.LastDecision(t, b, "run-1"); d != nil {
		t.Fatalf("LastDecision before any = %+v", d)
	}
	if got := bustest.Decisions(t, b, "run-1"); len(got) != 0 {
		t.Fatalf("Decisions before any = %+v", got)
	}
	digest, err := wire.DigestArgs([]byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, who := range []string{"alice", "bob"} {
		d := wire.Decision{RunID: "run-1", ToolCallID: "c1", ArgsDigest: digest, Approved: true, ApproverID: who, DecidedAt: time.Now()}
		if _, err := b.PublishDecision(bustest.Context(t), d); err != nil {
			t.Fatal(err)
		}
	}
	got := bustest.Decisions(t, b, "run-1")
	if len(got) != 2 || got[0].ApproverID != "alice" || got[1].ApproverID != "bob" {
		t.Errorf("Decisions = %+v, want alice's then bob's", got)
	}
	if d := bustest.LastDecision(t, b, "run-1"); d == nil || d.ApproverID != "bob" {
		t.Errorf("LastDecision = %+v, want bob's", d)
	}
	subj, _ := wire.DecisionSubject("run-1")
	if n := bustest.SubjectMsgs(t, b, wire.StreamReplies, subj); n != 2 {
		t.Errorf("SubjectMsgs = %d, want 2", n)
	}
	if n := bustest.StreamMsgs(t, b, wire.StreamReplies); n != 2 {
		t.Errorf("StreamMsgs = %d, want 2", n)
	}
	if dl := bustest.DeadLetters(t, b); len(dl) != 0 {
		t.Errorf("DeadLetters = %+v", dl)
	}
}

func TestRunStopReturnsTheError(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	started := make(chan struct{})
	stop := bustest.Run(t, "part", func(ctx context.Context) error {
		close(started)
		<-ctx.Done()
		return boom
	})
	bustest.Recv(t, started, "start")
	if err := stop(); !errors.Is(err, boom) {
		t.Errorf("stop = %v, want boom", err)
	}
	if err := stop(); !errors.Is(err, boom) {
		t.Errorf("second stop = %v, want boom again", err)
	}
}

func TestPollReturnsOnceTrue(t *testing.T) {
	t.Parallel()
	n := 0
	bustest.Poll(t, time.Minute, "three calls", func() (bool, string) {
		n++
		return n == 3, ""
	})
	if n != 3 {
		t.Errorf("cond called %d times, want 3", n)
	}
}
