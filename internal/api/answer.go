package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/toolgate/toolgate/internal/deferred"
	"github.com/toolgate/toolgate/internal/orchestrator"
	"github.com/toolgate/toolgate/internal/web"
)

// answerRequest is the body of POST /v1/conversations/{id}/calls/{tool_call_id}:
// a decision on an approval call, or the result of a frontend tool's call.
type answerRequest struct {
	Decision *decisionBody `json:"decision,omitempty"`
	// Result is a value, or a Pydantic AI result form (tool-return,
	// model-retry, tool-failed), as an executor's output.
	Result json.RawMessage `json:"result,omitempty"`
}

type decisionBody struct {
	Approved *bool `json:"approved"`
	// Args are the args the decision was made on, as the call has them
	// (GET /v1/pending); ArgsDigest their digest. One is required: a
	// decision binds the args it approves.
	Args         json.RawMessage `json:"args,omitempty"`
	ArgsDigest   string          `json:"args_digest,omitempty"`
	OverrideArgs json.RawMessage `json:"override_args,omitempty"`
	Message      string          `json:"message,omitempty"`
	Metadata     json.RawMessage `json:"metadata,omitempty"`
}

// AnswerState is the answer to an applied answer.
type AnswerState struct {
	ConversationID string `json:"conversation_id"`
	ToolCallID     string `json:"tool_call_id"`
	Status         string `json:"status"`
	By             string `json:"by"`
}

// answer takes a decision or a frontend tool's result from the API's
// caller, who is recorded as its author.
func (h *api) answer(w http.ResponseWriter, r *http.Request) {
	id, callID := r.PathValue("id"), r.PathValue("tool_call_id")
	if !orchestrator.ValidID(id) {
		web.WriteError(w, http.StatusNotFound, fmt.Sprintf("conversation %q not found", id))
		return
	}
	var req answerRequest
	if !decodeBody(w, r, &req) {
		return
	}
	a, err := answerOf(req.Decision, req.Result)
	if err != nil {
		web.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	caller := CallerOf(r.Context())
	a.ConversationID, a.ToolCallID, a.By, a.Identified = id, callID, caller.Name, caller.User
	if err := h.o.Answer(r.Context(), a); err != nil {
		h.failAnswer(w, r, err)
		return
	}
	web.WriteJSON(w, http.StatusAccepted, AnswerState{ConversationID: id, ToolCallID: callID, Status: "applied", By: caller.Name})
}

// answerOf reads the answer of a request body: a decision, or a result.
func answerOf(d *decisionBody, result json.RawMessage) (orchestrator.Answer, error) {
	hasResult := len(result) > 0
	switch {
	case d == nil && !hasResult:
		return orchestrator.Answer{}, errors.New("body: want a decision or a result")
	case d != nil && hasResult:
		return orchestrator.Answer{}, errors.New("body: a decision or a result, not both")
	case hasResult:
		res, err := orchestrator.ResultOf(result)
		if err != nil {
			return orchestrator.Answer{}, err
		}
		return orchestrator.Answer{Result: res}, nil
	}
	if d.Approved == nil {
		return orchestrator.Answer{}, errors.New("decision.approved: required")
	}
	digest := d.ArgsDigest
	if len(d.Args) > 0 {
		sum, err := deferred.ArgsDigest(d.Args)
		if err != nil {
			return orchestrator.Answer{}, fmt.Errorf("decision.args: %w", err)
		}
		if digest != "" && digest != sum {
			return orchestrator.Answer{}, errors.New("decision.args_digest: not the digest of decision.args")
		}
		digest = sum
	}
	if digest == "" {
		return orchestrator.Answer{}, errors.New("decision: args or args_digest required: a decision binds the args it was made on")
	}
	if !*d.Approved && len(d.OverrideArgs) > 0 {
		return orchestrator.Answer{}, errors.New("decision.override_args: only an approval changes args")
	}
	return orchestrator.Answer{Decision: &orchestrator.AnswerDecision{
		Approved: *d.Approved, ArgsDigest: digest, OverrideArgs: d.OverrideArgs, Message: d.Message, Metadata: d.Metadata,
	}}, nil
}

// failAnswer maps an answer's refusal to a status: 409 for a call already
// answered, settled by its deadline or a conversation waiting for nothing,
// 404 for a call never issued, 403 for a caller who may not decide, 422
// for the rest (wrong kind, another args digest, a worker's call).
func (h *api) failAnswer(w http.ResponseWriter, r *http.Request, err error) {
	var ae *orchestrator.AnswerError
	if !errors.As(err, &ae) {
		h.fail(w, r, err)
		return
	}
	status := http.StatusUnprocessableEntity
	switch ae.Code {
	case orchestrator.AnswerDuplicate, orchestrator.AnswerLate, orchestrator.AnswerNotWaiting:
		status = http.StatusConflict
	case orchestrator.AnswerNotIssued:
		status = http.StatusNotFound
	case orchestrator.AnswerForbidden:
		status = http.StatusForbidden
	}
	web.WriteError(w, status, ae.Error())
}
