package main

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// --http-users names the API's callers: its users are loaded, and like a
// token they let the API listen beyond loopback; a file that cannot name
// them is refused at start.
func TestHTTPUsersFlag(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sum := sha256.Sum256([]byte("ann-token"))
	hash := hex.EncodeToString(sum[:])
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("users.yaml", "users:\n  - {name: ann, token_sha256: "+hash+"}\n")
	o, err := parseFlags([]string{"--http", "0.0.0.0:0", "--http-users", good, "--allow-unsigned"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	s, err := prepare(o, io.Discard, noEnv)
	if err != nil {
		t.Fatalf("a public address with --http-users: %v", err)
	}
	if len(s.users) != 1 || s.users[0].Name != "ann" {
		t.Errorf("users %+v", s.users)
	}
	for _, tc := range []struct{ name, content, want string }{
		{"reserved name", "users:\n  - {name: local, token_sha256: " + hash + "}\n", "reserved"},
		{"bad hash", "users:\n  - {name: ann, token_sha256: abc}\n", "64 hex digits"},
		{"same token twice", "users:\n  - {name: ann, token_sha256: " + hash + "}\n  - {name: bob, token_sha256: " + hash + "}\n", "another user"},
		{"unknown field", "users:\n  - {name: ann, token: x}\n", `unknown field "token"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := parseFlags([]string{"--http-users", write(strings.ReplaceAll(tc.name, " ", "-")+".yaml", tc.content)}, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := prepare(o, io.Discard, noEnv); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}
