package orchestrator

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/wire"
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

// advertise puts this replica's advert and reads every replica's.
func (o *Orchestrator) advertise(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, storeOpTimeout)
	defer cancel()
	ad := replicaAdvert{Instance: o.cfg.InstanceID, Agents: map[string]string{}, Until: o.clock().Add(o.cfg.LeaseTTL)}
	for _, a := range o.agents {
		ad.Agents[a.name] = a.digest
	}
	b, err := json.Marshal(ad)
	if err != nil {
		return err
	}
	if _, err := o.replicaKV.Put(ctx, replicaKeyPrefix+o.cfg.InstanceID, b); err != nil {
		return err
	}
	w, err := o.replicaKV.WatchFiltered(ctx, []string{replicaKeyPrefix + ">"}, jetstream.IgnoreDeletes())
	if err != nil {
		return err
	}
	defer func() { _ = w.Stop() }()
	m := map[string]replicaAdvert{}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e, ok := <-w.Updates():
			if !ok || e == nil {
				o.replicas.set(m)
				return nil
			}
			var a replicaAdvert
			if err := json.Unmarshal(e.Value(), &a); err != nil {
				o.once.warn("advert:"+e.Key(), "replica advert not understood", slog.String("key", e.Key()), slog.String("error", err.Error()))
				continue
			}
			m[strings.TrimPrefix(e.Key(), replicaKeyPrefix)] = a
		}
	}
}

// advertiseLoop keeps this replica's advert alive and its view of the
// others fresh.
func (o *Orchestrator) advertiseLoop() {
	t := newTicker(o.cfg.LeaseTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-o.stopping:
			return
		case <-t.C:
		}
		if err := o.advertise(o.runCtx); err != nil && o.runCtx.Err() == nil {
			o.log.Warn("replica advert", slog.String("error", err.Error()))
		}
	}
}

// withdraw deletes this replica's advert, so that the others see at once
// that it no longer runs its agents (the upgrade rule needs no wait).
func (o *Orchestrator) withdraw(ctx context.Context) {
	if o.replicaKV == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeOpTimeout)
	defer cancel()
	if err := o.replicaKV.Delete(ctx, replicaKeyPrefix+o.cfg.InstanceID); err != nil {
		o.log.Warn("withdraw replica advert", slog.String("error", err.Error()))
	}
}

// subscribeNudges listens for the nudges of this replica's agents: a
// replica that completed a batch of a conversation it does not run (or
// took a start for an agent it lacks) nudges that agent's replicas, and
// each takes the run over at once if it may (relaunch is exactly-once).
func (o *Orchestrator) subscribeNudges() error {
	o.nudged = make(chan string, 1024)
	for _, name := range o.agentNames {
		sub, err := o.bus.SubscribeNudges(name, func(convID string) {
			select {
			case o.nudged <- convID:
			default:
				// Full: reconcile finds the conversation at its next pass.
			}
		})
		if err != nil {
			o.unsubscribeNudges()
			return err
		}
		o.nudgeSubs = append(o.nudgeSubs, sub)
	}
	o.loops.Go(func() {
		for {
			select {
			case <-o.stopping:
				return
			case id := <-o.nudged:
				ctx, cancel := context.WithTimeout(o.runCtx, replyTimeout)
				// The state as stored now, not as this replica cached it:
				// the claim that handed the run over was another's append.
				if _, _, err := o.store.get(ctx, id); err == nil {
					o.relaunch(ctx, id)
				}
				cancel()
			}
		}
	})
	return nil
}

func (o *Orchestrator) unsubscribeNudges() {
	for _, s := range o.nudgeSubs {
		_ = s.Unsubscribe()
	}
	o.nudgeSubs = nil
}

// handOver tells the replicas of c's agent that c has a run for them
// (its lease already expired).
func (o *Orchestrator) handOver(ctx context.Context, c *Conversation) {
	o.stats.HandedOver.Add(1)
	o.log.InfoContext(ctx, "run handed over to the agent's replicas", slog.String("conversation_id", c.ID),
		slog.String("agent", c.Agent), slog.String("agent_digest", ShortDigest(c.AgentDigest)))
	if err := o.bus.PublishNudge(c.Agent, c.ID); err != nil {
		// Their reconcile finds it (its lease is expired).
		o.log.WarnContext(ctx, "nudge", slog.String("conversation_id", c.ID), slog.String("error", err.Error()))
	}
}

// awaitAgent handles a conversation that needs a run this replica may not
// give it. If a live replica runs its agent (with its digest, or with
// another that adopts it once no replica advertises the old one), that
// replica's reconcile takes it. If none does, the conversation says so
// (Unserved in its state, an agent_unavailable event) and fails after
// Config.AgentWait: it must not wait silently for an agent nobody runs.
// Every replica's reconcile does this, so it happens while any is up.
func (o *Orchestrator) awaitAgent(ctx context.Context, c *Conversation) error {
	now := o.clock()
	for _, n := range o.replicas.names(now) {
		if n == c.Agent {
			// Nudged again at every pass while it waits: a nudge is a
			// core NATS message, lost if no replica of the agent listened
			// at that moment, and a replica whose cache holds the
			// conversation as it was before the hand-over would not see
			// it in its own reconcile.
			o.handOver(ctx, c)
			return nil
		}
	}
	reason := fmt.Sprintf("no replica runs agent %q", c.Agent)
	var noted, failed bool
	var runID string
	_, err := o.store.update(ctx, c.ID, func(c *Conversation) error {
		noted, failed, runID = c.WaitForAgent(reason, o.clock(), o.cfg.AgentWait)
		if !noted && !failed {
			return errUnchanged
		}
		return nil
	})
	if err != nil {
		return err
	}
	switch {
	case noted:
		o.log.WarnContext(ctx, "conversation waits for a replica of its agent", slog.String("conversation_id", c.ID),
			slog.String("agent", c.Agent), slog.String("agent_digest", ShortDigest(c.AgentDigest)), slog.Duration("fails_after", o.cfg.AgentWait))
		runID := ""
		if c.Lease != nil {
			runID = c.Lease.RunID
		}
		o.events.publish(ctx, c.ID, runID, EventAgentUnavailable, "", wire.AgentUnavailable{
			Agent: c.Agent, AgentDigest: c.AgentDigest, Reason: reason, FailsAt: now.Add(o.cfg.AgentWait)})
	case failed:
		o.log.WarnContext(ctx, "conversation failed: no replica of its agent came", slog.String("conversation_id", c.ID), slog.String("agent", c.Agent))
		o.events.publish(ctx, c.ID, runID, EventRunFailed, "", wire.RunFailed{Error: reason})
	}
	return nil
}
