// Package page is the chat page the orchestrator serves at /chat: plain
// HTML and JavaScript, no build step, that drives a conversation through
// the AG-UI endpoint (POST /v1/agui) as a person would. It streams the
// answer, shows the tool calls, asks for approvals in the chat (approve,
// edit the args, deny with a message: the interrupt's resume) and answers
// the frontend tools it knows (local_time, confirm) with a tool message in
// the next input.
//
// The page's files carry no data and need no token; every request the page
// makes goes to the API behind its authentication. A tokenless API (on
// loopback) answers it as is; one with a token answers 401, and the page
// asks for the token once and keeps it in the tab's sessionStorage.
package page

import (
	"embed"
	"io/fs"
	"net/http"
	"strings"
)

//go:embed assets
var assets embed.FS

// Path is where the page is served.
const Path = "/chat"

// csp lets the page load only its own files and talk only to its own
// origin: no inline script or style, no frames, no forms posted anywhere.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Handler serves the page (GET /chat, its files under /chat/assets/) and
// hands every other request to next, the API, whose authentication the
// page's own requests meet.
func Handler(next http.Handler) http.Handler {
	static, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded folder is there or nothing builds
	}
	files := http.StripPrefix(Path+"/assets/", http.FileServerFS(static))
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+Path, func(w http.ResponseWriter, r *http.Request) {
		secure(w)
		w.Header().Set("Cache-Control", "no-cache")
		http.ServeFileFS(w, r, static, "chat.html")
	})
	mux.Handle("GET "+Path+"/{$}", http.RedirectHandler(Path, http.StatusMovedPermanently))
	mux.Handle("GET "+Path+"/assets/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		secure(w)
		if strings.HasSuffix(r.URL.Path, "/") {
			http.NotFound(w, r) // no listing of the folder
			return
		}
		w.Header().Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	}))
	mux.Handle("/", next)
	return mux
}

func secure(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
}
