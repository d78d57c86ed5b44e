// Package api is the orchestrator's HTTP API: starting runs, reading
// conversations and runs, their events as Server-Sent Events, the pending
// calls, cancel and delete, health and metrics. It speaks to the engine only
// through its public methods (Engine), so the engine holds no HTTP.
package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"

	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/orchestrator"
	"github.com/toolgate/toolgate/internal/web"
	"github.com/toolgate/toolgate/wire"
)

// maxBodyBytes bounds a request body: a prompt, not a file upload.
const maxBodyBytes = 1 << 20

// MaxPromptBytes bounds a prompt. The conversation does not: it is a log
// of records, each holding what one change changed, and a record over
// NATS's max payload is stored as an atomic batch of parts
// (docs/architecture.md), so the prompt's two copies (its run record, then
// the history) cost only their size. What carries the prompt whole in one
// message is the run's run_started event, JSON-escaped: the orchestrator
// refuses a prompt whose escaped form would not fit it (ordinary text
// grows at most twice; <, >, & and control characters take six bytes).
const MaxPromptBytes = 256 << 10

// Engine is what the API needs of the orchestrator (*orchestrator.Orchestrator).
type Engine interface {
	StartRunWith(ctx context.Context, req orchestrator.StartRequest) (orchestrator.RunInfo, error)
	Run(ctx context.Context, runID string) (orchestrator.RunInfo, error)
	Conversation(ctx context.Context, id string) (*conversation.State, error)
	Conversations(ctx context.Context, req orchestrator.ListRequest) (orchestrator.ConversationList, error)
	Cancel(ctx context.Context, id string) (*conversation.State, error)
	Answer(ctx context.Context, a orchestrator.Answer) error
	Delete(ctx context.Context, id string) error
	DeleteCorrupt(ctx context.Context, id string) error
	Pending(ctx context.Context) ([]wire.PendingCall, error)
	Events(ctx context.Context, id string, afterSeq uint64) iter.Seq2[orchestrator.StoredEvent, error]
	Health(ctx context.Context) error
	InstanceID() string
}

// Config configures the HTTP API.
type Config struct {
	// Token, when set, is the bearer token every request but /healthz must
	// carry. Empty: no authentication (bind to loopback only).
	Token string
	// Users, when set, are callers each named by a token of their own
	// (LoadUsers): a decision one of them gives over the API records the
	// name. Config.Token, if also set, is still accepted.
	Users []User
	// Logger receives request errors. nil discards them.
	Logger *slog.Logger
	// Metrics, when set, is served at GET /metrics (telemetry.Handler of
	// the registry the orchestrator's metrics are on). Like the API it
	// requires the token when one is set: a scraper sends it as a bearer
	// token (Prometheus: authorization.credentials_file).
	Metrics http.Handler
	// Routes are more handlers behind the API's authentication, by
	// pattern ("POST /v1/agui"): the chat adapters, which read the caller
	// with CallerOf.
	Routes map[string]http.Handler
}

// Handler returns the HTTP API:
//
//	POST /v1/runs                          start a run (Idempotency-Key: safe to retry)
//	GET  /v1/runs/{run_id}                 a run's status
//	GET  /v1/conversations                 a page of conversations (?status=&limit=&cursor=)
//	GET  /v1/conversations/{id}            a conversation: status, output, runs, pending calls, messages
//	DELETE /v1/conversations/{id}          delete a finished one (204; 409 while under way)
//	                                       ?corrupt=true: one that cannot be read (204; 409 if it can)
//	GET  /v1/conversations/{id}/events     its events as Server-Sent Events
//	POST /v1/conversations/{id}/cancel     cancel it (202; 409 when finished)
//	POST /v1/conversations/{id}/calls/{tool_call_id}  answer a pending call: a decision, or a frontend tool's result (202)
//	GET  /v1/pending                       every pending deferred call
//	GET  /v1/dlq                           dead letters, newest first (ops.go)
//	GET  /v1/audit                         audit records, newest first (ops.go)
//	POST, GET /v1/grants; DELETE /v1/grants/{id}  standing decisions (grants.go)
//	GET  /metrics                          Prometheus metrics (when cfg.Metrics is set)
//	GET  /healthz                          liveness
//
// docs/openapi.yaml documents them, with the chat routes site mounts; the
// package's tests hold it to Patterns and to a live server's answers.
func Handler(e Engine, cfg Config) http.Handler {
	h, mux := routes(e, cfg)
	return h.authenticate(mux)
}

// Patterns lists the patterns Handler(_, cfg) registers, in no order: each
// route ("GET /v1/pending"), each path's fallback answering 405 to the
// other methods ("/v1/pending"), and "/", which answers 404. The OpenAPI
// document (docs/openapi.yaml) is checked against them.
func Patterns(cfg Config) []string {
	_, mux := routes(nil, cfg)
	return mux.patterns
}

func routes(e Engine, cfg Config) (*api, *routeMux) {
	h := &api{o: e, token: cfg.Token, users: cfg.Users, log: cfg.Logger}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	mux := &routeMux{ServeMux: http.NewServeMux()}
	mux.HandleFunc("POST /v1/runs", h.startRun)
	mux.HandleFunc("GET /v1/runs/{run_id}", h.getRun)
	mux.HandleFunc("GET /v1/conversations", h.listConversations)
	mux.HandleFunc("GET /v1/conversations/{id}", h.getConversation)
	mux.HandleFunc("DELETE /v1/conversations/{id}", h.deleteConversation)
	mux.HandleFunc("GET /v1/conversations/{id}/events", h.events)
	mux.HandleFunc("POST /v1/conversations/{id}/cancel", h.cancel)
	mux.HandleFunc("POST /v1/conversations/{id}/calls/{tool_call_id}", h.answer)
	mux.HandleFunc("GET /v1/pending", h.pending)
	mux.HandleFunc("GET /v1/dlq", h.deadLetters)
	mux.HandleFunc("GET /v1/audit", h.auditRecords)
	mux.HandleFunc("GET /healthz", h.healthz)
	allowed := map[string]string{
		"/v1/runs": "POST", "/v1/runs/{run_id}": "GET", "/v1/conversations": "GET", "/v1/conversations/{id}": "GET, DELETE",
		"/v1/conversations/{id}/events": "GET", "/v1/conversations/{id}/cancel": "POST",
		"/v1/conversations/{id}/calls/{tool_call_id}": "POST",
		"/v1/pending": "GET", "/healthz": "GET",
		"/v1/dlq": "GET", "/v1/audit": "GET",
	}
	h.grantRoutes(mux, allowed)
	if cfg.Metrics != nil {
		mux.Handle("GET /metrics", cfg.Metrics)
		allowed["/metrics"] = "GET"
	}
	for pattern, route := range cfg.Routes {
		mux.Handle(pattern, route)
	}
	for path, allow := range allowed {
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", allow)
			web.WriteError(w, http.StatusMethodNotAllowed, fmt.Sprintf("method %s not allowed on %s; use %s", r.Method, r.URL.Path, allow))
		})
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		web.WriteError(w, http.StatusNotFound, fmt.Sprintf("no such endpoint: %s %s", r.Method, r.URL.Path))
	})
	return h, mux
}

type api struct {
	o     Engine
	token string
	users []User
	log   *slog.Logger
}

type startRunRequest struct {
	Prompt         string          `json:"prompt"`
	ConversationID string          `json:"conversation_id,omitempty"`
	Agent          string          `json:"agent,omitempty"`
	Caller         json.RawMessage `json:"caller,omitempty"`

	// NewConversationID is the id the client chooses for a new
	// conversation (orchestrator.StartRequest).
	NewConversationID string `json:"new_conversation_id,omitempty"`
}

func (h *api) startRun(w http.ResponseWriter, r *http.Request) {
	var req startRunRequest
	if !decodeBody(w, r, &req) {
		return
	}
	if strings.TrimSpace(req.Prompt) == "" {
		web.WriteError(w, http.StatusBadRequest, "prompt: required")
		return
	}
	if len(req.Prompt) > MaxPromptBytes {
		web.WriteError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("prompt: larger than %d bytes", MaxPromptBytes))
		return
	}
	if req.ConversationID != "" && !orchestrator.ValidID(req.ConversationID) {
		web.WriteError(w, http.StatusBadRequest, fmt.Sprintf("conversation_id: %q is not a valid id", req.ConversationID))
		return
	}
	key := r.Header.Get("Idempotency-Key")
	if err := checkIdempotencyKey(key); err != nil {
		web.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	info, err := h.o.StartRunWith(r.Context(), orchestrator.StartRequest{Prompt: req.Prompt, ConversationID: req.ConversationID, NewConversationID: req.NewConversationID, IdempotencyKey: key, Agent: req.Agent, Caller: req.Caller})
	if err != nil {
		h.fail(w, r, err)
		return
	}
	web.WriteJSON(w, http.StatusAccepted, info)
}

// maxIdempotencyKey bounds the Idempotency-Key header; a UUID or a hash
// fits many times over.
const maxIdempotencyKey = 255

func checkIdempotencyKey(key string) error {
	if len(key) > maxIdempotencyKey {
		return fmt.Errorf("Idempotency-Key: longer than %d bytes", maxIdempotencyKey)
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x21 || key[i] > 0x7e {
			return fmt.Errorf("Idempotency-Key: byte %d is not printable ASCII", i)
		}
	}
	return nil
}

func (h *api) getRun(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("run_id")
	if !orchestrator.ValidID(id) {
		web.WriteError(w, http.StatusNotFound, fmt.Sprintf("run %q not found", id))
		return
	}
	info, err := h.o.Run(r.Context(), id)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	web.WriteJSON(w, http.StatusOK, info)
}

func (h *api) getConversation(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !orchestrator.ValidID(id) {
		web.WriteError(w, http.StatusNotFound, fmt.Sprintf("conversation %q not found", id))
		return
	}
	c, err := h.o.Conversation(r.Context(), id)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	web.WriteJSON(w, http.StatusOK, viewOf(c))
}

func (h *api) listConversations(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	req := orchestrator.ListRequest{Status: conversation.Status(q.Get("status")), Cursor: q.Get("cursor")}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			web.WriteError(w, http.StatusBadRequest, fmt.Sprintf("limit: %q is not a number between 1 and %d", s, orchestrator.MaxListLimit))
			return
		}
		req.Limit = n
	}
	list, err := h.o.Conversations(r.Context(), req)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	web.WriteJSON(w, http.StatusOK, list)
}

func (h *api) deleteConversation(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !orchestrator.ValidID(id) {
		web.WriteError(w, http.StatusNotFound, fmt.Sprintf("conversation %q not found", id))
		return
	}
	del := h.o.Delete
	switch c := r.URL.Query().Get("corrupt"); c {
	case "", "false":
	case "true":
		del = h.o.DeleteCorrupt
	default:
		web.WriteError(w, http.StatusBadRequest, fmt.Sprintf("corrupt: %q is not true or false", c))
		return
	}
	if err := del(r.Context(), id); err != nil {
		h.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// ConversationState is the short answer about a conversation.
type ConversationState struct {
	ConversationID string              `json:"conversation_id"`
	Status         conversation.Status `json:"status"`
}

func (h *api) cancel(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !orchestrator.ValidID(id) {
		web.WriteError(w, http.StatusNotFound, fmt.Sprintf("conversation %q not found", id))
		return
	}
	c, err := h.o.Cancel(r.Context(), id)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	web.WriteJSON(w, http.StatusAccepted, ConversationState{ConversationID: c.ID, Status: c.Status})
}

func (h *api) pending(w http.ResponseWriter, r *http.Request) {
	p, err := h.o.Pending(r.Context())
	if err != nil {
		h.fail(w, r, err)
		return
	}
	web.WriteJSON(w, http.StatusOK, map[string]any{"pending": p})
}

func (h *api) healthz(w http.ResponseWriter, r *http.Request) {
	if err := h.o.Health(r.Context()); err != nil {
		web.WriteError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	// The process id and instance tell a script which orchestrator answers
	// on a port (scripts/run.sh: its own, not another one left running).
	web.WriteJSON(w, http.StatusOK, map[string]any{"status": "ok", "pid": os.Getpid(), "instance": h.o.InstanceID()})
}

// fail maps an orchestrator error to a status.
func (h *api) fail(w http.ResponseWriter, r *http.Request, err error) {
	if h.clientLeft(r, err) {
		return
	}
	var (
		conflict *conversation.ConflictError
		bad      *orchestrator.BadRequestError
		reused   *orchestrator.IdempotencyError
		corrupt  *orchestrator.CorruptError
		unknown  *orchestrator.UnknownAgentError
		mismatch *orchestrator.AgentMismatchError
	)
	switch {
	case errors.Is(err, orchestrator.ErrNotFound):
		web.WriteError(w, http.StatusNotFound, err.Error())
	case errors.As(err, &unknown):
		web.WriteError(w, http.StatusBadRequest, err.Error())
	case errors.As(err, &mismatch):
		web.WriteError(w, http.StatusConflict, err.Error())
	case errors.As(err, &bad):
		web.WriteError(w, http.StatusBadRequest, err.Error())
	case errors.As(err, &conflict):
		web.WriteError(w, http.StatusConflict, err.Error())
	case errors.As(err, &reused):
		web.WriteError(w, http.StatusUnprocessableEntity, err.Error())
	case errors.Is(err, orchestrator.ErrStopped):
		web.WriteError(w, http.StatusServiceUnavailable, err.Error())
	case orchestrator.StorageFull(err):
		w.Header().Set("Retry-After", "30")
		web.WriteError(w, http.StatusServiceUnavailable, "storage full: the NATS server has no room for it ("+err.Error()+"); free disk space or raise the server's JetStream max_file_store, then retry")
	case errors.As(err, &corrupt):
		// Not the client's fault, and not to be hidden behind "internal
		// error": the operator repairs or deletes the conversation.
		h.log.ErrorContext(r.Context(), "corrupt conversation", slog.String("conversation_id", corrupt.ConversationID),
			slog.Uint64("record", corrupt.Sequence), slog.String("error", corrupt.Err.Error()))
		web.WriteError(w, http.StatusInternalServerError, err.Error()+"; once what can be saved is saved, DELETE /v1/conversations/"+corrupt.ConversationID+"?corrupt=true removes it")
	default:
		h.log.ErrorContext(r.Context(), "http request", slog.String("method", r.Method),
			slog.String("path", r.URL.Path), slog.String("error", err.Error()))
		web.WriteError(w, http.StatusInternalServerError, "internal error")
	}
}

// decodeBody reads one JSON object with no unknown fields; on failure it has
// answered the request. The body must say it is JSON (415 otherwise): a
// web page can make a browser send a text/plain or form POST to a
// tokenless API on loopback without asking, but not a JSON one.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	if !web.RequireJSON(w, r) {
		return false
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &mbe):
			web.WriteError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body larger than %d bytes", mbe.Limit))
		case errors.Is(err, io.EOF):
			web.WriteError(w, http.StatusBadRequest, "body: empty, want a JSON object")
		case errors.As(err, &se):
			web.WriteError(w, http.StatusBadRequest, fmt.Sprintf("body: invalid JSON at offset %d", se.Offset))
		case errors.As(err, &te) && te.Field != "":
			web.WriteError(w, http.StatusBadRequest, fmt.Sprintf("%s: want %s", te.Field, te.Type))
		case errors.As(err, &te):
			web.WriteError(w, http.StatusBadRequest, "body: want a JSON object")
		default:
			web.WriteError(w, http.StatusBadRequest, "body: "+strings.TrimPrefix(err.Error(), "json: "))
		}
		return false
	}
	if dec.More() {
		web.WriteError(w, http.StatusBadRequest, "body: trailing data after the JSON object")
		return false
	}
	return true
}
