package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/conversation"
)

// replicaKeyPrefix keys the replicas' adverts in bucket toolgate_replicas:
// replica.<instance> → replicaAdvert.
const replicaKeyPrefix = "replica."

// replicaAdvert says which agents (name → config digest) a replica runs,
// until when. A replica puts it at start and every third of its lease TTL,
// and deletes it when it stops; one whose Until passed is gone (it died).
type replicaAdvert struct {
	Instance string            `json:"instance"`
	Agents   map[string]string `json:"agents"`
	Until    time.Time         `json:"until"`
	// Watermark is a sequence of the conversations' stream below the first
	// record of every conversation the replica created and has not indexed
	// (fresh.go); absent from the adverts of an earlier build, which
	// indexed each at its start.
	Watermark *uint64 `json:"watermark,omitempty"`
}

// replicaSet is this replica's view of the live replicas' adverts, its own
// among them, as of the last refresh.
type replicaSet struct {
	mu sync.Mutex
	m  map[string]replicaAdvert
}

func (s *replicaSet) set(m map[string]replicaAdvert) {
	s.mu.Lock()
	s.m = m
	s.mu.Unlock()
}

// each calls fn for every advert live at now.
func (s *replicaSet) each(now time.Time, fn func(replicaAdvert)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range s.m {
		if a.Until.After(now) {
			fn(a)
		}
	}
}

// serves reports whether a live replica runs agent with digest.
func (s *replicaSet) serves(agent, digest string, now time.Time) bool {
	found := false
	s.each(now, func(a replicaAdvert) { found = found || a.Agents[agent] == digest })
	return found
}

// digestOf is the digest of agent as some live replica runs it; "" when
// none does.
func (s *replicaSet) digestOf(agent string, now time.Time) string {
	d := ""
	s.each(now, func(a replicaAdvert) {
		if x := a.Agents[agent]; x != "" && (d == "" || x < d) {
			d = x // the same one whatever the map's order
		}
	})
	return d
}

// names lists the agents live replicas run.
func (s *replicaSet) names(now time.Time) []string {
	seen := map[string]bool{}
	var out []string
	s.each(now, func(a replicaAdvert) {
		for n := range a.Agents {
			if !seen[n] {
				seen[n] = true
				out = append(out, n)
			}
		}
	})
	return out
}

// advertise puts this replica's advert and reads every replica's. The
// adverts of replicas that are gone are kept for adoptOrphans; the first
// advert of this process also keeps the one its instance id had before,
// which it overwrites.
func (l *replicaLink) advertise(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, storeOpTimeout)
	defer cancel()
	own := replicaKeyPrefix + l.cfg.InstanceID
	if !l.advertised {
		e, err := l.kv.Get(ctx, own)
		switch {
		case err == nil:
			var a replicaAdvert
			if json.Unmarshal(e.Value, &a) == nil && a.Watermark != nil {
				l.addDead(deadAdvert{key: own, advert: a})
			}
		case !errors.Is(err, bus.ErrKeyNotFound):
			// Not overwritten unread: its watermark is what finds the
			// conversations the earlier process left unindexed.
			return fmt.Errorf("read this instance's earlier advert: %w", err)
		}
	}
	now := l.clock()
	w := l.store.fresh.watermark()
	ad := replicaAdvert{Instance: l.cfg.InstanceID, Agents: map[string]string{}, Until: now.Add(l.cfg.LeaseTTL), Watermark: &w}
	for _, a := range l.roster.agents {
		ad.Agents[a.name] = a.digest
	}
	b, err := json.Marshal(ad)
	if err != nil {
		return err
	}
	if _, err := l.kv.Put(ctx, own, b); err != nil {
		return err
	}
	l.advertised = true
	adverts, err := l.kv.List(ctx, replicaKeyPrefix+">", true)
	if err != nil {
		return err
	}
	m := map[string]replicaAdvert{}
	for _, e := range adverts {
		var a replicaAdvert
		if err := json.Unmarshal(e.Value, &a); err != nil {
			l.once.warn("advert:"+e.Key, "replica advert not understood", slog.String("key", e.Key), slog.String("error", err.Error()))
			continue
		}
		m[strings.TrimPrefix(e.Key, replicaKeyPrefix)] = a
		if e.Key != own && !a.Until.After(now) {
			l.addDead(deadAdvert{key: e.Key, revision: e.Revision, advert: a})
		}
	}
	l.roster.replicas.set(m)
	return nil
}

// addDead keeps d for the next adoptOrphans, once per key.
func (l *replicaLink) addDead(d deadAdvert) {
	l.deadMu.Lock()
	defer l.deadMu.Unlock()
	if l.dead == nil {
		l.dead = map[string]deadAdvert{}
	}
	l.dead[d.key] = d
}

// takeDead returns the adverts addDead kept, and forgets them.
func (l *replicaLink) takeDead() []deadAdvert {
	l.deadMu.Lock()
	defer l.deadMu.Unlock()
	out := make([]deadAdvert, 0, len(l.dead))
	for _, d := range l.dead {
		out = append(out, d)
	}
	l.dead = nil
	return out
}

// advertiseLoop keeps this replica's advert alive and its view of the
// others fresh.
func (l *replicaLink) advertiseLoop() {
	t := newTicker(l.cfg.LeaseTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-l.stopping:
			return
		case <-t.C:
		}
		if err := l.advertise(l.loopCtx); err != nil && l.loopCtx.Err() == nil {
			l.log.Warn("replica advert", slog.String("error", err.Error()))
		}
	}
}

// indexLoop indexes, every third of a lease, the conversations this
// replica created that have lasted that long, and adopts what replicas
// that are gone left unindexed. It is apart from the advert loop, whose
// renewals must not wait on either: after a burst, indexing is a put per
// conversation, and an advert that waited for 100,000 of them would
// expire, and the replica be taken for dead.
func (l *replicaLink) indexLoop() {
	every := l.cfg.LeaseTTL / 3
	t := newTicker(every)
	defer t.Stop()
	l.adoptOrphans(l.loopCtx, l.takeDead())
	for {
		select {
		case <-l.stopping:
			return
		case <-t.C:
		}
		if err := l.store.indexFresh(l.loopCtx, l.clock().Add(-every)); err != nil && l.loopCtx.Err() == nil {
			l.log.Warn("index conversations", slog.String("error", err.Error()))
		}
		l.adoptOrphans(l.loopCtx, l.takeDead())
	}
}

// withdraw indexes the conversations this replica created and did not
// index, then deletes its advert, so that the others see at once that it
// no longer runs its agents (the upgrade rule needs no wait). If they
// cannot all be indexed, the advert stays: once it has expired, another
// replica adopts them.
func (l *replicaLink) withdraw(ctx context.Context) {
	if l.kv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeOpTimeout)
	defer cancel()
	if err := l.store.indexFresh(ctx, time.Time{}); err != nil {
		l.log.Warn("index conversations at stop: left to the other replicas", slog.Int("conversations", l.store.fresh.len()), slog.String("error", err.Error()))
		return
	}
	if err := l.kv.Delete(ctx, replicaKeyPrefix+l.cfg.InstanceID, 0); err != nil {
		l.log.Warn("withdraw replica advert", slog.String("error", err.Error()))
	}
}

// subscribeNudges listens for the nudges of this replica's agents: a
// replica that completed a batch of a conversation it does not run (or
// took a start for an agent it lacks) nudges that agent's replicas, and
// each takes the run over at once if it may (relaunch is exactly-once).
func (l *replicaLink) subscribeNudges() error {
	l.nudged = make(chan string, 1024)
	for _, name := range l.roster.names {
		sub, err := l.bus.SubscribeNudges(name, func(convID string) {
			select {
			case l.nudged <- convID:
			default:
				// Full: reconcile finds the conversation at its next pass.
			}
		})
		if err != nil {
			l.unsubscribeNudges()
			return err
		}
		l.nudgeSubs = append(l.nudgeSubs, sub)
	}
	l.loops.Go(func() {
		for {
			select {
			case <-l.stopping:
				return
			case id := <-l.nudged:
				ctx, cancel := context.WithTimeout(l.loopCtx, replyTimeout)
				// The state as stored now, not as this replica cached it:
				// the claim that handed the run over was another's append.
				if _, _, err := l.store.get(ctx, id); err == nil {
					l.fx.relaunch(ctx, id)
				}
				cancel()
			}
		}
	})
	return nil
}

func (l *replicaLink) unsubscribeNudges() {
	for _, s := range l.nudgeSubs {
		_ = s.Unsubscribe()
	}
	l.nudgeSubs = nil
}

// handOver tells the replicas of c's agent that c has a run for them
// (its lease already expired).
func (l *replicaLink) handOver(ctx context.Context, c *conversation.State) {
	l.observer.handedOver()
	l.log.InfoContext(ctx, "run handed over to the agent's replicas", slog.String("conversation_id", c.ID),
		slog.String("agent", c.Agent), slog.String("agent_digest", ShortDigest(c.AgentDigest)))
	if err := l.bus.PublishNudge(c.Agent, c.ID); err != nil {
		// Their reconcile finds it (its lease is expired).
		l.log.WarnContext(ctx, "nudge", slog.String("conversation_id", c.ID), slog.String("error", err.Error()))
	}
}
