package main

import (
	"crypto/ed25519"
	"encoding/base64"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A replica reachable beyond loopback refuses to start with an agent that
// takes unsigned decisions, unless trust keys (the flag, or the agent
// file's trust:) or --allow-unsigned say otherwise; on loopback it starts.
func TestSignedDecisionsRequiredBeyondLoopback(t *testing.T) {
	t.Parallel()
	pub, _, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	key := base64.StdEncoding.EncodeToString(pub)
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("secret-token-0123456789"), 0o600); err != nil {
		t.Fatal(err)
	}
	agent := func(name, extra string) string {
		p := filepath.Join(dir, name+".yaml")
		body := "name: " + name + "\nmodel: {provider: test}\ntools:\n  - {name: t, approval: always}\n" + extra
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	signedFile := agent("signed", "trust:\n  ann: "+key+"\n")
	optOut := agent("optout", "trust: {}\n")
	plain := agent("plain", "")
	public := []string{"--http", "0.0.0.0:0", "--http-token-file", token}
	tests := []struct {
		name string
		args []string
		want string // "" starts
	}{
		{"loopback, no keys", []string{"--agent", plain}, ""},
		{"public API, no keys", append(public, "--agent", plain), "--http 0.0.0.0:0 listens beyond loopback and agent plain takes unsigned decisions"},
		{"public NATS URL, no keys", []string{"--nats", "nats://10.1.2.3:4222", "--agent", plain}, "--nats nats://10.1.2.3:4222 listens beyond loopback"},
		{"public API, flag keys", append(public, "--agent", plain, "--trust-approver", "ann="+key), ""},
		{"public API, file keys", append(public, "--agent", signedFile), ""},
		{"public API, a file opts out of the flag's keys", append(public, "--agent", signedFile, "--agent", optOut, "--trust-approver", "ann="+key), "agent optout takes unsigned decisions"},
		{"public API, allowed", append(public, "--agent", plain, "--allow-unsigned"), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o, err := parseFlags(tt.args, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			_, err = prepare(o, io.Discard, noEnv)
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("err = %v, want one containing %q", err, tt.want)
			}
		})
	}
}
