package page_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/agentconfig"
	"github.com/toolgate/toolgate/internal/chat/page"
	"github.com/toolgate/toolgate/internal/orchestrator"
)

// The page's files are served without the API's token, with a CSP that
// allows no inline script and no other origin; every other request goes
// to the API.
func TestHandlerServesPageAndPassesTheRest(t *testing.T) {
	t.Parallel()
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("WWW-Authenticate", "Bearer")
		http.Error(w, "api", http.StatusUnauthorized)
	})
	srv := httptest.NewServer(page.Handler(api))
	t.Cleanup(srv.Close)
	tests := []struct {
		name, path string
		status     int
		ctype      string
		body       string
	}{
		{name: "page", path: "/chat", status: 200, ctype: "text/html", body: `src="/chat/assets/chat.js"`},
		{name: "script", path: "/chat/assets/chat.js", status: 200, ctype: "javascript", body: "RunAgentInput"},
		{name: "style", path: "/chat/assets/chat.css", status: 200, ctype: "text/css", body: ".approval"},
		{name: "slash", path: "/chat/", status: 200, ctype: "text/html", body: `src="/chat/assets/chat.js"`},
		{name: "no listing", path: "/chat/assets/", status: 404},
		{name: "no such file", path: "/chat/assets/nope.js", status: 404},
		{name: "api", path: "/v1/conversations", status: 401, body: "api"},
		{name: "agui", path: "/v1/agui", status: 401, body: "api"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			resp, err := http.Get(srv.URL + tc.path)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, b)
			}
			if !strings.Contains(resp.Header.Get("Content-Type"), tc.ctype) || !strings.Contains(string(b), tc.body) {
				t.Errorf("Content-Type %q, body %.200q; want %q holding %q", resp.Header.Get("Content-Type"), b, tc.ctype, tc.body)
			}
			if !strings.HasPrefix(tc.path, "/chat") {
				return
			}
			csp := resp.Header.Get("Content-Security-Policy")
			for _, want := range []string{"default-src 'none'", "script-src 'self'", "connect-src 'self'", "frame-ancestors 'none'"} {
				if !strings.Contains(csp, want) {
					t.Errorf("CSP %q lacks %q", csp, want)
				}
			}
			if strings.Contains(csp, "unsafe-inline") || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
				t.Errorf("CSP %q, nosniff %q", csp, resp.Header.Get("X-Content-Type-Options"))
			}
		})
	}
}

// The page has no inline script or style for the CSP to refuse.
func TestPageHasNoInlineCode(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(page.Handler(http.NotFoundHandler()))
	t.Cleanup(srv.Close)
	resp, err := http.Get(srv.URL + page.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	html := string(b)
	for _, bad := range []string{"<script>", "<style", " style=", " onclick=", " onsubmit=", "javascript:"} {
		if strings.Contains(html, bad) {
			t.Errorf("the page holds %q", bad)
		}
	}
}

// The built-in demo agent's frontend tools are tools the page answers, so
// that a chat with it (make run) shows one.
func TestDemoFrontendToolsAreThePages(t *testing.T) {
	t.Parallel()
	cfg, err := agentconfig.Demo()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(page.Handler(http.NotFoundHandler()))
	t.Cleanup(srv.Close)
	resp, err := http.Get(srv.URL + page.Path + "/assets/chat.js")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	js, _ := io.ReadAll(resp.Body)
	n := 0
	for _, tool := range cfg.Tools {
		if tool.Executor != orchestrator.ExecutorFrontend {
			continue
		}
		n++
		if !strings.Contains(string(js), `name: "`+tool.Name+`"`) {
			t.Errorf("the demo's frontend tool %s is not one the page answers", tool.Name)
		}
	}
	if n == 0 {
		t.Error("the demo agent has no frontend tool for the page to answer")
	}
}
