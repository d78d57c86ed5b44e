package bus

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"regexp"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/wire"
)

// Replies are stored under a partition of their run, so that each
// orchestrator replica consumes the partitions it owns and a reply reaches
// the replica that holds its conversation. Workers and approvers publish
// on toolgate.reply.<run>.<kind> as ever; the stream's subject transform
// stores the message as toolgate.replyp.<partition>.<run>.<kind>, the
// partition being nats-server's deterministic partition(N, 1) of the run
// id: FNV-1a (32 bits) of the token, modulo N. The stored prefix is apart
// from toolgate.reply so that a durable of an earlier build, filtered on
// toolgate.reply.>, never receives (and dead-letters, not knowing the
// form) a partitioned reply: it keeps only what was stored before the
// transform.
const (
	// PrefixReplyPartitioned is the stored form's prefix.
	PrefixReplyPartitioned = "toolgate.replyp"
	// DefaultReplyPartitions is SetupConfig.ReplyPartitions' default:
	// divisible by 1, 2, 3 and 6, so that so many replicas own as many
	// partitions each. Each partition is a durable whose state the server
	// writes to disk as it moves: 12 partitions cost the server 0.12 ms a
	// call more than one shared durable in the replica bench (its consumer
	// state flushes, 2 % of its CPU then 13 %); deployments of more
	// replicas set more (--reply-partitions).
	DefaultReplyPartitions = 6
	// maxReplyPartitions bounds the partitions (a durable each).
	maxReplyPartitions = 1024
)

// replyTransform is the replies stream's subject transform into n
// partitions.
func replyTransform(n int) *jetstream.SubjectTransformConfig {
	return &jetstream.SubjectTransformConfig{
		Source:      wire.PrefixReply + ".*.*",
		Destination: fmt.Sprintf("%s.{{partition(%d,1)}}.{{wildcard(1)}}.{{wildcard(2)}}", PrefixReplyPartitioned, n),
	}
}

var partitionDest = regexp.MustCompile(`^` + regexp.QuoteMeta(PrefixReplyPartitioned) + `\.\{\{\s*partition\(\s*(\d+)\s*,\s*1\s*\)\s*\}\}\.`)

// ReplyPartition is the partition of the stored replies of runID among n:
// what the stream's transform computes for it.
func ReplyPartition(runID string, n int) int {
	if n <= 1 {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(runID))
	return int(h.Sum32() % uint32(n))
}

// ReplyPartitionFilter is the filter of partition p's stored replies.
func ReplyPartitionFilter(p int) string {
	return PrefixReplyPartitioned + "." + strconv.Itoa(p) + ".>"
}

// StoredReplySubject is the subject a reply published on
// toolgate.reply.<runID>.<kind> is stored under in a stream of n
// partitions (n = 0: the same).
func StoredReplySubject(runID, kind string, n int) string {
	if n <= 0 {
		return wire.PrefixReply + "." + runID + "." + kind
	}
	return PrefixReplyPartitioned + "." + strconv.Itoa(ReplyPartition(runID, n)) + "." + runID + "." + kind
}

// WireReplySubject is the subject a reply was published on, given the one
// it is stored under: toolgate.replyp.<p>.<run>.<kind> becomes
// toolgate.reply.<run>.<kind>; any other subject is returned as it is.
func WireReplySubject(stored string) string {
	rest, ok := strings.CutPrefix(stored, PrefixReplyPartitioned+".")
	if !ok {
		return stored
	}
	_, tail, ok := strings.Cut(rest, ".")
	if !ok {
		return stored
	}
	return wire.PrefixReply + "." + tail
}

// ReplyPartitions is the number of partitions the replies stream stores
// its replies in, from its subject transform: 0 when it has none (every
// reply is stored as published, for one shared durable).
func (b *Bus) ReplyPartitions(ctx context.Context) (int, error) {
	gctx, release := b.deny.guard(ctx, jsAPIFor(wire.StreamReplies))
	st, err := b.js.Stream(gctx, wire.StreamReplies)
	derr := denied(gctx)
	release()
	if derr != nil {
		return 0, fmt.Errorf("stream %s: %w", wire.StreamReplies, derr)
	}
	if err != nil {
		return 0, fmt.Errorf("stream %s: %w", wire.StreamReplies, errNotSetUp(err))
	}
	return partitionsOf(st.CachedInfo().Config.SubjectTransform)
}

func partitionsOf(tr *jetstream.SubjectTransformConfig) (int, error) {
	if tr == nil || tr.Destination == "" {
		return 0, nil
	}
	m := partitionDest.FindStringSubmatch(tr.Destination)
	if m == nil {
		return 0, fmt.Errorf("stream %s: subject transform %q is not toolgate's partitioning", wire.StreamReplies, tr.Destination)
	}
	n, err := strconv.Atoi(m[1])
	if err != nil || n < 1 || n > maxReplyPartitions {
		return 0, fmt.Errorf("stream %s: %d partitions out of range", wire.StreamReplies, n)
	}
	return n, nil
}

// keepPartitions makes sc, a wanted stream configuration, keep the reply
// partitions have, the stream's, already has: a count changed under
// stored replies would leave those of the partitions it drops with no
// durable, and replicas of the old count and the new one would split the
// others wrongly. Nor does a Setup that wants none (a tool-worker's of an
// earlier build) take them away.
func keepPartitions(sc *jetstream.StreamConfig, have jetstream.StreamConfig) {
	if sc.Name == wire.StreamReplies && have.SubjectTransform != nil {
		tr := *have.SubjectTransform
		sc.SubjectTransform = &tr
	}
}

// ReplyPartitionConsumer names partition p's durable: <durable>_p<p>.
func ReplyPartitionConsumer(durable string, p int) string {
	return durable + "_p" + strconv.Itoa(p)
}

// ConsumeReplyPartition runs handler for the replies stored in partition
// p, on its durable (ReplyPartitionConsumer), which every replica that
// owns p binds to: two owners at once (during a move) share its messages,
// each delivered to one of them.
func (b *Bus) ConsumeReplyPartition(ctx context.Context, durable string, p int, cfg ConsumeConfig, h Handler[Reply]) (*Subscription, error) {
	if p < 0 || p >= maxReplyPartitions {
		return nil, errors.New("consume replies: partition out of range")
	}
	name := ReplyPartitionConsumer(durable, p)
	if err := wire.ValidateToken("durable name", name); err != nil {
		return nil, fmt.Errorf("consume replies: %w", err)
	}
	cfg = cfg.withDefaults(64)
	cc := jetstream.ConsumerConfig{
		Durable:       name,
		Description:   "orchestrator replies, partition " + strconv.Itoa(p),
		FilterSubject: ReplyPartitionFilter(p),
	}
	s, err := consume(ctx, b, wire.StreamReplies, cc, cfg, decodeReply, h)
	if err != nil {
		return nil, fmt.Errorf("consume replies %s: %w", name, err)
	}
	return s, nil
}
