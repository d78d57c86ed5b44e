package orchestrator

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"

	"github.com/toolgate/toolgate/internal/web"
	"github.com/toolgate/toolgate/wire"
)

// maxBodyBytes bounds a request body: a prompt, not a file upload.
const maxBodyBytes = 1 << 20

// MaxPromptBytes bounds a prompt. A conversation is stored as one KV value,
// which must fit NATS's max payload (1 MiB by default) with the prompt in
// it twice (the run record and the history) besides everything else.
const MaxPromptBytes = 256 << 10

// HandlerConfig configures the HTTP API.
type HandlerConfig struct {
	// Token, when set, is the bearer token every request but /healthz must
	// carry. Empty: no authentication (bind to loopback only).
	Token string
	// Logger receives request errors. nil discards them.
	Logger *slog.Logger
	// Metrics, when set, is served at GET /metrics (telemetry.Handler of
	// the registry the orchestrator's metrics are on). Like the API it
	// requires the token when one is set: a scraper sends it as a bearer
	// token (Prometheus: authorization.credentials_file).
	Metrics http.Handler
}

// Handler returns the HTTP API:
//
//	POST /v1/runs                          start a run (Idempotency-Key: safe to retry)
//	GET  /v1/runs/{run_id}                 a run's status
//	GET  /v1/conversations                 a page of conversations (?status=&limit=&cursor=)
//	GET  /v1/conversations/{id}            a conversation: status, output, runs, pending calls, messages
//	DELETE /v1/conversations/{id}          delete a finished one (204; 409 while under way)
//	GET  /v1/conversations/{id}/events     its events as Server-Sent Events
//	POST /v1/conversations/{id}/cancel     cancel it (202; 409 when finished)
//	GET  /v1/pending                       every pending deferred call
//	GET  /metrics                          Prometheus metrics (when cfg.Metrics is set)
//	GET  /healthz                          liveness
func (o *Orchestrator) Handler(cfg HandlerConfig) http.Handler {
	h := &api{o: o, token: cfg.Token, log: cfg.Logger}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/runs", h.startRun)
	mux.HandleFunc("GET /v1/runs/{run_id}", h.getRun)
	mux.HandleFunc("GET /v1/conversations", h.listConversations)
	mux.HandleFunc("GET /v1/conversations/{id}", h.getConversation)
	mux.HandleFunc("DELETE /v1/conversations/{id}", h.deleteConversation)
	mux.HandleFunc("GET /v1/conversations/{id}/events", h.events)
	mux.HandleFunc("POST /v1/conversations/{id}/cancel", h.cancel)
	mux.HandleFunc("GET /v1/pending", h.pending)
	mux.HandleFunc("GET /healthz", h.healthz)
	allowed := map[string]string{
		"/v1/runs": "POST", "/v1/runs/{run_id}": "GET", "/v1/conversations": "GET", "/v1/conversations/{id}": "GET, DELETE",
		"/v1/conversations/{id}/events": "GET", "/v1/conversations/{id}/cancel": "POST",
		"/v1/pending": "GET", "/healthz": "GET",
	}
	if cfg.Metrics != nil {
		mux.Handle("GET /metrics", cfg.Metrics)
		allowed["/metrics"] = "GET"
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
	return h.auth(mux)
}

type api struct {
	o     *Orchestrator
	token string
	log   *slog.Logger
}

func (h *api) auth(next http.Handler) http.Handler {
	if h.token == "" {
		return next
	}
	want := []byte("Bearer " + h.token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" && subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="toolgate"`)
			web.WriteError(w, http.StatusUnauthorized, "missing or wrong bearer token")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// RunInfo is the answer about one run.
type RunInfo struct {
	RunID          string `json:"run_id"`
	ConversationID string `json:"conversation_id"`
	Status         Status `json:"status"`
}

type startRunRequest struct {
	Prompt         string `json:"prompt"`
	ConversationID string `json:"conversation_id,omitempty"`
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
	if req.ConversationID != "" && !validID(req.ConversationID) {
		web.WriteError(w, http.StatusBadRequest, fmt.Sprintf("conversation_id: %q is not a valid id", req.ConversationID))
		return
	}
	key := r.Header.Get("Idempotency-Key")
	if err := checkIdempotencyKey(key); err != nil {
		web.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	info, err := h.o.StartRunWith(r.Context(), StartRequest{Prompt: req.Prompt, ConversationID: req.ConversationID, IdempotencyKey: key})
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.o.storageWrote()
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
	if !validID(id) {
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

// ConversationView is the API's view of a conversation.
type ConversationView struct {
	ConversationID string `json:"conversation_id"`
	Status         Status `json:"status"`
	// Output is the final output of a completed conversation, null in any
	// other status (the key is always there).
	Output   *string           `json:"output"`
	Error    string            `json:"error,omitempty"`
	Runs     []RunSummary      `json:"runs"`
	Pending  []PendingView     `json:"pending"`
	Messages []json.RawMessage `json:"messages"`
	// Decisions lists every applied decision and who made it (D36).
	Decisions []DecisionRecord `json:"decisions"`
}

// RunSummary is one run of a conversation.
type RunSummary struct {
	RunID  string `json:"run_id"`
	Status Status `json:"status"`
}

// PendingView is a deferred call still waiting for its reply (package wire).
type PendingView = wire.PendingCall

func viewOf(c *Conversation) ConversationView {
	v := ConversationView{
		ConversationID: c.ID,
		Status:         c.Status,
		Error:          c.Error,
		Runs:           make([]RunSummary, 0, len(c.Runs)),
		Pending:        pendingOf(c),
		Messages:       messagesJSON(c.History),
		Decisions:      c.Decisions,
	}
	if v.Decisions == nil {
		v.Decisions = []DecisionRecord{}
	}
	if c.Status == StatusCompleted {
		out := c.Output
		v.Output = &out
	}
	for _, r := range c.Runs {
		v.Runs = append(v.Runs, RunSummary{RunID: r.RunID, Status: r.Status})
	}
	return v
}

func pendingOf(c *Conversation) []PendingView {
	out := []PendingView{}
	if c.Batch == nil {
		return out
	}
	for _, pc := range c.Batch.Calls {
		if pc.Reply != nil {
			continue
		}
		out = append(out, PendingView{
			ConversationID: c.ID,
			RunID:          c.Batch.RunID,
			ToolCallID:     pc.ToolCallID,
			ToolName:       pc.ToolName,
			Kind:           string(pc.Kind),
			Args:           pc.Args,
			Metadata:       pc.Metadata,
			Deadline:       pc.Deadline.UTC(),
		})
	}
	return out
}

func (h *api) getConversation(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !validID(id) {
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

func (h *api) pending(w http.ResponseWriter, r *http.Request) {
	p, err := h.o.Pending(r.Context())
	if err != nil {
		h.fail(w, r, err)
		return
	}
	web.WriteJSON(w, http.StatusOK, map[string]any{"pending": p})
}

func (h *api) healthz(w http.ResponseWriter, r *http.Request) {
	if err := h.o.Healthy(); err != nil {
		web.WriteError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	if err := h.o.StorageHealth(r.Context()); err != nil {
		web.WriteError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	// The process id and instance tell a script which orchestrator answers
	// on a port (scripts/run.sh: its own, not another one left running).
	web.WriteJSON(w, http.StatusOK, map[string]any{"status": "ok", "pid": os.Getpid(), "instance": h.o.cfg.InstanceID})
}

// fail maps an orchestrator error to a status.
func (h *api) fail(w http.ResponseWriter, r *http.Request, err error) {
	var (
		conflict *ConflictError
		bad      *BadRequestError
		reused   *IdempotencyError
		corrupt  *CorruptError
	)
	switch {
	case errors.Is(err, ErrNotFound):
		web.WriteError(w, http.StatusNotFound, err.Error())
	case errors.As(err, &bad):
		web.WriteError(w, http.StatusBadRequest, err.Error())
	case errors.As(err, &conflict):
		web.WriteError(w, http.StatusConflict, err.Error())
	case errors.As(err, &reused):
		web.WriteError(w, http.StatusUnprocessableEntity, err.Error())
	case errors.Is(err, ErrStopped):
		web.WriteError(w, http.StatusServiceUnavailable, err.Error())
	case h.o.storageFailed(err):
		w.Header().Set("Retry-After", "30")
		web.WriteError(w, http.StatusServiceUnavailable, "storage full: the NATS server has no room for it ("+err.Error()+"); free disk space or raise the server's JetStream max_file_store, then retry")
	case errors.As(err, &corrupt):
		// Not the client's fault, and not to be hidden behind "internal
		// error": the operator repairs or deletes the conversation.
		h.log.ErrorContext(r.Context(), "corrupt conversation", slog.String("conversation_id", corrupt.ConversationID),
			slog.Uint64("record", corrupt.Sequence), slog.String("error", corrupt.Err.Error()))
		web.WriteError(w, http.StatusInternalServerError, err.Error())
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

// validID reports whether s can be a conversation or run id: it must fit a
// subject token and a KV key.
func validID(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}
