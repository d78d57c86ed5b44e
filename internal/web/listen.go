package web

import (
	"fmt"
	"net"
	"net/netip"
)

// CheckListen refuses an HTTP address beyond loopback when no token guards
// what is served there.
func CheckListen(addr string, hasToken bool) error {
	if hasToken {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("http address %q: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || !ip.IsLoopback() {
		return fmt.Errorf("http address %q is not loopback: give a token (--http-token-file) to listen there", addr)
	}
	return nil
}
