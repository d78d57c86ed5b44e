package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/deferred"
	"github.com/toolgate/toolgate/internal/telemetry"
	"github.com/toolgate/toolgate/wire"
)

// publisher turns a paused run's deferred requests into a batch and
// publishes its calls (publish.go). It is handed what it uses, and
// nothing else of the orchestrator.
type publisher struct {
	publisherParams
	unserved *unservedCalls
	// stored are the runs whose unmarked calls this replica published and
	// saw stored (publish.go).
	stored storedRuns
}

// publisherParams are the publisher's collaborators.
type publisherParams struct {
	log       *slog.Logger
	clock     func() time.Time
	bus       *bus.Bus
	observer  observer
	deadlines *deadlineIndex
	// discovery says which tool a call of a run goes to.
	discovery *discovery
	roster    *roster
	// do applies t to conversation id through the write path (the
	// effector's), which carries out what it asks for.
	do func(ctx context.Context, id string, t conversation.Transition) error
}

// publishBatch publishes every call of the conversation's batch not yet
// marked published, then marks them. Calls are published before they are
// marked, so a crash in between publishes them again: the message id, from
// (run, call, kind), lets the stream drop the repeat (D35). Calls this
// replica saw stored already (storedRuns) are marked without being
// published again.
func (p *publisher) publishBatch(ctx context.Context, c *conversation.State) error {
	b := c.Batch
	if b == nil {
		return nil
	}
	var (
		ids []string
		err error
	)
	// What the run published was stored; a call dispatched since
	// (conversation.State.Dispatch) was not among it, and is known apart.
	runStored := p.stored.take(b.RunID)
	seen := func(pc *conversation.PendingCall) bool {
		if pc.Dispatched() {
			return p.stored.take(dispatchKey(b.RunID, pc.ToolCallID))
		}
		return runStored
	}
	var unseen []*conversation.PendingCall
	for _, pc := range b.Calls {
		if !pc.Unmarked() {
			continue
		}
		if seen(pc) {
			ids = append(ids, pc.ToolCallID)
		} else {
			unseen = append(unseen, pc)
		}
	}
	if len(unseen) > 0 {
		var pids []string
		pids, err = p.publishCalls(ctx, c, func(pc *conversation.PendingCall) bool { return slices.Contains(unseen, pc) })
		ids = append(ids, pids...)
	}
	return p.mark(ctx, c.ID, b.RunID, ids, err)
}

// dispatchKey is a dispatched call's entry in storedRuns.
func dispatchKey(runID, callID string) string { return runID + "\x00" + callID }

// mark records that the calls ids of run runID were published, and joins
// what that fails with to err, the publication's error.
func (p *publisher) mark(ctx context.Context, convID, runID string, ids []string, err error) error {
	if len(ids) == 0 {
		return err
	}
	now := p.clock()
	merr := p.do(ctx, convID, conversation.MarkPublishedTransition(runID, ids, now))
	if merr != nil {
		err = errors.Join(err, fmt.Errorf("mark published: %w", merr))
	}
	return err
}

// publishDispatched publishes the calls ids of c's batch that were just
// dispatched to their workers (conversation.State.Dispatch; c is the state that
// recorded it) without marking them, as a paused run publishes its batch
// (publishPaused): a mark written now would race the worker's result, and
// a follow-up started from that result would be dropped and its model
// asked again. The result marks its call; reconcile marks what is still
// unmarked a pass later (publishDue), publishing it again first unless
// this replica saw it stored. A dispatch stored but never published (a
// crash, a failed publish) is thus published by reconcile, under the same
// message id.
func (p *publisher) publishDispatched(ctx context.Context, c *conversation.State, ids []string) error {
	want := func(pc *conversation.PendingCall) bool { return pc.Dispatched() && slices.Contains(ids, pc.ToolCallID) }
	published, err := p.publishCalls(ctx, c, want)
	if err == nil {
		now := p.clock()
		for _, id := range published {
			p.stored.add(dispatchKey(c.Batch.RunID, id), now)
		}
	}
	return err
}

// publishCalls publishes the calls of the conversation's batch that are
// neither marked published nor answered, and returns their ids; it does
// not mark them. A paused run's batch is published this way: marking it
// would be one more write on every call's way, and its calls need none. A
// reply marks its call (an answered call was published), and reconcile
// publishes and marks what is still unmarked later, under the same message
// ids, which the stream drops as repeats while they are in its duplicate
// window.
//
// only, when not nil, says which of those calls to publish.
func (p *publisher) publishCalls(ctx context.Context, c *conversation.State, only func(*conversation.PendingCall) bool) ([]string, error) {
	b := c.Batch
	if b == nil {
		return nil, nil
	}
	var (
		msgs []bus.Outgoing
		ids  []string
		errs []error
	)
	for _, pc := range b.Calls {
		if !pc.Unmarked() || only != nil && !only(pc) {
			continue
		}
		m, err := p.outgoing(c, b.RunID, pc, b.Trace)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		msgs = append(msgs, m)
		ids = append(ids, pc.ToolCallID)
	}
	if len(msgs) == 0 {
		return nil, errors.Join(errs...)
	}
	repeats, err := p.bus.PublishBatchRepeats(ctx, msgs)
	if err != nil {
		// Which ones failed is not told apart: none counts as published,
		// and the next attempt republishes all of them under the same ids.
		return nil, errors.Join(append(errs, fmt.Errorf("publish batch of run %s: %w", b.RunID, err))...)
	}
	p.observer.published(len(msgs))
	// A call the stream already held was told about when it was stored
	// (by the replica that published it first).
	var fresh []string
	for i, id := range ids {
		if !repeats[i] {
			fresh = append(fresh, id)
		}
	}
	p.tellUnserved(c.ID, b, fresh)
	p.log.DebugContext(ctx, "batch published", slog.String("conversation_id", c.ID),
		slog.String("run_id", b.RunID), slog.Int("messages", len(msgs)))
	return ids, errors.Join(errs...)
}

// publishPaused publishes a paused run's calls (publishCalls) and, once
// the stream has stored every one of them, remembers the run (storedRuns),
// so that reconcile marks them without publishing them again. Reconcile's
// own publication is marked at once and needs no such entry.
func (p *publisher) publishPaused(ctx context.Context, c *conversation.State) error {
	ids, err := p.publishCalls(ctx, c, nil)
	if err == nil && len(ids) > 0 {
		p.stored.add(c.Batch.RunID, p.clock())
	}
	return err
}

// tellUnserved hands the external calls just published (ids) to the look
// at whether their tools have workers.
func (p *publisher) tellUnserved(convID string, b *conversation.Batch, ids []string) {
	var byTool map[string][]unservedCall
	for _, id := range ids {
		pc := b.Call(id)
		if pc == nil || pc.Kind != deferred.KindCall {
			continue
		}
		if byTool == nil {
			byTool = map[string][]unservedCall{}
		}
		byTool[pc.ToolName] = append(byTool[pc.ToolName], unservedCall{convID: convID, runID: b.RunID, callID: id, deadline: pc.Deadline})
	}
	for tool, calls := range byTool {
		p.unserved.published(tool, calls)
	}
}

// outgoing is the message for one deferred call: an approval request (with
// the args digest and the tool's description and schema, so approvers can
// show and edit the args) or a call request. Its headers carry the trace
// context of the run that issued it (runTrace), so that the worker's or
// approver's span continues the run's trace.
func (p *publisher) outgoing(c *conversation.State, runID string, pc *conversation.PendingCall, runTrace map[string]string) (bus.Outgoing, error) {
	convID := c.ID
	hdr := telemetry.HeaderOf(runTrace)
	if pc.Kind == deferred.KindApproval {
		req := wire.ApprovalRequest{
			RunID: runID, ConversationID: convID, ToolCallID: pc.ToolCallID, ToolName: pc.ToolName,
			Args: pc.Args, ArgsDigest: pc.ArgsDigest, Metadata: pc.Metadata, Deadline: pc.Deadline.UTC(), Attempt: 1,
			Approvers: p.roster.approversFor(c, pc), MayNotApprove: p.roster.mayNotApprove(c, pc), Caller: c.Caller,
		}
		p.roster.withApproversRule(c, pc, &req)
		if tool := p.discovery.toolOf(p.roster.agentOf(c).config(), runID, pc.ToolName); tool != nil {
			req.ToolDescription = tool.Description
			req.Parameters = tool.Parameters
		}
		m, err := bus.ApprovalMessage(req, hdr)
		if err != nil {
			return bus.Outgoing{}, fmt.Errorf("approval %s: %w", pc.ToolCallID, err)
		}
		return m, nil
	}
	req := wire.CallRequest{
		RunID: runID, ConversationID: convID, ToolCallID: pc.ToolCallID, ToolName: pc.ToolName,
		Args: pc.Args, Metadata: pc.Metadata, Deadline: pc.Deadline.UTC(), Attempt: 1,
	}
	if pc.Dispatched() {
		// Its metadata was the approval request's; the tool gets the
		// decision's instead, as an approved call's ToolCallMetadata
		// (D23). It runs with the args it was approved with (D24).
		req.Metadata = pc.Approval.Metadata
		req.Args = pc.RunArgs()
	}
	m, err := bus.CallMessage(req, hdr)
	if err != nil {
		return bus.Outgoing{}, fmt.Errorf("call %s: %w", pc.ToolCallID, err)
	}
	return m, nil
}

// newBatch turns a paused run's Requests into a batch with deadlines,
// digests and reasons. Calls the run already published (inline) keep their
// record, reply included, when they are the same call in the same category.
// A call approved with override args and deferred again comes with those
// args in req (D24, D26): the worker runs it with what was approved. runTrace
// is the trace context of the run (telemetry.InjectMap).
func (p *publisher) newBatch(ag *agentRuntime, runID string, req *deferred.Requests, prev *conversation.Batch, runTrace map[string]string) (*conversation.Batch, error) {
	now := p.clock()
	b := &conversation.Batch{RunID: runID, Trace: runTrace}
	ids := make(map[string]bool, len(req.Approvals)+len(req.Calls))
	add := func(call deferred.Call, kind deferred.Kind) error {
		ids[call.ToolCallID] = true
		if prev != nil && prev.RunID == runID {
			if old := prev.Call(call.ToolCallID); old != nil && old.Kind == kind && !old.Taken && sameJSON(old.Args, call.Args) {
				old.KeepRequest(call, req.Metadata[call.ToolCallID])
				b.Calls = append(b.Calls, old)
				return nil
			}
		}
		args := call.Args
		if len(args) == 0 {
			args = json.RawMessage("{}")
		}
		pc := &conversation.PendingCall{ToolCallID: call.ToolCallID, ToolName: call.ToolName, Kind: kind, Args: args}
		tool := p.discovery.toolOf(ag.config(), runID, call.ToolName)
		if tool != nil {
			pc.SchemaDigest = tool.digest
		}
		approval := kind == deferred.KindApproval
		pc.Deadline = now.Add(tool.deadline(approval))
		// Published right after the batch is stored; the time to a
		// decision or a result counts from here.
		pc.PublishedAt = now
		pc.Metadata = req.Metadata[call.ToolCallID]
		if approval {
			d, err := deferred.ArgsDigest(args)
			if err != nil {
				return fmt.Errorf("call %s: %w", call.ToolCallID, err)
			}
			pc.ArgsDigest = d
			if len(pc.Metadata) == 0 && tool != nil {
				pc.Metadata = tool.ApprovalMetadata
			}
			if tool != nil && tool.EscalateAfter > 0 {
				pc.Escalation = &conversation.Escalation{At: now.Add(tool.EscalateAfter.D())}
			}
			if tool != nil && tool.Executor != ExecutorFrontend {
				// A configured or discovered tool: its workers run the
				// call once it is approved. A frontend's tool waits for
				// the frontend after its approval, in the follow-up.
				pc.Dispatch = tool.deadline(false)
			}
		}
		if !approval && tool != nil && tool.Executor == ExecutorFrontend {
			// Answered over HTTP (Answer): nothing publishes it.
			pc.Executor, pc.Published = ExecutorFrontend, true
		}
		pc.KeepRequest(call, req.Metadata[call.ToolCallID])
		b.Calls = append(b.Calls, pc)
		return nil
	}
	// Approvals first, then calls, each in emission order (D7): the order
	// approvers and workers see them in.
	for _, c := range req.Approvals {
		if err := add(c, deferred.KindApproval); err != nil {
			return nil, err
		}
	}
	for _, c := range req.Calls {
		if err := add(c, deferred.KindCall); err != nil {
			return nil, err
		}
	}
	for id, m := range req.Metadata {
		if !ids[id] {
			if b.ExtraMetadata == nil {
				b.ExtraMetadata = map[string]json.RawMessage{}
			}
			b.ExtraMetadata[id] = m
		}
	}
	return b, nil
}

func sameJSON(a, b json.RawMessage) bool {
	ca, err1 := deferred.CanonicalJSON(orEmpty(a))
	cb, err2 := deferred.CanonicalJSON(orEmpty(b))
	return err1 == nil && err2 == nil && string(ca) == string(cb)
}

// batchDone forgets what this replica keeps in memory about the batch of
// run runID of convID, now complete: its deadline and that its calls were
// seen stored (nothing of it is left to expire or to mark). Kept, each
// stayed until due (ten minutes, a minute) after its conversation had
// finished, growing with the rate of calls. A batch answered before this
// replica saw its calls' acks is remembered as stored after this, and
// forgotten by reconcile's prune, as before.
func (p *publisher) batchDone(convID, runID string) {
	p.deadlines.forget(convID)
	p.stored.take(runID)
}
