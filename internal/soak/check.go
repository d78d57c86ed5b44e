package soak

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/approver"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/orchestrator"
	"github.com/toolgate/toolgate/wire"
)

// Report is what a soak run did and whether its invariants held.
type Report struct {
	Seed          uint64
	Conversations int
	Completed     int
	Failed        int
	Runs          int // runs over all conversations: prompts and follow-ups
	Batches       int // paused runs, each of which needs one follow-up
	// Deferred calls issued, by kind.
	Approvals     int
	ExternalCalls int
	// Executions counts executor runs, redeliveries after kills included.
	Executions int
	// Orchestrator counters, summed over every replica that ran.
	Applied    int64
	Duplicates int64
	Refused    int64
	Relaunched int64
	// DeadLetters is the number of messages in the dead-letter stream.
	DeadLetters int
	// Faults counts the faults injected, by kind (Fault*).
	Faults  map[string]int
	Checks  []Check
	Elapsed time.Duration
}

// Check is one invariant and whether it held.
type Check struct {
	Name   string
	OK     bool
	Detail string // what broke it, or the figures that satisfy it
}

// OK reports whether every check passed.
func (r *Report) OK() bool {
	for _, c := range r.Checks {
		if !c.OK {
			return false
		}
	}
	return len(r.Checks) > 0
}

// DeferredCalls is the number of deferred calls issued.
func (r *Report) DeferredCalls() int { return r.Approvals + r.ExternalCalls }

// FaultsTotal is the number of faults injected. Kills mid-call are counted
// once, as kills.
func (r *Report) FaultsTotal() int {
	n := 0
	for k, v := range r.Faults {
		if k != FaultWorkerKillMidCall {
			n += v
		}
	}
	return n
}

// Print writes the report for people.
func (r *Report) Print(w io.Writer) {
	fmt.Fprintf(w, "soak: seed %d, %s\n", r.Seed, r.Elapsed.Round(time.Millisecond))
	fmt.Fprintf(w, "  conversations  %d (completed %d, failed %d), runs %d, batches %d\n", r.Conversations, r.Completed, r.Failed, r.Runs, r.Batches)
	fmt.Fprintf(w, "  deferred calls %d (approvals %d, external %d), executions %d\n", r.DeferredCalls(), r.Approvals, r.ExternalCalls, r.Executions)
	fmt.Fprintf(w, "  replies        applied %d, duplicates refused %d, refused %d; runs relaunched %d\n", r.Applied, r.Duplicates, r.Refused, r.Relaunched)
	fmt.Fprintf(w, "  dead letters   %d\n", r.DeadLetters)
	fmt.Fprintf(w, "  faults         %d:", r.FaultsTotal())
	for _, k := range slices.Sorted(maps.Keys(r.Faults)) {
		fmt.Fprintf(w, " %s=%d", k, r.Faults[k])
	}
	fmt.Fprintln(w)
	passed := 0
	for _, c := range r.Checks {
		mark := "ok  "
		if c.OK {
			passed++
		} else {
			mark = "FAIL"
		}
		fmt.Fprintf(w, "  %s %s: %s\n", mark, c.Name, c.Detail)
	}
	fmt.Fprintf(w, "  invariants     %d/%d passed\n", passed, len(r.Checks))
}

// waitDeadLetters waits (bounded) until every injected malformed message
// has reached the dead-letter stream, so that the check does not race
// the consumers.
func (s *system) waitDeadLetters(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	s.mu.Lock()
	want := len(s.bad)
	s.mu.Unlock()
	for {
		if n, err := s.streamMsgs(ctx, wire.StreamDLQ, ""); err == nil && n >= uint64(want) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitRepliesSettled waits (bounded) until the orchestrators' reply
// consumer has acknowledged every reply in the stream: a duplicate injected
// just before the last conversation ended may still be on its way, and the
// check counts what the orchestrators made of every reply. The ack floor is
// what tells: a reply handed back with a delay (a replica stopping while it
// held it) is neither pending nor unacked while it waits, but it holds the
// floor below it.
func (s *system) waitRepliesSettled(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// First the calls: a call whose worker was killed after its executor
	// ran (its result recorded as answered, so a duplicate of it may have
	// been injected and even applied first) but before the result was
	// published runs again once its ack wait passes, and that second
	// result is the duplicate to count.
	for {
		if n, err := s.streamMsgs(ctx, wire.StreamCalls, ""); err == nil && n == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
	for {
		if s.repliesSettled(ctx) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// repliesSettled reports whether every reply durable of the orchestrators
// (the shared one and one per reply partition) has acknowledged all it
// took, its ack floor up to what it delivered, with nothing left to take.
func (s *system) repliesSettled(ctx context.Context) bool {
	st, err := s.ctl.JetStream().Stream(ctx, wire.StreamReplies)
	if err != nil {
		return false
	}
	names := st.ConsumerNames(ctx)
	for name := range names.Name() {
		if name != "orchestrator" && !strings.HasPrefix(name, "orchestrator_p") {
			continue
		}
		c, err := st.Consumer(ctx, name)
		if err != nil {
			return false
		}
		info, err := c.Info(ctx)
		if err != nil || info.NumPending != 0 || info.NumAckPending != 0 || info.AckFloor.Stream < info.Delivered.Stream {
			return false
		}
	}
	return names.Err() == nil
}

func (s *system) streamMsgs(ctx context.Context, stream, subject string) (uint64, error) {
	st, err := s.ctl.JetStream().Stream(ctx, stream)
	if err != nil {
		return 0, err
	}
	if subject == "" {
		info, err := st.Info(ctx)
		if err != nil {
			return 0, err
		}
		return info.State.Msgs, nil
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		return 0, err
	}
	return info.State.Subjects[subject], nil
}

// events reads every stored event of a conversation.
func (s *system) events(ctx context.Context, convID string) ([]wire.Event, error) {
	return approver.ConversationEvents(ctx, s.ctl, convID)
}

// deferredKey names one deferred call: (run, call, kind).
type deferredKey struct{ run, call, kind string }

func (k deferredKey) String() string { return k.run + "/" + k.call + "/" + k.kind }

// check reads the final state and checks the invariants.
// scanEvents reads conversation id's events into issued (the deferred
// calls its runs paused on) and applied (the replies applied to each), and
// returns the runs that paused; nil if its events could not be read. What
// is wrong with them is returned as problems.
func (s *system) scanEvents(ctx context.Context, id string, issued map[deferredKey]bool, applied map[deferredKey]int) (paused map[string]bool, problems []string) {
	evs, err := s.events(ctx, id)
	if err != nil {
		return nil, []string{fmt.Sprintf("%s: events: %v", id, err)}
	}
	paused = map[string]bool{}
	for _, ev := range evs {
		switch ev.Type {
		case orchestrator.EventRunPaused:
			var pending []wire.PendingCall
			if err := json.Unmarshal(ev.Data, &pending); err != nil {
				problems = append(problems, fmt.Sprintf("%s: run_paused event: %v", id, err))
				continue
			}
			paused[ev.RunID] = true
			for _, p := range pending {
				issued[deferredKey{p.RunID, p.ToolCallID, p.Kind}] = true
			}
		case orchestrator.EventCallDispatched:
			// An approved call gone to its workers: a call of its run,
			// issued when its decision was applied.
			var p wire.PendingCall
			if err := json.Unmarshal(ev.Data, &p); err != nil {
				problems = append(problems, fmt.Sprintf("%s: call_dispatched event: %v", id, err))
				continue
			}
			issued[deferredKey{p.RunID, p.ToolCallID, p.Kind}] = true
		case orchestrator.EventReplyApplied:
			var d struct {
				Kind string `json:"kind"`
			}
			_ = json.Unmarshal(ev.Data, &d)
			applied[deferredKey{ev.RunID, ev.ToolCallID, d.Kind}]++
		}
	}
	return paused, problems
}

// tally counts the issued calls into r and holds each to one applied
// reply; it returns the external calls no worker executed and the calls
// applied other than once.
func tally(r *Report, issued map[deferredKey]bool, applied map[deferredKey]int, executed map[string]int) (unexecuted, problems []string) {
	for k := range issued {
		if k.kind == "approval" {
			r.Approvals++
		} else {
			r.ExternalCalls++
			if executed[k.run+":"+k.call] == 0 {
				unexecuted = append(unexecuted, k.String())
			}
		}
		if n := applied[k]; n != 1 {
			problems = append(problems, fmt.Sprintf("%s applied %d times", k, n))
		}
	}
	for k, n := range applied {
		if !issued[k] {
			problems = append(problems, fmt.Sprintf("%s applied %d times but never issued", k, n))
		}
	}
	return unexecuted, problems
}

func (s *system) check(ctx context.Context) *Report {
	s.mu.Lock()
	r := &Report{Seed: s.cfg.Seed, Conversations: len(s.convs), Faults: maps.Clone(s.faults), Elapsed: s.elapsed()}
	executed := maps.Clone(s.executed)
	bad := maps.Clone(s.bad)
	convs := slices.Clone(s.convs)
	orchs := slices.Clone(s.retired)
	for _, rp := range s.replicas {
		orchs = append(orchs, rp.orch.Counts)
	}
	s.mu.Unlock()
	for _, n := range executed {
		r.Executions += n
	}
	for _, st := range orchs {
		r.Applied += st.RepliesApplied.Load()
		r.Duplicates += st.Duplicates.Load()
		r.Refused += st.Refused.Load()
		r.Relaunched += st.RunsRelaunched.Load()
	}

	var (
		notEnded, notCompleted, returnsBad, followBad, appliedBad []string
		issued                                                    = map[deferredKey]bool{}
		applied                                                   = map[deferredKey]int{}
	)
	for _, id := range convs {
		c, err := s.anyOrch().Conversation(ctx, id)
		if err != nil {
			notEnded = append(notEnded, fmt.Sprintf("%s: %v", id, err))
			continue
		}
		r.Runs += len(c.Runs)
		switch c.Status {
		case conversation.StatusCompleted:
			r.Completed++
		case conversation.StatusFailed:
			r.Failed++
			notCompleted = append(notCompleted, fmt.Sprintf("%s: %s", id, c.Error))
		default:
			notEnded = append(notEnded, fmt.Sprintf("%s: %s", id, c.Status))
			notCompleted = append(notCompleted, fmt.Sprintf("%s: %s", id, c.Status))
		}
		if msg := checkReturns(c, s.cfg.Calls); msg != "" {
			returnsBad = append(returnsBad, id+": "+msg)
		}

		paused, problems := s.scanEvents(ctx, id, issued, applied)
		appliedBad = append(appliedBad, problems...)
		if paused == nil {
			continue
		}
		r.Batches += len(paused)
		if msg := checkFollowUps(c, paused); msg != "" {
			followBad = append(followBad, id+": "+msg)
		}
	}
	unexecuted, problems := tally(r, issued, applied, executed)
	appliedBad = append(appliedBad, problems...)

	dls, dlBad := s.checkDeadLetters(ctx, bad)
	r.DeadLetters = dls

	want := s.cfg.Conversations
	r.Checks = []Check{
		check("every conversation ended", notEnded, fmt.Sprintf("%d/%d completed or failed", r.Completed+r.Failed, want)),
		check("every conversation completed", notCompleted, fmt.Sprintf("%d/%d completed", r.Completed, want)),
		check("one tool-return per tool call", returnsBad, fmt.Sprintf("%d calls × %d conversations", s.cfg.Calls, want)),
		check("one follow-up per batch", followBad, fmt.Sprintf("%d batches, %d runs", r.Batches, r.Runs)),
		check("every deferred call applied exactly once", appliedBad, fmt.Sprintf("%d issued, %d reply_applied events", len(issued), sum(applied))),
		check("replies applied = deferred calls issued", cond(r.Applied == int64(len(issued)), fmt.Sprintf("counters say %d applied, %d issued", r.Applied, len(issued))),
			fmt.Sprintf("%d", r.Applied)),
		check("every external call executed", unexecuted, fmt.Sprintf("%d executions for %d calls", r.Executions, r.ExternalCalls)),
		check("duplicates refused, not applied", cond(r.Duplicates >= int64(r.Faults[FaultDuplicateReply]), fmt.Sprintf("%d duplicates injected, %d refused", r.Faults[FaultDuplicateReply], r.Duplicates)),
			fmt.Sprintf("%d injected, %d refused as duplicates", r.Faults[FaultDuplicateReply], r.Duplicates)),
		check("dead letters = malformed messages injected", dlBad, fmt.Sprintf("%d dead letters, %d injected", dls, len(bad))),
	}
	return r
}

func check(name string, problems []string, ok string) Check {
	if len(problems) == 0 {
		return Check{Name: name, OK: true, Detail: ok}
	}
	slices.Sort(problems)
	detail := strings.Join(problems[:min(len(problems), 5)], "; ")
	if len(problems) > 5 {
		detail += fmt.Sprintf("; and %d more", len(problems)-5)
	}
	return Check{Name: name, Detail: detail}
}

func cond(ok bool, problem string) []string {
	if ok {
		return nil
	}
	return []string{problem}
}

func sum(m map[deferredKey]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// checkReturns checks a conversation's history: every tool call of the
// model has exactly one tool-return, a success carrying the idempotency
// key of a run of this conversation and that call.
func checkReturns(c *conversation.State, calls int) string {
	runs := map[string]bool{}
	for _, r := range c.Runs {
		runs[r.RunID] = true
	}
	var toolCalls []string
	returns := map[string]int{}
	var problems []string
	for _, m := range c.History {
		for _, p := range m.Parts {
			switch p.Kind {
			case agent.PartToolCall:
				toolCalls = append(toolCalls, p.ToolCallID)
			case agent.PartToolReturn:
				returns[p.ToolCallID]++
				var v struct {
					Key string `json:"key"`
				}
				_ = json.Unmarshal(p.Value, &v)
				run, call, _ := strings.Cut(v.Key, ":")
				if p.Outcome != agent.OutcomeSuccess || call != p.ToolCallID || !runs[run] {
					problems = append(problems, fmt.Sprintf("%s returned %s %s", p.ToolCallID, p.Outcome, p.Value))
				}
			case agent.PartRetryPrompt:
				problems = append(problems, fmt.Sprintf("%s got a retry prompt: %s", p.ToolCallID, p.Content))
			}
		}
	}
	if len(toolCalls) != calls {
		problems = append(problems, fmt.Sprintf("%d tool calls, want %d", len(toolCalls), calls))
	}
	for _, id := range toolCalls {
		if returns[id] != 1 {
			problems = append(problems, fmt.Sprintf("%s has %d tool-returns", id, returns[id]))
		}
	}
	if len(returns) != len(toolCalls) {
		problems = append(problems, fmt.Sprintf("tool-returns for %d ids, %d calls", len(returns), len(toolCalls)))
	}
	return strings.Join(problems, ", ")
}

// checkFollowUps checks that the conversation's runs are its first run and
// then one follow-up per paused run: every run but the last paused, the
// last completed, and as many runs as batches plus one.
func checkFollowUps(c *conversation.State, paused map[string]bool) string {
	if len(c.Runs) != len(paused)+1 {
		return fmt.Sprintf("%d runs for %d batches", len(c.Runs), len(paused))
	}
	seen := map[string]bool{}
	for i, r := range c.Runs {
		if seen[r.RunID] {
			return fmt.Sprintf("run %s listed twice", r.RunID)
		}
		seen[r.RunID] = true
		last := i == len(c.Runs)-1
		if !last && (r.Status != conversation.StatusPaused || !paused[r.RunID]) {
			return fmt.Sprintf("run %d (%s) is %s, want paused", i, r.RunID, r.Status)
		}
		if last && r.Status != conversation.StatusCompleted {
			return fmt.Sprintf("last run %s is %s", r.RunID, r.Status)
		}
	}
	return ""
}

// checkDeadLetters checks that the dead-letter stream holds exactly the
// malformed messages injected, each once.
func (s *system) checkDeadLetters(ctx context.Context, bad map[string]string) (int, []string) {
	st, err := s.ctl.JetStream().Stream(ctx, wire.StreamDLQ)
	if err != nil {
		return 0, []string{err.Error()}
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0, []string{err.Error()}
	}
	var problems []string
	seen := map[string]int{}
	n := 0
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		dl, err := s.ctl.GetDeadLetter(ctx, seq)
		if err != nil {
			continue
		}
		n++
		id := dl.Header.Get(headerBad)
		if _, ok := bad[id]; !ok {
			problems = append(problems, fmt.Sprintf("unexpected dead letter from %s (%s): %s", dl.Subject, dl.Kind, dl.Reason))
			continue
		}
		seen[id]++
	}
	for id, kind := range bad {
		if seen[id] != 1 {
			problems = append(problems, fmt.Sprintf("%s (%s) dead-lettered %d times", id, kind, seen[id]))
		}
	}
	return n, problems
}
