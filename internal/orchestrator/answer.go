package orchestrator

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/deferred"
	"github.com/toolgate/toolgate/internal/telemetry"
	"github.com/toolgate/toolgate/wire"
)

// Answer is an answer to a deferred call that comes from outside NATS: the
// HTTP API or a chat adapter on it, on behalf of a caller the API
// authenticated. It is checked and applied as a worker's reply or a bot's
// decision is (D36, D37): it must answer a call its conversation issued
// and still waits for, in the call's kind, a decision with the digest of
// the args the call was issued with, before the call's deadline.
type Answer struct {
	ConversationID string
	ToolCallID     string
	// By is who answers, as the API authenticated them: recorded as the
	// decision's approver or the result's worker. Never a name a request
	// body gives.
	By string
	// Identified says By names a user of the API's user list rather than
	// "whoever holds the API's one token" or a tokenless local caller:
	// when approver keys are trusted (Config.TrustedApprovers), only such
	// callers may decide over HTTP.
	Identified bool
	// One of Decision (an approval call) and Result (a frontend tool's
	// call).
	Decision *AnswerDecision
	Result   *AnswerResult
}

// AnswerDecision is a decision on an approval call.
type AnswerDecision struct {
	Approved bool
	// ArgsDigest is the digest (deferred.ArgsDigest) of the args the
	// decision was made on; it must be the issued call's.
	ArgsDigest string
	// OverrideArgs replace the call's args when approved (D24).
	OverrideArgs json.RawMessage
	// Message tells the model why it was denied.
	Message string
	// Metadata is given to the approved call's tool as its
	// ToolCallMetadata (D23).
	Metadata json.RawMessage
}

// AnswerResult is the result of a frontend tool's call, in the forms a
// worker's result takes (D25): a value, or a return with content and
// metadata (wire.OutcomeReturn), a retry or a failure with a message.
type AnswerResult struct {
	Outcome  wire.Outcome
	Value    json.RawMessage
	Content  string
	Message  string
	Metadata json.RawMessage
}

// AnswerError says why an answer was not applied.
type AnswerError struct {
	ConversationID string
	ToolCallID     string
	Code           AnswerCode
	Reason         string
}

// AnswerCode classes the answers not applied.
type AnswerCode string

const (
	// AnswerDuplicate: the call already has its answer.
	AnswerDuplicate AnswerCode = "duplicate"
	// AnswerLate: the call was settled by its deadline or the
	// conversation's cancel; the answer is recorded as late.
	AnswerLate AnswerCode = "late"
	// AnswerNotIssued: the waiting run never made the call (another
	// conversation's, a forged id).
	AnswerNotIssued AnswerCode = "not_issued"
	// AnswerNotWaiting: the conversation waits for no answer.
	AnswerNotWaiting AnswerCode = "not_waiting"
	// AnswerRefused: the wrong kind, another args digest, a worker's call.
	AnswerRefused AnswerCode = "refused"
	// AnswerForbidden: the caller may not decide (approver keys are
	// trusted and the caller is no named user, or the tool's approvers do
	// not name it, or it is the run's caller approving its own call).
	AnswerForbidden AnswerCode = "forbidden"
	// AnswerElsewhere: this replica does not hold the config of the
	// conversation's agent that judges its decisions (policy.go); a
	// replica that does may take the answer.
	AnswerElsewhere AnswerCode = "elsewhere"
)

func (e *AnswerError) Error() string {
	return fmt.Sprintf("answer to %s not applied (%s): %s", e.ToolCallID, e.Code, e.Reason)
}

// answerSeq numbers the answers of this process, for the ids of their
// audit records.
var answerSeq atomic.Uint64

// Answer applies a to its call through the replies' own path (the group
// commit, applyReply): verdicts, refusals counted on the call, events,
// audit records and metrics are those of a reply from NATS, and the answer
// that completes its batch launches the follow-up run. It returns once the
// answer is stored, or an *AnswerError saying why it was not applied; a
// conversation that waits for no answer is refused too.
func (o *Orchestrator) Answer(ctx context.Context, a Answer) error {
	if o.stopped.Load() {
		return ErrStopped
	}
	if (a.Decision == nil) == (a.Result == nil) {
		return &BadRequestError{"an answer is a decision or a result"}
	}
	c, err := o.Conversation(ctx, a.ConversationID)
	if err != nil {
		return err
	}
	runID := answeredRun(c)
	if runID == "" {
		return &AnswerError{ConversationID: c.ID, ToolCallID: a.ToolCallID, Code: AnswerNotWaiting,
			Reason: fmt.Sprintf("conversation %s is %s and waits for no answer", c.ID, c.Status)}
	}
	in, err := o.incomingAnswer(c, runID, a)
	if err != nil {
		return err
	}
	// The client may go while the answer is recorded, with other replies
	// of its group: the record finishes regardless.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), replyTimeout)
	defer cancel()
	in.trace = telemetry.InjectMap(ctx)
	rp := o.pipe
	obs := replyObservation{kind: string(in.kind)}
	defer func() { rp.observer.reply(obs) }()
	j := &replyJob{in: in, done: make(chan struct{})}
	if err := rp.commits.record(ctx, c.ID, j); err != nil {
		obs.verdict = replyError
		return err
	}
	obs.tool = j.tool
	if j.err != nil {
		obs.verdict = replyError
		return j.err
	}
	obs.recorded(j)
	rp.auditAs(ctx, c.ID, "audit/http/"+o.cfg.InstanceID+"/"+strconv.FormatUint(answerSeq.Add(1), 10), 0, j)
	log := rp.replyLog(in, c.ID).With(slog.String("by", a.By))
	if j.v == conversation.VerdictApplied || j.v == conversation.VerdictCounted {
		log.DebugContext(ctx, "answer applied", slog.String("verdict", j.v.String()))
		return nil
	}
	log.WarnContext(ctx, "answer not applied", slog.String("verdict", j.v.String()), slog.String("reason", j.reason))
	code := AnswerRefused
	switch {
	case j.v == conversation.VerdictDuplicate:
		code = AnswerDuplicate
	case j.v == conversation.VerdictLate:
		code = AnswerLate
	case j.v == conversation.VerdictElsewhere:
		code = AnswerElsewhere
	case j.v == conversation.VerdictRefused && j.in.trustErr != nil && j.reason == j.in.trustErr.Error():
		code = AnswerForbidden
	case j.v == conversation.VerdictRefused && (c.Batch == nil || c.Batch.RunID != runID || c.Batch.Call(a.ToolCallID) == nil):
		code = AnswerNotIssued
	}
	return &AnswerError{ConversationID: c.ID, ToolCallID: a.ToolCallID, Code: code, Reason: j.reason}
}

// answeredRun is the run an answer to c is for: the run whose batch c
// holds, else the last run that paused, whose batch is over (an answer to
// it is then a repeat, or refused if the run never made the call, as a
// reply from NATS would be); "" when no run of c ever paused.
func answeredRun(c *conversation.State) string {
	if c.Batch != nil {
		return c.Batch.RunID
	}
	for i := len(c.Runs) - 1; i >= 0; i-- {
		if c.Runs[i].Status == conversation.StatusPaused {
			return c.Runs[i].RunID
		}
	}
	return ""
}

// incomingAnswer makes the reply a's answer would be, addressed to run
// runID of c.
func (o *Orchestrator) incomingAnswer(c *conversation.State, runID string, a Answer) (incoming, error) {
	now := o.clock().UTC()
	if d := a.Decision; d != nil {
		ag := o.roster.judge(c)
		if ag == nil {
			return incoming{}, &AnswerError{ConversationID: c.ID, ToolCallID: a.ToolCallID, Code: AnswerElsewhere,
				Reason: fmt.Sprintf("this replica does not hold agent %q with the conversation's config %s: answer through a replica that runs it", c.Agent, ShortDigest(c.AgentDigest))}
		}
		if ag.policy.signed() && !a.Identified {
			return incoming{}, &AnswerError{ConversationID: c.ID, ToolCallID: a.ToolCallID, Code: AnswerForbidden,
				Reason: "approver keys are trusted: a decision over HTTP needs a caller named by the API's users"}
		}
		dec := &wire.Decision{RunID: runID, ToolCallID: a.ToolCallID, ArgsDigest: d.ArgsDigest, Approved: d.Approved,
			OverrideArgs: d.OverrideArgs, Message: d.Message, ApproverID: a.By, DecidedAt: now}
		if err := dec.Validate(); err != nil {
			return incoming{}, &BadRequestError{err.Error()}
		}
		if err := checkObject("metadata", d.Metadata); err != nil {
			return incoming{}, err
		}
		if err := checkReplySize(bus.Reply{RunID: runID, Decision: dec}); err != nil {
			return incoming{}, &BadRequestError{err.Error()}
		}
		return incoming{runID: runID, callID: a.ToolCallID, kind: deferred.KindApproval, decision: dec, meta: d.Metadata,
			http: true, identified: a.Identified}, nil
	}
	r := a.Result
	res := &wire.CallReply{RunID: runID, ToolCallID: a.ToolCallID, Outcome: r.Outcome, Value: r.Value, Content: r.Content,
		Message: r.Message, Metadata: r.Metadata, WorkerID: a.By}
	if err := res.Validate(); err != nil {
		return incoming{}, &BadRequestError{err.Error()}
	}
	if pc := c.Batch.Call(a.ToolCallID); pc != nil && c.Batch.RunID == runID && pc.Kind == deferred.KindCall && pc.Executor != ExecutorFrontend {
		// A worker's call is a worker's to answer: the API's callers
		// answer only what a frontend is asked.
		return incoming{}, &AnswerError{ConversationID: c.ID, ToolCallID: a.ToolCallID, Code: AnswerRefused,
			Reason: fmt.Sprintf("call %s of tool %s is executed by workers, not by a frontend", a.ToolCallID, pc.ToolName)}
	}
	if wr, ok := res.WithinLimit(); !ok {
		return incoming{}, &BadRequestError{fmt.Sprintf("result: larger than %d bytes", wire.MaxReplyBytes)}
	} else {
		res = &wr
	}
	return incoming{runID: runID, callID: a.ToolCallID, kind: deferred.KindCall, result: res}, nil
}

func checkObject(field string, raw json.RawMessage) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return &BadRequestError{field + ": want a JSON object"}
	}
	return nil
}

// resultForm is the union of Pydantic AI's serialized result shapes (D34).
type resultForm struct {
	Kind        string          `json:"kind"`
	ReturnValue json.RawMessage `json:"return_value"`
	Content     json.RawMessage `json:"content"`
	Metadata    json.RawMessage `json:"metadata"`
	Message     json.RawMessage `json:"message"`
}

// ResultOf reads a frontend's result as an executor's output is read
// (README, "Writing an executor"): an object whose "kind" is
// "tool-return", "model-retry" or "tool-failed" is that Pydantic AI form,
// any other JSON value is the returned value.
func ResultOf(raw json.RawMessage) (*AnswerResult, error) {
	if len(raw) == 0 || !json.Valid(raw) {
		return nil, &BadRequestError{"result: want a JSON value"}
	}
	var f resultForm
	if raw[0] == '{' && json.Unmarshal(raw, &f) == nil {
		text := func(field string, v json.RawMessage) (string, error) {
			if len(v) == 0 || string(v) == "null" {
				return "", nil
			}
			var s string
			if err := json.Unmarshal(v, &s); err != nil {
				return "", &BadRequestError{"result." + field + ": want a string"}
			}
			return s, nil
		}
		switch f.Kind {
		case "tool-return":
			content, err := text("content", f.Content)
			if err != nil {
				return nil, err
			}
			r := &AnswerResult{Outcome: wire.OutcomeReturn, Value: f.ReturnValue, Content: content}
			if len(r.Value) == 0 {
				r.Value = json.RawMessage("null")
			}
			if len(f.Metadata) > 0 && string(f.Metadata) != "null" {
				r.Metadata = f.Metadata
			}
			return r, nil
		case "model-retry", "tool-failed":
			msg, err := text("message", f.Message)
			if err != nil {
				return nil, err
			}
			if msg == "" {
				return nil, &BadRequestError{"result.message: required for " + f.Kind}
			}
			r := &AnswerResult{Outcome: wire.OutcomeRetry, Message: msg}
			if f.Kind == "tool-failed" {
				r.Outcome = wire.OutcomeFailed
			}
			return r, nil
		}
	}
	return &AnswerResult{Outcome: wire.OutcomeReturn, Value: raw}, nil
}
