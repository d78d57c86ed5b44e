package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/toolgate/toolgate/internal/deferred"
	"github.com/toolgate/toolgate/internal/orchestrator"
	"github.com/toolgate/toolgate/internal/web"
)

// GrantEngine is what the grant endpoints need of the engine: an Engine
// without them answers 501 there.
type GrantEngine interface {
	Grant(ctx context.Context, r orchestrator.GrantRequest) (orchestrator.Grant, error)
	Grants(ctx context.Context) ([]orchestrator.StoredGrant, error)
	RevokeGrant(ctx context.Context, id string) error
}

// grantBody is the body of POST /v1/grants: a standing decision on the
// calls of tool, narrowed by the optional scope fields.
type grantBody struct {
	Tool     string `json:"tool"`
	Approved *bool  `json:"approved"`
	// ConversationID, Args (or ArgsDigest) and Caller narrow it to one
	// conversation, calls with exactly these args, runs of this caller
	// (the "id" of its caller object).
	ConversationID string          `json:"conversation_id,omitempty"`
	Args           json.RawMessage `json:"args,omitempty"`
	ArgsDigest     string          `json:"args_digest,omitempty"`
	Caller         string          `json:"caller,omitempty"`
	// Message is what the model is told of a standing denial.
	Message string `json:"message,omitempty"`
	// ExpiresAt (RFC 3339) or TTL (a Go duration, "8h") ends it.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	TTL       string     `json:"ttl,omitempty"`
}

// GrantList is the answer to GET /v1/grants.
type GrantList struct {
	Grants []orchestrator.StoredGrant `json:"grants"`
}

// grantRoutes adds the grant endpoints to mux and their methods to
// allowed:
//
//	POST   /v1/grants        give a standing decision (201, the grant)
//	GET    /v1/grants        every grant stored, each saying whether it applies
//	DELETE /v1/grants/{id}   revoke one (200 {"id","status":"revoked"}; 404 when there is none)
func (h *api) grantRoutes(mux *routeMux, allowed map[string]string) {
	mux.HandleFunc("POST /v1/grants", h.giveGrant)
	mux.HandleFunc("GET /v1/grants", h.listGrants)
	mux.HandleFunc("DELETE /v1/grants/{id}", h.revokeGrant)
	allowed["/v1/grants"] = "GET, POST"
	allowed["/v1/grants/{id}"] = "DELETE"
}

func (h *api) grantEngine(w http.ResponseWriter) (GrantEngine, bool) {
	g, ok := h.o.(GrantEngine)
	if !ok {
		web.WriteError(w, http.StatusNotImplemented, "this engine keeps no grants")
	}
	return g, ok
}

// giveGrant stores a standing decision from the API's caller, who is
// recorded as its giver.
func (h *api) giveGrant(w http.ResponseWriter, r *http.Request) {
	ge, ok := h.grantEngine(w)
	if !ok {
		return
	}
	var body grantBody
	if !decodeBody(w, r, &body) {
		return
	}
	req, err := grantRequestOf(body, time.Now())
	if err != nil {
		web.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	caller := CallerOf(r.Context())
	req.By, req.Identified = caller.Name, caller.User
	g, err := ge.Grant(r.Context(), req)
	if errors.Is(err, orchestrator.ErrGrantForbidden) {
		web.WriteError(w, http.StatusForbidden, err.Error())
		return
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	web.WriteJSON(w, http.StatusCreated, g)
}

func grantRequestOf(b grantBody, now time.Time) (orchestrator.GrantRequest, error) {
	req := orchestrator.GrantRequest{Tool: b.Tool, ConversationID: b.ConversationID, ArgsDigest: b.ArgsDigest,
		Caller: b.Caller, Message: b.Message}
	if b.Approved == nil {
		return req, fmt.Errorf("approved: required (true approves, false is a standing denial)")
	}
	req.Approved = *b.Approved
	if len(b.Args) > 0 {
		if b.ArgsDigest != "" {
			return req, fmt.Errorf("args and args_digest: give one")
		}
		d, err := deferred.ArgsDigest(b.Args)
		if err != nil {
			return req, fmt.Errorf("args: %w", err)
		}
		req.ArgsDigest = d
	}
	switch {
	case b.ExpiresAt != nil && b.TTL != "":
		return req, fmt.Errorf("expires_at and ttl: give one")
	case b.ExpiresAt != nil:
		req.ExpiresAt = *b.ExpiresAt
	case b.TTL != "":
		d, err := time.ParseDuration(b.TTL)
		if err != nil || d <= 0 {
			return req, fmt.Errorf("ttl: want a positive duration such as 8h")
		}
		req.ExpiresAt = now.Add(d)
	}
	return req, nil
}

func (h *api) listGrants(w http.ResponseWriter, r *http.Request) {
	ge, ok := h.grantEngine(w)
	if !ok {
		return
	}
	gs, err := ge.Grants(r.Context())
	if err != nil {
		h.fail(w, r, err)
		return
	}
	web.WriteJSON(w, http.StatusOK, GrantList{Grants: gs})
}

func (h *api) revokeGrant(w http.ResponseWriter, r *http.Request) {
	ge, ok := h.grantEngine(w)
	if !ok {
		return
	}
	if err := ge.RevokeGrant(r.Context(), r.PathValue("id")); err != nil {
		h.fail(w, r, err)
		return
	}
	web.WriteJSON(w, http.StatusOK, map[string]string{"id": r.PathValue("id"), "status": "revoked"})
}
