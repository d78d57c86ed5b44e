package inbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/toolgate/toolgate/approval"
	"github.com/toolgate/toolgate/internal/approver"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/web"
	"github.com/toolgate/toolgate/wire"
)

// Scope is what a grant given from a card covers besides its tool: each
// field set narrows it to the card's conversation, args or caller; none
// set covers every later call of the tool.
type Scope struct {
	Conversation bool
	Args         bool
	Caller       bool
	// For is how long it stands; 0 until it is revoked.
	For time.Duration
}

// ErrNoCallerID refuses a grant for the caller of a run whose caller
// object has no "id" (grants match callers by it).
var ErrNoCallerID = errors.New("the run's caller has no id")

// AlwaysAllow approves the held request of runID/toolCallID, as Decide,
// and gives first a grant, signed with the inbox's key like its
// decisions, that approves the later calls of its tool in scope without
// asking anyone (approval.GiveGrant: the orchestrator applies it when a run
// pauses). The grant is returned with the decision; when the grant could
// not be given nothing is decided. A call this approver may not decide is
// an *approver.NotAdmittedError, and no grant is given.
func (in *Inbox) AlwaysAllow(ctx context.Context, runID, toolCallID string, s Scope) (wire.Grant, wire.Decision, error) {
	key := keyOf(runID, toolCallID)
	e, ok := in.store.get(key)
	if !ok {
		return wire.Grant{}, wire.Decision{}, in.notHeld("grant", key)
	}
	if err := approver.Admit(e.req, in.cfg.ID, true); err != nil {
		in.cfg.Metrics.Handled(in.cfg.ID, "refused")
		return wire.Grant{}, wire.Decision{}, err
	}
	now := in.cfg.Clock()
	g := wire.Grant{Tool: e.req.ToolName, Approved: true, GrantedBy: in.cfg.ID, GrantedAt: now}
	if s.Conversation {
		g.ConversationID = e.req.ConversationID
	}
	if s.Args {
		g.ArgsDigest = e.req.ArgsDigest
	}
	if s.Caller {
		if g.Caller = callerID(e.req.Caller); g.Caller == "" {
			return wire.Grant{}, wire.Decision{}, fmt.Errorf("grant %s: %w", key, ErrNoCallerID)
		}
	}
	if s.For > 0 {
		g.ExpiresAt = now.Add(s.For)
	}
	g, err := approval.GiveGrant(ctx, in.cfg.Bus.Conn(), g, in.cfg.Key)
	if err != nil {
		return wire.Grant{}, wire.Decision{}, fmt.Errorf("grant %s: %w", key, err)
	}
	in.log.InfoContext(ctx, "grant given", slog.String("grant_id", g.ID), slog.String("tool", g.Tool),
		slog.String("conversation_id", g.ConversationID), slog.String("args_digest", g.ArgsDigest),
		slog.String("caller", g.Caller), slog.Time("expires_at", g.ExpiresAt), slog.Bool("signed", g.Signature != nil))
	d, err := in.Decide(ctx, runID, toolCallID, approver.Choice{Approve: true})
	return g, d, err
}

// callerID is the "id" of a run's caller object, which a grant's caller
// scope names; "" when it has none.
func callerID(caller json.RawMessage) string {
	var v struct {
		ID string `json:"id"`
	}
	if len(caller) == 0 || json.Unmarshal(caller, &v) != nil {
		return ""
	}
	return v.ID
}

// StoredGrant is a grant of the grants bucket as the inbox lists it.
type StoredGrant struct {
	wire.Grant
	// Source is where it was given: wire.GrantKeyBus (by an approver, as
	// the inbox does) or wire.GrantKeyAPI (over the orchestrator's API).
	Source string `json:"source"`
	// Expired says it no longer applies.
	Expired bool `json:"expired,omitempty"`
	// Ignored says why the orchestrator does not apply it (unsigned, or
	// signed by a key it does not trust), when the inbox has its API
	// (Config.Orchestrator) to ask.
	Ignored string `json:"ignored,omitempty"`
}

// Grants lists the grants stored, oldest first, each with why the
// orchestrator ignores it when its API says so. One that does not decode
// is left out.
func (in *Inbox) Grants(ctx context.Context) ([]StoredGrant, error) {
	kv, err := in.cfg.Bus.Grants(ctx)
	if err != nil {
		return nil, fmt.Errorf("grants: %w", err)
	}
	entries, err := kv.List(ctx, "", true)
	if err != nil {
		return nil, fmt.Errorf("grants: %w", err)
	}
	now := in.cfg.Clock()
	out := make([]StoredGrant, 0, len(entries))
	for _, e := range entries {
		if e.Op != bus.OpPut {
			continue
		}
		var g wire.Grant
		if err := json.Unmarshal(e.Value, &g); err != nil {
			in.log.WarnContext(ctx, "grant not listed", slog.String("key", e.Key), slog.Any("error", err))
			continue
		}
		source, _, _ := strings.Cut(e.Key, ".")
		out = append(out, StoredGrant{Grant: g, Source: source, Expired: !g.Live(now)})
	}
	slices.SortFunc(out, func(a, b StoredGrant) int { return a.GrantedAt.Compare(b.GrantedAt) })
	if in.cfg.Orchestrator != nil && len(out) > 0 {
		judged, err := in.cfg.Orchestrator.Grants(ctx)
		if err != nil {
			in.log.WarnContext(ctx, "ask the orchestrator which grants it applies", slog.Any("error", err))
			return out, nil
		}
		ignored := make(map[string]string, len(judged))
		for _, g := range judged {
			ignored[g.Source+"."+g.ID] = g.Ignored
		}
		for i := range out {
			out[i].Ignored = ignored[out[i].Source+"."+out[i].ID]
		}
	}
	return out, nil
}

// ErrGrantElsewhere refuses to revoke a grant given over the
// orchestrator's API when the inbox has no orchestrator to ask: only the
// orchestrator writes those.
var ErrGrantElsewhere = errors.New("given over the orchestrator's API: revoke it there (or give the inbox --orchestrator)")

// RevokeGrant deletes grant id: later calls are asked about again. A grant
// given over the orchestrator's API is revoked through it (Orchestrator).
func (in *Inbox) RevokeGrant(ctx context.Context, id string) error {
	err := approval.RevokeGrant(ctx, in.cfg.Bus.Conn(), id)
	if errors.Is(err, bus.ErrGrantNotFound) {
		kv, kerr := in.cfg.Bus.Grants(ctx)
		if kerr != nil {
			return fmt.Errorf("revoke grant %s: %w", id, kerr)
		}
		if _, gerr := kv.Get(ctx, wire.GrantKeyAPI+"."+id); gerr == nil {
			if in.cfg.Orchestrator == nil {
				return fmt.Errorf("revoke grant %s: %w", id, ErrGrantElsewhere)
			}
			err = in.cfg.Orchestrator.RevokeGrant(ctx, id)
		}
	}
	if err != nil {
		return fmt.Errorf("revoke grant %s: %w", id, err)
	}
	in.log.InfoContext(ctx, "grant revoked", slog.String("grant_id", id))
	return nil
}

// grantBody is the body of POST /api/grants: approve the request and let
// later calls of its tool in the scope go out without asking. For is a
// duration ("8h"); empty stands until revoked.
type grantBody struct {
	RunID        string `json:"run_id"`
	ToolCallID   string `json:"tool_call_id"`
	Conversation bool   `json:"conversation,omitempty"`
	Args         bool   `json:"args,omitempty"`
	Caller       bool   `json:"caller,omitempty"`
	For          string `json:"for,omitempty"`
}

func (in *Inbox) apiGrant(w http.ResponseWriter, r *http.Request) {
	if !web.RequireJSON(w, r) {
		return
	}
	var body grantBody
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		web.WriteError(w, http.StatusBadRequest, "body: "+strings.TrimPrefix(err.Error(), "json: "))
		return
	}
	if body.RunID == "" || body.ToolCallID == "" {
		web.WriteError(w, http.StatusBadRequest, "run_id and tool_call_id are required")
		return
	}
	s := Scope{Conversation: body.Conversation, Args: body.Args, Caller: body.Caller}
	if body.For != "" {
		d, err := time.ParseDuration(body.For)
		if err != nil || d <= 0 {
			web.WriteError(w, http.StatusBadRequest, fmt.Sprintf("for: %q is not a positive duration", body.For))
			return
		}
		s.For = d
	}
	g, d, err := in.AlwaysAllow(r.Context(), body.RunID, body.ToolCallID, s)
	var notAdmitted *approver.NotAdmittedError
	var refused *approver.RefusedError
	switch {
	case err == nil, errors.Is(err, approver.ErrNoOutcome):
		web.WriteJSON(w, http.StatusOK, map[string]any{"grant": g, "decision": decideAnswer{
			Approved: d.Approved, ApproverID: d.ApproverID, DecidedAt: d.DecidedAt, Signed: d.Signature != nil,
			Pending: err != nil}})
		return
	case g.ID != "":
		// The grant stands; the approval of this call did not go.
		web.WriteJSON(w, http.StatusConflict, map[string]any{"grant": g, "error": "grant given, but this call was not approved: " + err.Error()})
	case errors.As(err, &notAdmitted):
		web.WriteError(w, http.StatusForbidden, notAdmitted.Error())
	case errors.As(err, &refused), errors.Is(err, ErrNotPending), errors.Is(err, ErrNoCallerID):
		web.WriteError(w, http.StatusConflict, err.Error())
	default:
		in.log.ErrorContext(r.Context(), "grant", slog.Any("error", err))
		web.WriteError(w, http.StatusBadGateway, err.Error())
	}
}

func (in *Inbox) apiGrants(w http.ResponseWriter, r *http.Request) {
	gs, err := in.Grants(r.Context())
	if err != nil {
		web.WriteError(w, http.StatusBadGateway, err.Error())
		return
	}
	web.WriteJSON(w, http.StatusOK, map[string]any{"grants": gs})
}

func (in *Inbox) apiRevokeGrant(w http.ResponseWriter, r *http.Request) {
	err := in.RevokeGrant(r.Context(), r.PathValue("id"))
	switch {
	case err == nil:
		w.WriteHeader(http.StatusNoContent)
	case errors.Is(err, bus.ErrGrantNotFound):
		web.WriteError(w, http.StatusNotFound, err.Error())
	case errors.Is(err, ErrGrantElsewhere):
		web.WriteError(w, http.StatusConflict, err.Error())
	default:
		web.WriteError(w, http.StatusBadGateway, err.Error())
	}
}
