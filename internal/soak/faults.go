package soak

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/toolgate/toolgate/wire"
)

// injectFaults injects one fault at a time, at random gaps around
// FaultEvery, until ctx ends. Its random source is its own, so the
// sequence of kinds and targets depends on the seed only.
func (s *system) injectFaults(ctx context.Context) {
	rng := rand.New(rand.NewPCG(s.cfg.Seed, 0xfa017))
	revive := map[*workerSlot]time.Time{}
	n := 0
	for {
		gap := time.Duration(rng.ExpFloat64() * float64(s.cfg.FaultEvery))
		t := time.NewTimer(min(gap, 10*s.cfg.FaultEvery))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		now := time.Now()
		for w, at := range revive {
			if now.After(at) {
				if err := s.startWorker(ctx, w); err != nil {
					s.log.Warn("soak: restart worker", slog.String("worker", w.name), slog.String("error", err.Error()))
					continue
				}
				delete(revive, w)
			}
		}
		n++
		// A fault once begun is carried out whole, even if the injection
		// window closes meanwhile: a replica half restarted or a message
		// published but not recorded would skew the checks.
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*stopTimeout)
		err := s.fault(fctx, rng, n, revive)
		cancel()
		if err != nil {
			s.log.Warn("soak: fault", slog.String("error", err.Error()))
		}
	}
}

func (s *system) fault(ctx context.Context, rng *rand.Rand, n int, revive map[*workerSlot]time.Time) error {
	var err error
	switch p := rng.IntN(100); {
	case p < 30:
		s.faultKillWorker(rng, revive)
	case p < 60:
		err = s.faultDuplicate(ctx, rng, n)
	case p < 70:
		err = s.faultRestartReplica(ctx, rng)
	default:
		err = s.faultBadMessage(ctx, rng, n)
	}
	return err
}

func (s *system) count(kind string) {
	s.mu.Lock()
	s.faults[kind]++
	s.mu.Unlock()
}

// faultKillWorker kills a live worker, preferring one that runs a call
// now; one worker is always left, so that the run keeps moving. It comes
// back a little later.
func (s *system) faultKillWorker(rng *rand.Rand, revive map[*workerSlot]time.Time) {
	var live, busy []*workerSlot
	s.mu.Lock()
	for _, w := range s.workers {
		if w.c == nil {
			continue
		}
		live = append(live, w)
		if w.inflight > 0 {
			busy = append(busy, w)
		}
	}
	s.mu.Unlock()
	if len(live) < 2 {
		return
	}
	pool := live
	if len(busy) > 0 {
		pool = busy
	}
	w := pool[rng.IntN(len(pool))]
	if len(busy) > 0 {
		s.count(FaultWorkerKillMidCall)
	}
	s.count(FaultWorkerKill)
	s.killWorker(w)
	revive[w] = time.Now().Add(time.Duration(200+rng.IntN(800)) * time.Millisecond)
}

// faultDuplicate publishes a result a worker already produced again,
// under a message id of its own so that the stream's duplicate window does
// not drop it: the orchestrator must.
func (s *system) faultDuplicate(ctx context.Context, rng *rand.Rand, n int) error {
	s.mu.Lock()
	if len(s.answered) == 0 {
		s.mu.Unlock()
		return nil
	}
	a := s.answered[rng.IntN(len(s.answered))]
	s.mu.Unlock()
	subj, err := wire.CallReplySubject(a.runID)
	if err != nil {
		return err
	}
	reply := wire.CallReply{RunID: a.runID, ToolCallID: a.callID, Outcome: wire.OutcomeReturn,
		Value: resultValue(a.runID + ":" + a.callID), WorkerID: "soak-duplicate"}
	if _, err := s.ctl.Publish(ctx, subj, fmt.Sprintf("soak-dup-%d", n), reply); err != nil {
		return fmt.Errorf("duplicate reply: %w", err)
	}
	s.count(FaultDuplicateReply)
	return nil
}

// faultRestartReplica replaces one orchestrator replica, as a rolling
// deploy would: it stops consuming, finishes what it holds, and a new one
// takes its place.
func (s *system) faultRestartReplica(ctx context.Context, rng *rand.Rand) error {
	s.mu.Lock()
	r := s.replicas[rng.IntN(len(s.replicas))]
	s.mu.Unlock()
	s.count(FaultOrchestratorRestart)
	return s.restartReplica(ctx, r, stopTimeout)
}

// faultBadMessage publishes a malformed message marked with headerBad; each
// must end in the dead-letter stream, and nothing else may.
func (s *system) faultBadMessage(ctx context.Context, rng *rand.Rand, n int) error {
	id := fmt.Sprintf("bad-%d", n)
	s.mu.Lock()
	run := ""
	if len(s.answered) > 0 {
		run = s.answered[rng.IntN(len(s.answered))].runID
	}
	s.mu.Unlock()
	if run == "" {
		return nil
	}
	hdr := nats.Header{headerBad: []string{id}}
	kinds := []string{FaultBadReplyBody, FaultBadReplyRun, FaultUnknownRun, FaultBadCall}
	kind := kinds[rng.IntN(len(kinds))]
	// Recorded first: its dead letter may be written before Publish returns.
	s.mu.Lock()
	s.bad[id] = kind
	s.mu.Unlock()
	var err error
	switch kind {
	case FaultBadReplyBody:
		subj, _ := wire.CallReplySubject(run)
		err = s.publishRaw(ctx, subj, id, hdr, []byte(`{"run_id": "`+run+`", "tool_call_id": `))
	case FaultBadReplyRun:
		subj, _ := wire.CallReplySubject(run)
		_, err = s.ctl.Publish(ctx, subj, "soak-"+id, wire.CallReply{
			RunID: "rsoakother", ToolCallID: "k0", Outcome: wire.OutcomeReturn, Value: resultValue("forged"), WorkerID: "soak-bad",
		}, hdr)
	case FaultUnknownRun:
		ghost := fmt.Sprintf("rsoakghost%d", n)
		subj, _ := wire.CallReplySubject(ghost)
		_, err = s.ctl.Publish(ctx, subj, "soak-"+id, wire.CallReply{
			RunID: ghost, ToolCallID: "k0", Outcome: wire.OutcomeReturn, Value: resultValue("ghost"), WorkerID: "soak-bad",
		}, hdr)
	default:
		subj, _ := wire.CallSubject(toolWork)
		err = s.publishRaw(ctx, subj, id, hdr, []byte(`not a call`))
	}
	if err != nil {
		s.mu.Lock()
		delete(s.bad, id)
		s.mu.Unlock()
		return fmt.Errorf("%s: %w", kind, err)
	}
	s.count(kind)
	return nil
}

// publishRaw publishes bytes as they are, claiming JSON.
func (s *system) publishRaw(ctx context.Context, subject, id string, hdr nats.Header, data []byte) error {
	m := nats.NewMsg(subject)
	for k, v := range hdr {
		m.Header[k] = v
	}
	m.Header.Set(wire.HeaderContentType, wire.ContentTypeJSON)
	m.Header.Set(wire.HeaderMsgID, "soak-"+id)
	m.Data = data
	_, err := s.ctl.JetStream().PublishMsg(ctx, m)
	return err
}
