package web

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
)

// loopbackAddr reports whether a listener's address is on loopback.
func loopbackAddr(a net.Addr) bool {
	ap, err := netip.ParseAddrPort(a.String())
	return err == nil && ap.Addr().Unmap().IsLoopback()
}

// loopbackHost reports whether host (a Host header or URL host, port
// optional) names loopback: localhost, a name under .localhost, or a
// loopback address.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// LocalOnly guards a server that listens on loopback, which needs no token,
// against web pages in a local browser: a request must name a loopback
// host (else 421: a page of another name that resolves to 127.0.0.1 — DNS
// rebinding — could read the answers), and a request carrying an Origin
// must come from this very origin (else 403: a page of another site could
// send POSTs the browser does not preflight). Serve adds it to every
// loopback listener.
func LocalOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !loopbackHost(r.Host) {
			WriteError(w, http.StatusMisdirectedRequest, fmt.Sprintf("host %q refused: a server on loopback answers only to localhost or a loopback address", r.Host))
			return
		}
		if origin := r.Header.Get("Origin"); origin != "" {
			u, err := url.Parse(origin)
			if err != nil || u.Host == "" || !strings.EqualFold(u.Host, r.Host) {
				WriteError(w, http.StatusForbidden, fmt.Sprintf("cross-origin request from %q refused", origin))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// RequireJSON reports whether r says its body is JSON; if not, it has
// answered 415. A browser sends a cross-site form or text/plain POST
// without asking first, but not a JSON one.
func RequireJSON(w http.ResponseWriter, r *http.Request) bool {
	ct := r.Header.Get("Content-Type")
	mt, _, _ := strings.Cut(ct, ";")
	if !strings.EqualFold(strings.TrimSpace(mt), "application/json") {
		if ct == "" {
			ct = "none"
		}
		WriteError(w, http.StatusUnsupportedMediaType, fmt.Sprintf("Content-Type %s: want application/json", ct))
		return false
	}
	return true
}
