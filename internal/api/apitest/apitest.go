// Package apitest holds what tests of the HTTP API share.
package apitest

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// DoJSON sends body (JSON, when not empty) with hdr and decodes the JSON
// answer; anything else fails the test.
func DoJSON(t testing.TB, method, url string, hdr http.Header, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s %s: %d, not JSON: %q", method, url, resp.StatusCode, raw)
	}
	return resp.StatusCode, out
}

// Bearer is the header of an API token; none for "".
func Bearer(token string) http.Header {
	hdr := http.Header{}
	if token != "" {
		hdr.Set("Authorization", "Bearer "+token)
	}
	return hdr
}
