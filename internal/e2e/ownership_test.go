package e2e_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/wire"
)

// replyConsumersUnacked is how many replies the orchestrators' durables
// (the shared one and each reply partition's) have not delivered or not
// had acked.
func replyConsumersUnacked(t *testing.T, js jetstream.JetStream) (uint64, error) {
	st, err := js.Stream(clCtx(t), wire.StreamReplies)
	if err != nil {
		return 0, err
	}
	var n uint64
	names := st.ConsumerNames(clCtx(t))
	for name := range names.Name() {
		if name != "orchestrator" && !strings.HasPrefix(name, "orchestrator_p") {
			continue
		}
		ci, err := jsConsumerInfo(t, js, wire.StreamReplies, name)
		if err != nil {
			return 0, err
		}
		n += ci.NumPending + uint64(ci.NumAckPending)
	}
	return n, names.Err()
}

// logSize is the length of p's log now.
func logSize(p *proc) int64 {
	fi, err := os.Stat(p.log)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// logHas reports whether p's log, from byte from on, has a line with
// every one of parts.
func logHas(p *proc, from int64, parts ...string) bool {
	b, err := os.ReadFile(p.log)
	if err != nil || int64(len(b)) < from {
		return false
	}
	for line := range strings.SplitSeq(string(b[from:]), "\n") {
		all := true
		for _, s := range parts {
			all = all && strings.Contains(line, s)
		}
		if all {
			return true
		}
	}
	return false
}

// A replica killed with SIGKILL while its conversations wait on calls: the
// calls' results are stored in its reply partitions, which the others take
// once its lease has expired; they apply each result once and run each
// follow-up once (D35), with no dead letter.
func TestReplicaKilledItsPartitionsMove(t *testing.T) {
	t.Parallel()
	const n = 8
	s := newSystem(t, slowAgent, scriptOf(respond("c1"), respond("c2"), answer), true)
	b := s.connect()
	s.hold("c1", true)
	s.worker("w", "slow")
	o1, api1 := s.orchestrator("orchestrator-1")
	o2, api2 := s.orchestrator("orchestrator-2")
	o3, _ := s.orchestrator("orchestrator-3")
	waitFor(t, "the first replica to own its third of the partitions", func() (bool, string) {
		return logHas(o1, 0, "reply partitions moved", "owned=2 "), ""
	})
	runs := startRuns(t, n, api1)
	waitFor(t, "every first call to start", func() (bool, string) {
		c := s.startedCount("c1")
		return c == n, fmt.Sprint(c)
	})
	from2, from3 := logSize(o2), logSize(o3)
	o1.kill()
	s.hold("c1", false)
	waitReplies(t, b, "the first calls' results to be stored", n)
	waitFor(t, "the others to take the dead replica's partitions", func() (bool, string) {
		return logHas(o2, from2, "reply partitions moved", "owned=3 ") && logHas(o3, from3, "reply partitions moved", "owned=3 "), ""
	})

	convs := waitConversations(t, api2, runs)
	for _, r := range runs {
		conv := convs[r.ConversationID]
		checkCompleted(t, conv, 3, "c1", "c2")
		checkAppliedOnce(t, b, r.ConversationID)
	}
	for _, id := range []string{"c1", "c2"} {
		if got := s.startedCount(id); got != n {
			t.Errorf("%s started under %d run ids, want %d", id, got, n)
		}
	}
	checkNoDeadLetters(t, b)
}
