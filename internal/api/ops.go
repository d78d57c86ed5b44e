package api

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/toolgate/toolgate/internal/orchestrator"
	"github.com/toolgate/toolgate/internal/web"
)

// Records is what the operator's endpoints (GET /v1/dlq, GET /v1/audit)
// need of the engine. It is asked of the Engine when a request comes, so
// that an Engine without it still serves the rest of the API.
type Records interface {
	DeadLetters(ctx context.Context, q orchestrator.RecordQuery) (orchestrator.DeadLetterPage, error)
	AuditRecords(ctx context.Context, q orchestrator.RecordQuery) (orchestrator.AuditPage, error)
}

func (h *api) deadLetters(w http.ResponseWriter, r *http.Request) {
	rec, q, ok := h.recordQuery(w, r)
	if !ok {
		return
	}
	page, err := rec.DeadLetters(r.Context(), q)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	web.WriteJSON(w, http.StatusOK, page)
}

func (h *api) auditRecords(w http.ResponseWriter, r *http.Request) {
	rec, q, ok := h.recordQuery(w, r)
	if !ok {
		return
	}
	page, err := rec.AuditRecords(r.Context(), q)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	web.WriteJSON(w, http.StatusOK, page)
}

// recordQuery reads ?conversation=&tool_call_id=&since=&limit=&cursor=;
// on failure it has answered the request.
func (h *api) recordQuery(w http.ResponseWriter, r *http.Request) (Records, orchestrator.RecordQuery, bool) {
	rec, ok := h.o.(Records)
	if !ok {
		web.WriteError(w, http.StatusNotImplemented, "this orchestrator does not serve dead letters and audit records")
		return nil, orchestrator.RecordQuery{}, false
	}
	q, err := parseRecordQuery(r.URL.Query(), time.Now())
	if err != nil {
		web.WriteError(w, http.StatusBadRequest, err.Error())
		return nil, orchestrator.RecordQuery{}, false
	}
	return rec, q, true
}

func parseRecordQuery(v url.Values, now time.Time) (orchestrator.RecordQuery, error) {
	q := orchestrator.RecordQuery{ConversationID: v.Get("conversation"), ToolCallID: v.Get("tool_call_id"), Cursor: v.Get("cursor")}
	if q.ConversationID != "" && !orchestrator.ValidID(q.ConversationID) {
		return q, fmt.Errorf("conversation: %q is not a valid id", q.ConversationID)
	}
	if s := v.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > orchestrator.MaxListLimit {
			return q, fmt.Errorf("limit: %q is not a number between 1 and %d", s, orchestrator.MaxListLimit)
		}
		q.Limit = n
	}
	if s := v.Get("since"); s != "" {
		t, err := ParseSince(s, now)
		if err != nil {
			return q, err
		}
		q.Since = t
	}
	return q, nil
}

// ParseSince reads a since filter: an RFC 3339 time, or a duration back
// from now ("90m", "24h").
func ParseSince(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(strings.TrimPrefix(s, "-")); err == nil && d > 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("since: %q is neither an RFC 3339 time (2026-12-07T13:00:00Z) nor a duration back from now (90m, 24h)", s)
}
