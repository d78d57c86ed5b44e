package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/conversation"
)

// Replies are stored in partitions of their run ids (bus/partition.go);
// each partition is owned by one live replica, which alone consumes it,
// so that a reply reaches the replica that started or last claimed the
// run, whose cache holds the conversation. A replica picks the ids of the
// runs it starts and of the follow-ups it claims in partitions it owns:
// the replies of a conversation keep coming back to it, and its follow-up
// runs there. Ownership decides where work runs, not whether it is right:
// any replica may apply any reply exactly once (the log's expected
// sequence), so two owners of one partition during a move share its
// durable harmlessly, and a partition nobody consumes for a moment keeps
// its replies stored until its next owner takes them.
//
// Membership: each replica puts owner.<instance> → ownerLease in bucket
// toolgate_replicas every third of its lease TTL, valid for one TTL, and
// deletes it when it stops; it watches the others'. The owners of the
// partitions follow from the live members alone (assignPartitions), so
// every replica that sees the same members computes the same owners; a
// join or a leave moves partitions at once (the watch), a death one TTL
// later (its lease expires).

// ownerKeyPrefix keys the partition owners' leases: owner.<instance>.
const ownerKeyPrefix = "owner."

// ownerLease is a replica's membership among the partitions' owners.
// Partitions is the count it consumes from; a replica that found another
// count (the stream set up again with another) is not counted with this
// one's members.
type ownerLease struct {
	Instance   string    `json:"instance"`
	Partitions int       `json:"partitions"`
	Until      time.Time `json:"until"`
	// Agents are the agents the replica runs (name → config digest), so
	// that a run handed over to them gets an id in one of their
	// partitions.
	Agents map[string]string `json:"agents,omitempty"`
}

// replyOwnership is this replica's share of the reply partitions: the
// durables it consumes and the partitions its run ids are picked in.
type replyOwnership struct {
	n       int
	self    string
	agents  map[string]string // this replica's, name → digest
	ttl     time.Duration
	kv      *bus.KV
	clock   func() time.Time
	log     *slog.Logger
	newID   func() string
	consume func(ctx context.Context, p int) (*bus.Subscription, error)

	// mine says, by partition, whether this replica owns it now; read by
	// every run id picked, so swapped whole. owners are every
	// partition's owner (instance) as of the same rebalance.
	mine   atomic.Pointer[[]bool]
	owners atomic.Pointer[[]string]

	// membersMu guards members apart from mu, which a rebalance holds
	// while it binds durables: a claim that hands a run over reads the
	// members without waiting for that.
	membersMu sync.Mutex
	members   map[string]ownerLease // by instance, as put (others' may have expired)

	mu   sync.Mutex
	subs map[int]*bus.Subscription
	// draining are the subscriptions of partitions given up, still
	// handing over what they fetched.
	draining sync.WaitGroup

	kick     chan struct{}
	ctx      context.Context
	stopLoop context.CancelFunc
	loops    sync.WaitGroup
}

// newOwnership reads how many partitions the replies stream has, before
// anything is started: a replica that could not tell would consume none
// of them, and with no other replica its replies would wait forever, so
// that Start fails instead. nil: the stream has none (set up by an
// earlier build, or with none), and the shared durable alone is in
// charge.
func (rp *replyPipeline) newOwnership(ctx context.Context, kv *bus.KV) (*replyOwnership, error) {
	n, err := rp.bus.ReplyPartitions(ctx)
	if err != nil {
		return nil, fmt.Errorf("reply partitions: %w", err)
	}
	if n == 0 {
		rp.log.InfoContext(ctx, "replies are not partitioned: every replica consumes them all")
		return nil, nil
	}
	lctx, cancel := context.WithCancel(context.WithoutCancel(rp.runCtx))
	agents := map[string]string{}
	for _, a := range rp.roster.agents {
		agents[a.name] = a.digest
	}
	ow := &replyOwnership{
		n: n, self: rp.cfg.InstanceID, agents: agents, ttl: rp.cfg.LeaseTTL, kv: kv, clock: rp.clock,
		log: rp.log, newID: rp.cfg.NewID,
		// The subscriptions live until they are drained, not as long
		// as the loops that start them.
		consume: func(_ context.Context, p int) (*bus.Subscription, error) {
			return rp.bus.ConsumeReplyPartition(rp.runCtx, rp.cfg.ReplyConsumer, p, rp.consumeConfig(), bus.HandlerFunc[bus.Reply](rp.handleReply))
		},
		members: map[string]ownerLease{}, subs: map[int]*bus.Subscription{},
		kick: make(chan struct{}, 1), ctx: lctx, stopLoop: cancel,
	}
	return ow, nil
}

// own starts consuming the reply partitions this replica owns (ow, from
// newOwnership; nil: none), and keeps its share up to date until
// stopOwned.
func (rp *replyPipeline) own(ctx context.Context, ow *replyOwnership) {
	if ow == nil {
		return
	}
	// Before the loops: the first share is taken from the members listed
	// now, so that Start returns consuming it.
	if err := ow.heartbeat(ctx); err != nil {
		rp.log.WarnContext(ctx, "partition lease: the next beat will try again", slog.String("error", err.Error()))
	}
	if err := ow.list(ctx); err != nil {
		rp.log.WarnContext(ctx, "partition owners: the watch will tell", slog.String("error", err.Error()))
	}
	ow.rebalance()
	rp.owned.Store(ow)
	ow.loops.Go(ow.beatLoop)
	ow.loops.Go(ow.watchLoop)
	ow.loops.Go(ow.rebalanceLoop)
}

// stopOwned gives up this replica's partitions: its lease is deleted, so
// that the others take them at once, and its durables are drained.
func (rp *replyPipeline) stopOwned(ctx context.Context) error {
	ow := rp.owned.Load()
	if ow == nil {
		return nil
	}
	ow.stopLoop()
	ow.loops.Wait()
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeOpTimeout)
	if err := ow.kv.Delete(dctx, ownerKeyPrefix+ow.self, 0); err != nil {
		ow.log.WarnContext(ctx, "withdraw partition lease: the others take its partitions once it expires", slog.String("error", err.Error()))
	}
	cancel()
	ow.mu.Lock()
	subs := ow.subs
	ow.subs = map[int]*bus.Subscription{}
	ow.mu.Unlock()
	var err error
	for _, s := range subs {
		err = errors.Join(err, s.Drain(ctx))
	}
	ow.draining.Wait()
	return err
}

// ownRunID is a new run id of conversation convID in a partition this
// replica owns, so that its replies come back here; any id when it owns
// none (or replies are not partitioned).
func (rp *replyPipeline) ownRunID(convID string) string {
	ow := rp.owned.Load()
	if ow == nil {
		return runIDFor(rp.cfg.NewID(), convID)
	}
	mine := ow.mine.Load()
	if mine == nil {
		return runIDFor(rp.cfg.NewID(), convID)
	}
	return rp.drawRunID(convID, *mine, ow.n)
}

// followUpRunID is the id of c's follow-up, claimed by this replica: in a
// partition of its own when it runs c, so that the follow-up's replies
// come back to it; otherwise in a partition of a replica that runs c's
// agent with its config, to which the run is handed over, so that they
// go there rather than back to this replica.
func (rp *replyPipeline) followUpRunID(c *conversation.State) string {
	ow := rp.owned.Load()
	if ow == nil {
		return runIDFor(rp.cfg.NewID(), c.ID)
	}
	if ok, _ := rp.roster.mayRun(c); ok {
		return rp.ownRunID(c.ID)
	}
	if in := ow.partitionsOf(c.Agent, c.AgentDigest); slices.Contains(in, true) {
		return rp.drawRunID(c.ID, in, ow.n)
	}
	return rp.ownRunID(c.ID)
}

// drawRunID draws run ids of convID until one falls in a partition of in
// (none true: the first).
func (rp *replyPipeline) drawRunID(convID string, in []bool, n int) string {
	id := runIDFor(rp.cfg.NewID(), convID)
	if !slices.Contains(in, true) {
		return id
	}
	// Each try lands in with the share of partitions in as probability:
	// a third for a replica's own with three replicas.
	for range maxRunIDTries {
		if in[bus.ReplyPartition(id, n)] {
			return id
		}
		id = runIDFor(rp.cfg.NewID(), convID)
	}
	return id
}

// partitionsOf says, by partition, whether its owner runs agent with
// digest.
func (ow *replyOwnership) partitionsOf(agent, digest string) []bool {
	out := make([]bool, ow.n)
	owners := ow.owners.Load()
	if owners == nil {
		return out
	}
	ow.membersMu.Lock()
	defer ow.membersMu.Unlock()
	for p, inst := range *owners {
		agents := ow.members[inst].Agents
		if inst == ow.self {
			agents = ow.agents
		}
		out[p] = agents[agent] == digest && digest != ""
	}
	return out
}

// maxRunIDTries bounds ownRunID's draws; a replica that owns one
// partition of 1,024 misses them all with probability 0.8.
const maxRunIDTries = 256

// ReplyPartitions lists the partitions of the replies this replica owns
// and consumes now, and the count of partitions (0: replies are not
// partitioned).
func (o *Orchestrator) ReplyPartitions() (owned []int, of int) {
	ow := o.pipe.owned.Load()
	if ow == nil {
		return nil, 0
	}
	if mine := ow.mine.Load(); mine != nil {
		for p, m := range *mine {
			if m {
				owned = append(owned, p)
			}
		}
	}
	return owned, ow.n
}

// heartbeat puts this replica's lease.
func (ow *replyOwnership) heartbeat(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, storeOpTimeout)
	defer cancel()
	b, err := json.Marshal(ownerLease{Instance: ow.self, Partitions: ow.n, Until: ow.clock().Add(ow.ttl), Agents: ow.agents})
	if err != nil {
		return err
	}
	_, err = ow.kv.Put(ctx, ownerKeyPrefix+ow.self, b)
	return err
}

func (ow *replyOwnership) beatLoop() {
	t := newTicker(ow.ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-ow.ctx.Done():
			return
		case <-t.C:
		}
		if err := ow.heartbeat(ow.ctx); err != nil && ow.ctx.Err() == nil {
			ow.log.Warn("partition lease", slog.String("error", err.Error()))
		}
		// A member whose lease ran out is gone without a word.
		ow.poke()
	}
}

// list reads every member's lease.
func (ow *replyOwnership) list(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, storeOpTimeout)
	defer cancel()
	es, err := ow.kv.List(ctx, ownerKeyPrefix+">", true)
	if err != nil {
		return err
	}
	for _, e := range es {
		ow.saw(e)
	}
	return nil
}

// saw records a member's lease, or its deletion.
func (ow *replyOwnership) saw(e bus.Entry) {
	inst := strings.TrimPrefix(e.Key, ownerKeyPrefix)
	ow.membersMu.Lock()
	defer ow.membersMu.Unlock()
	if e.Op != bus.OpPut {
		delete(ow.members, inst)
		return
	}
	var l ownerLease
	if err := json.Unmarshal(e.Value, &l); err != nil {
		delete(ow.members, inst)
		return
	}
	ow.members[inst] = l
}

// watchLoop follows the members' leases, and pokes the rebalance at each
// change; a watch that ends is started again at the next lease beat.
func (ow *replyOwnership) watchLoop() {
	for ow.ctx.Err() == nil {
		caught := false
		for e, err := range ow.kv.Watch(ow.ctx, ownerKeyPrefix+">") {
			if err != nil {
				if ow.ctx.Err() == nil {
					ow.log.Warn("watch partition owners", slog.String("error", err.Error()))
				}
				break
			}
			if e.Op == bus.OpCaughtUp {
				caught = true
				ow.poke()
				continue
			}
			ow.saw(e)
			if caught {
				ow.poke()
			}
		}
		t := time.NewTimer(max(ow.ttl/3, 10*time.Millisecond))
		select {
		case <-ow.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

func (ow *replyOwnership) poke() {
	select {
	case ow.kick <- struct{}{}:
	default:
	}
}

func (ow *replyOwnership) rebalanceLoop() {
	for {
		select {
		case <-ow.ctx.Done():
			return
		case <-ow.kick:
		}
		ow.rebalance()
	}
}

// live lists the members whose lease holds now and who partition as this
// replica does, itself among them whatever its lease says.
func (ow *replyOwnership) live() []string {
	now := ow.clock()
	ow.membersMu.Lock()
	defer ow.membersMu.Unlock()
	out := []string{ow.self}
	for inst, l := range ow.members {
		if inst != ow.self && l.Partitions == ow.n && l.Until.After(now) {
			out = append(out, inst)
		}
	}
	return out
}

// rebalance consumes the partitions this replica owns among the live
// members and gives up the others. A partition whose durable could not
// be bound is tried again at the next poke (a lease beat at the latest).
func (ow *replyOwnership) rebalance() {
	owners := assignPartitions(ow.live(), ow.n)
	mine := make([]bool, ow.n)
	for p, o := range owners {
		mine[p] = o == ow.self
	}
	ow.mu.Lock()
	defer ow.mu.Unlock()
	if ow.ctx.Err() != nil {
		return
	}
	var took, gave []int
	for p, m := range mine {
		_, have := ow.subs[p]
		switch {
		case m && !have:
			s, err := ow.consume(ow.ctx, p)
			if err != nil {
				ow.log.Warn("consume reply partition: tried again at the next beat", slog.Int("partition", p), slog.String("error", err.Error()))
				continue
			}
			ow.subs[p] = s
			took = append(took, p)
		case !m && have:
			s := ow.subs[p]
			delete(ow.subs, p)
			gave = append(gave, p)
			ow.draining.Go(func() {
				ctx, cancel := context.WithTimeout(context.WithoutCancel(ow.ctx), replyTimeout)
				defer cancel()
				if err := s.Drain(ctx); err != nil {
					ow.log.Warn("give up reply partition", slog.Int("partition", p), slog.String("error", err.Error()))
				}
			})
		}
	}
	ow.mine.Store(&mine)
	ow.owners.Store(&owners)
	if len(took)+len(gave) > 0 {
		ow.log.Info("reply partitions moved", slog.String("took", fmtInts(took)), slog.String("gave", fmtInts(gave)),
			slog.Int("owned", len(ow.subs)), slog.Int("of", ow.n))
	}
}

func fmtInts(ps []int) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = strconv.Itoa(p)
	}
	return strings.Join(s, ",")
}

// assignPartitions gives each of n partitions an owner among members:
// rendezvous hashing (each partition to the member that ranks it highest)
// bounded by load, so that no member owns more than ceil(n/len(members))
// (plain rendezvous over a dozen partitions leaves one of three replicas
// with half as many as another). It depends on the set of members only,
// not on their order, so that every replica computes the same owners.
func assignPartitions(members []string, n int) []string {
	members = slices.Clone(members)
	slices.Sort(members)
	members = slices.Compact(members)
	out := make([]string, n)
	if len(members) == 0 {
		return out
	}
	limit := (n + len(members) - 1) / len(members)
	load := make(map[string]int, len(members))
	ranked := slices.Clone(members)
	for p := range n {
		slices.SortFunc(ranked, func(a, b string) int {
			wa, wb := rendezvousWeight(a, p), rendezvousWeight(b, p)
			switch {
			case wa > wb:
				return -1
			case wa < wb:
				return 1
			}
			return strings.Compare(a, b)
		})
		for _, m := range ranked {
			if load[m] < limit {
				out[p] = m
				load[m]++
				break
			}
		}
	}
	return out
}

// rendezvousWeight is member's rank for partition p: FNV-1a of both,
// mixed (splitmix64's finalizer) so that names that differ in one
// character do not rank alike.
func rendezvousWeight(member string, p int) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(member))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(strconv.Itoa(p)))
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
