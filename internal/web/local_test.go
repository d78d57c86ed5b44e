package web_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/web"
)

// A server on loopback answers only requests that name a loopback host and,
// when they carry an Origin, come from that same origin: a page of another
// site (or another name resolved to 127.0.0.1) gets nothing from it.
func TestServeOnLoopbackRefusesOtherHostsAndOrigins(t *testing.T) {
	t.Parallel()
	reached := make(chan string, 16)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached <- r.Method + " " + r.Host
		if r.Method == http.MethodPost && !web.RequireJSON(w, r) {
			return
		}
		web.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	addr := serve(t, h, web.ServeConfig{})
	_, port, _ := strings.Cut(addr, ":")
	for _, tc := range []struct {
		name, method, host, origin, ct string
		status                         int
		want                           string
	}{
		{"same origin", "GET", addr, "", "", 200, ""},
		{"localhost", "GET", "localhost:" + port, "", "", 200, ""},
		{"ipv6 loopback name", "GET", "[::1]:" + port, "", "", 200, ""},
		{"same-origin JSON POST", "POST", addr, "http://" + addr, "application/json", 200, ""},
		{"DNS rebinding", "GET", "evil.example:" + port, "", "", 421, `host "evil.example:` + port + `" refused`},
		{"cross-site text/plain POST", "POST", addr, "https://evil.example", "text/plain", 403, `cross-origin request from "https://evil.example" refused`},
		{"other local origin", "POST", addr, "http://localhost:3000", "application/json", 403, "cross-origin request"},
		{"opaque origin", "POST", addr, "null", "application/json", 403, "cross-origin request"},
		{"text/plain POST without origin", "POST", addr, "", "text/plain", 415, "Content-Type text/plain: want application/json"},
	} {
		req, err := http.NewRequest(tc.method, "http://"+addr+"/", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Host = tc.host
		if tc.origin != "" {
			req.Header.Set("Origin", tc.origin)
		}
		if tc.ct != "" {
			req.Header.Set("Content-Type", tc.ct)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var body struct{ Error string }
		_ = json.Unmarshal(raw, &body)
		if resp.StatusCode != tc.status || !strings.Contains(body.Error, tc.want) {
			t.Errorf("%s: %d %s, want %d %q", tc.name, resp.StatusCode, raw, tc.status, tc.want)
		}
		if tc.status == 421 || tc.status == 403 {
			select {
			case got := <-reached:
				t.Errorf("%s: the handler was reached (%s)", tc.name, got)
			default:
			}
		} else {
			<-reached
		}
	}
}
