package inbox

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/toolgate/toolgate/internal/web"

	"github.com/toolgate/toolgate/internal/approver"
)

//go:embed assets
var assets embed.FS

const (
	cookieName   = "toolgate_inbox"
	maxBodyBytes = 1 << 20
	// keepAlive is how often an idle page stream sends a comment, so that
	// proxies keep it open and a gone page is noticed.
	keepAlive = 15 * time.Second
)

func parsePages() (*template.Template, error) {
	funcs := template.FuncMap{
		"rfc3339": func(t time.Time) string {
			if t.IsZero() {
				return ""
			}
			return t.UTC().Format(time.RFC3339)
		},
	}
	t, err := template.New("pages").Funcs(funcs).ParseFS(assets, "assets/*.html")
	if err != nil {
		return nil, fmt.Errorf("parse pages: %w", err)
	}
	return t, nil
}

// Handler serves the inbox:
//
//	GET  /                        the inbox page
//	GET  /events                  pending requests as Server-Sent Events
//	GET  /api/pending             pending requests as JSON
//	POST /api/decide              a decision (JSON)
//	GET  /api/grants              the standing grants (JSON)
//	POST /api/grants              approve and always allow (JSON)
//	DELETE /api/grants/{id}       revoke a grant
//	GET  /conversations/{id}      a conversation's transcript
//	GET  /login, POST /login      the token form (sets a cookie)
//	POST /logout
//	GET  /healthz                 liveness
func (in *Inbox) Handler() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(assets, "assets")
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /{$}", in.page)
	mux.HandleFunc("GET /events", in.events)
	mux.HandleFunc("GET /api/pending", in.apiPending)
	mux.HandleFunc("POST /api/decide", in.apiDecide)
	mux.HandleFunc("GET /api/grants", in.apiGrants)
	mux.HandleFunc("POST /api/grants", in.apiGrant)
	mux.HandleFunc("DELETE /api/grants/{id}", in.apiRevokeGrant)
	mux.HandleFunc("GET /conversations/{id}", in.conversation)
	mux.HandleFunc("GET /login", in.loginForm)
	mux.HandleFunc("POST /login", in.login)
	mux.HandleFunc("POST /logout", in.logout)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if !in.Ready() {
			web.WriteJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "starting"})
			return
		}
		web.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	return in.guard(mux)
}

// guard lets a request through with the token (bearer header or login
// cookie); without a configured token, only from loopback. /healthz,
// /login and the static assets are open. A POST, DELETE or PUT a browser
// sends from another site is refused 403 (Sec-Fetch-Site, else Origin
// against Host), the sign-in and sign-out forms included.
func (in *Inbox) guard(next http.Handler) http.Handler {
	csrf := http.NewCrossOriginProtection()
	csrf.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		web.WriteError(w, http.StatusForbidden, fmt.Sprintf("cross-origin %s %s refused", r.Method, r.URL.Path))
	}))
	return csrf.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("X-Frame-Options", "DENY")
		// same-origin, not no-referrer: with no-referrer a browser posts
		// the sign-in and sign-out forms with Origin: null, which no
		// origin check (the loopback guard's, csrf's) can tell from a
		// cross-site post. Other sites still get no referrer.
		w.Header().Set("Referrer-Policy", "same-origin")
		w.Header().Set("Content-Security-Policy", "default-src 'self'; style-src 'self'; script-src 'self'; connect-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'")
		open := r.URL.Path == "/healthz" || r.URL.Path == "/login" || strings.HasPrefix(r.URL.Path, "/static/")
		if open {
			next.ServeHTTP(w, r)
			return
		}
		if in.cfg.Token == "" {
			if !loopback(r.RemoteAddr) {
				web.WriteError(w, http.StatusForbidden, "the inbox has no token and serves loopback clients only")
				return
			}
			next.ServeHTTP(w, r)
			return
		}
		if in.authorized(r) {
			next.ServeHTTP(w, r)
			return
		}
		if r.Method == http.MethodGet && wantsHTML(r) {
			http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="toolgate-inbox"`)
		web.WriteError(w, http.StatusUnauthorized, "missing or wrong token")
	}))
}

func (in *Inbox) authorized(r *http.Request) bool {
	if h := r.Header.Get("Authorization"); h != "" {
		return subtle.ConstantTimeCompare([]byte(h), []byte("Bearer "+in.cfg.Token)) == 1
	}
	if c, err := r.Cookie(cookieName); err == nil {
		return subtle.ConstantTimeCompare([]byte(c.Value), []byte(in.session())) == 1
	}
	return false
}

// session is the cookie value: derived from the token, so that the cookie
// does not hold the token itself.
func (in *Inbox) session() string {
	m := hmac.New(sha256.New, []byte(in.cfg.Token))
	m.Write([]byte("toolgate inbox session"))
	return hex.EncodeToString(m.Sum(nil))
}

func loopback(remote string) bool {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

func wantsHTML(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "text/html")
}

type pageData struct {
	Title   string
	ID      string
	Items   []Item
	Signing bool
	Token   bool
	Error   string
	Next    string
	Conv    *transcript
	Blank   Item
}

func (in *Inbox) render(w http.ResponseWriter, status int, name string, data pageData) {
	var buf bytes.Buffer
	if err := in.pages.ExecuteTemplate(&buf, name, data); err != nil {
		in.log.Error("render page", slog.String("page", name), slog.Any("error", err))
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

func (in *Inbox) page(w http.ResponseWriter, r *http.Request) {
	items, _ := in.store.snapshot()
	in.render(w, http.StatusOK, "inbox.html", pageData{
		Title: "Approval inbox", ID: in.cfg.ID, Items: items, Signing: in.cfg.Key != nil, Token: in.cfg.Token != "",
	})
}

func (in *Inbox) apiPending(w http.ResponseWriter, r *http.Request) {
	items, _ := in.store.snapshot()
	web.WriteJSON(w, http.StatusOK, map[string]any{"pending": items})
}

// events streams the pending list: a snapshot, then "add" and "remove"
// events as it changes, worked out by comparing snapshots, so a slow page
// never makes anyone wait.
func (in *Inbox) events(w http.ResponseWriter, r *http.Request) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		web.WriteError(w, http.StatusInternalServerError, "streaming unsupported")
		return
	}
	if err := web.Stream(w); err != nil {
		web.WriteError(w, http.StatusInternalServerError, err.Error())
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)

	send := func(event string, v any) bool {
		data, err := json.Marshal(v)
		if err != nil {
			return false
		}
		if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, data); err != nil {
			return false
		}
		return true
	}
	items, changed := in.store.snapshot()
	if !send("snapshot", items) {
		return
	}
	flusher.Flush()
	shown := make(map[string]bool, len(items))
	for _, it := range items {
		shown[it.Key] = true
	}
	// Requests decided here whose outcome is awaited are not shown; when
	// one leaves, its reason tells the page whether the decision was
	// applied.
	waiting := in.store.sentKeys()
	keep := time.NewTicker(keepAlive)
	defer keep.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-keep.C:
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
				return
			}
			flusher.Flush()
		case <-changed:
			items, changed = in.store.snapshot()
			now := make(map[string]bool, len(items))
			for _, it := range items {
				now[it.Key] = true
			}
			sent := in.store.sentKeys()
			for k := range shown {
				if !now[k] && !send("remove", map[string]string{"key": k, "reason": in.store.reason(k)}) {
					return
				}
			}
			for k := range waiting {
				if !now[k] && !sent[k] && !send("remove", map[string]string{"key": k, "reason": in.store.reason(k)}) {
					return
				}
			}
			waiting = sent
			for _, it := range items {
				if !shown[it.Key] && !send("add", it) {
					return
				}
			}
			shown = now
			flusher.Flush()
		}
	}
}

// decideRequest is the body of POST /api/decide. Args is the edited text
// as typed; empty keeps the model's args.
type decideRequest struct {
	RunID      string `json:"run_id"`
	ToolCallID string `json:"tool_call_id"`
	Approve    bool   `json:"approve"`
	Args       string `json:"args,omitempty"`
	Message    string `json:"message,omitempty"`
}

type decideAnswer struct {
	Approved     bool            `json:"approved"`
	OverrideArgs json.RawMessage `json:"override_args,omitempty"`
	Message      string          `json:"message,omitempty"`
	ApproverID   string          `json:"approver_id"`
	DecidedAt    time.Time       `json:"decided_at"`
	Signed       bool            `json:"signed"`
	// Pending: the orchestrator has not said yet whether it applied it;
	// the request comes back to the page, with a note, if it did not.
	Pending bool `json:"pending,omitempty"`
}

func (in *Inbox) apiDecide(w http.ResponseWriter, r *http.Request) {
	// A JSON content type cannot be sent cross-site without a preflight
	// this server never grants: with the SameSite cookie, that keeps other
	// sites from deciding in a logged-in browser.
	if !web.RequireJSON(w, r) {
		return
	}
	var req decideRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		web.WriteError(w, http.StatusBadRequest, "body: "+strings.TrimPrefix(err.Error(), "json: "))
		return
	}
	if req.RunID == "" || req.ToolCallID == "" {
		web.WriteError(w, http.StatusBadRequest, "run_id and tool_call_id are required")
		return
	}
	c := approver.Choice{Approve: req.Approve, Message: strings.TrimSpace(req.Message)}
	if strings.TrimSpace(req.Args) != "" {
		if !req.Approve {
			web.WriteError(w, http.StatusBadRequest, "args can only be edited on an approval")
			return
		}
		c.Args = json.RawMessage(req.Args)
	}
	d, err := in.Decide(r.Context(), req.RunID, req.ToolCallID, c)
	var ae *approver.ArgsError
	var refused *approver.RefusedError
	var notAdmitted *approver.NotAdmittedError
	switch {
	case errors.Is(err, approver.ErrNoOutcome):
		// Sent; the inbox learns later whether it was applied.
		web.WriteJSON(w, http.StatusAccepted, decideAnswer{
			Approved: d.Approved, OverrideArgs: d.OverrideArgs, Message: d.Message,
			ApproverID: d.ApproverID, DecidedAt: d.DecidedAt, Signed: d.Signature != nil, Pending: true,
		})
		return
	case errors.As(err, &notAdmitted):
		web.WriteError(w, http.StatusForbidden, notAdmitted.Error())
		return
	case errors.As(err, &refused):
		web.WriteError(w, http.StatusConflict, refused.Error())
		return
	case errors.As(err, &ae):
		web.WriteJSON(w, http.StatusUnprocessableEntity, map[string]any{"error": "args refused", "problems": ae.Problems})
		return
	case errors.Is(err, ErrNotPending):
		web.WriteError(w, http.StatusConflict, err.Error())
		return
	case err != nil:
		in.log.ErrorContext(r.Context(), "decide", slog.Any("error", err))
		web.WriteError(w, http.StatusBadGateway, err.Error())
		return
	}
	web.WriteJSON(w, http.StatusOK, decideAnswer{
		Approved: d.Approved, OverrideArgs: d.OverrideArgs, Message: d.Message,
		ApproverID: d.ApproverID, DecidedAt: d.DecidedAt, Signed: d.Signature != nil,
	})
}

func (in *Inbox) loginForm(w http.ResponseWriter, r *http.Request) {
	in.render(w, http.StatusOK, "login.html", pageData{Title: "Sign in", Token: in.cfg.Token != "", Next: safeNext(r.URL.Query().Get("next"))})
}

func (in *Inbox) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if err := r.ParseForm(); err != nil {
		web.WriteError(w, http.StatusBadRequest, "bad form")
		return
	}
	next := safeNext(r.PostFormValue("next"))
	if in.cfg.Token == "" {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	if subtle.ConstantTimeCompare([]byte(strings.TrimSpace(r.PostFormValue("token"))), []byte(in.cfg.Token)) != 1 {
		in.render(w, http.StatusUnauthorized, "login.html", pageData{Title: "Sign in", Token: true, Error: "Wrong token.", Next: next})
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name: cookieName, Value: in.session(), Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil, MaxAge: 12 * 3600,
	})
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (in *Inbox) logout(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

// safeNext keeps a post-login redirect on this site: a path of this
// origin, or "/". It is judged as a browser reads a Location: a browser
// drops tabs and newlines and reads a backslash as a slash, so that
// "/\t/evil.example" or "/\\evil.example" leads to another host. So a next
// with any byte that is not printable ASCII, a backslash, a scheme or host,
// or that starts "//" once percent-decoded, is refused.
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/") {
		return "/"
	}
	decoded, err := url.PathUnescape(next)
	if err != nil {
		return "/"
	}
	for _, s := range []string{next, decoded} {
		for i := 0; i < len(s); i++ {
			if c := s[i]; c <= ' ' || c >= 0x7f || c == '\\' {
				return "/"
			}
		}
		if strings.HasPrefix(s, "//") {
			return "/"
		}
	}
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || u.Opaque != "" {
		return "/"
	}
	return next
}
