package inbox_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/approver/inbox"
	"github.com/toolgate/toolgate/internal/bus/bustest"
)

// post sends a form POST to h as a browser on host inbox.example would, with
// the extra headers hdr.
func post(h http.Handler, path string, form url.Values, hdr map[string]string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "http://inbox.example"+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// After signing in, the browser goes only to a path of the inbox's own
// origin, judged as a browser reads the Location (tabs and newlines
// dropped, a backslash for a slash) and after percent-decoding; anything
// else goes to "/". Before, "/\t/evil.example" came back as it was and a
// browser read it as //evil.example.
func TestSignInRedirectsOnlyOnSite(t *testing.T) {
	t.Parallel()
	in, _ := startInbox(t, inbox.Config{Bus: bustest.NewBus(t), Token: "s3cret"})
	h := in.Handler()
	for _, tc := range []struct {
		name, next, want string
	}{
		{"root", "/", "/"},
		{"empty", "", "/"},
		{"a conversation", "/conversations/conv-1", "/conversations/conv-1"},
		{"with a query", "/conversations/conv-1?x=1", "/conversations/conv-1?x=1"},
		{"escaped in a query", "/?q=a%2Fb", "/?q=a%2Fb"},
		{"tab", "/\t/evil.example", "/"},
		{"newline", "/\n/evil.example", "/"},
		{"carriage return and header", "/\r\nSet-Cookie: x=1", "/"},
		{"leading tab", "\t//evil.example", "/"},
		{"space", "/ /evil.example", "/"},
		{"nul", "/\x00/evil.example", "/"},
		{"del", "/\x7f/evil.example", "/"},
		{"backslash", "/\\evil.example", "/"},
		{"backslash later", "/a\\..\\..\\/evil.example", "/"},
		{"protocol-relative", "//evil.example", "/"},
		{"three slashes", "///evil.example", "/"},
		{"escaped slash", "/%2F/evil.example", "/"},
		{"escaped slash upper", "/%2f%2fevil.example", "/"},
		{"escaped backslash", "/%5C/evil.example", "/"},
		{"escaped tab", "/%09/evil.example", "/"},
		{"bad escape", "/%zz", "/"},
		{"scheme", "https://evil.example/", "/"},
		{"javascript", "javascript:alert(1)", "/"},
		{"relative", "evil.example", "/"},
		{"non-ascii", "/\u3000/evil.example", "/"},
		{"fullwidth solidus", "/\uff0fevil.example", "/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rec := post(h, "/login", url.Values{"token": {"s3cret"}, "next": {tc.next}}, nil)
			if rec.Code != http.StatusSeeOther || rec.Header().Get("Location") != tc.want {
				t.Errorf("sign in with next %q: %d to %q, want %d to %q", tc.next, rec.Code, rec.Header().Get("Location"), http.StatusSeeOther, tc.want)
			}
		})
	}
}

// The sign-in and sign-out forms, as every unsafe request, are refused when
// a browser says they come from another site; the pages ask browsers to
// send their origin to the inbox itself (and no referrer elsewhere), so
// that the inbox's own forms can be told from others.
func TestSignInFormsRefuseOtherSites(t *testing.T) {
	t.Parallel()
	in, _ := startInbox(t, inbox.Config{Bus: bustest.NewBus(t), Token: "s3cret"})
	h := in.Handler()
	creds := url.Values{"token": {"s3cret"}, "next": {"/"}}
	for _, tc := range []struct {
		name, path string
		hdr        map[string]string
		status     int
	}{
		{"sign in, same origin", "/login", map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": "http://inbox.example"}, http.StatusSeeOther},
		{"sign in, no browser headers", "/login", nil, http.StatusSeeOther},
		{"sign in, cross-site", "/login", map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"}, http.StatusForbidden},
		{"sign in, same-site other origin", "/login", map[string]string{"Sec-Fetch-Site": "same-site"}, http.StatusForbidden},
		{"sign in, other origin without fetch metadata", "/login", map[string]string{"Origin": "https://evil.example"}, http.StatusForbidden},
		{"sign out, same origin", "/logout", map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": "http://inbox.example", "Authorization": "Bearer s3cret"}, http.StatusSeeOther},
		{"sign out, cross-site", "/logout", map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example", "Authorization": "Bearer s3cret"}, http.StatusForbidden},
		{"sign out, other origin without fetch metadata", "/logout", map[string]string{"Origin": "https://evil.example"}, http.StatusForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rec := post(h, tc.path, creds, tc.hdr)
			if rec.Code != tc.status {
				t.Errorf("%s: %d %s, want %d", tc.path, rec.Code, rec.Body, tc.status)
			}
			if tc.status == http.StatusForbidden && len(rec.Result().Cookies()) != 0 {
				t.Errorf("%s refused but set cookies %v", tc.path, rec.Result().Cookies())
			}
		})
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://inbox.example/login", nil))
	if got := rec.Header().Get("Referrer-Policy"); got != "same-origin" {
		t.Errorf("Referrer-Policy %q, want same-origin (no-referrer makes browsers post the forms with Origin: null)", got)
	}
}
