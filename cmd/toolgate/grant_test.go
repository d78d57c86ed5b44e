package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/api"
	"github.com/toolgate/toolgate/internal/client"
	"github.com/toolgate/toolgate/internal/orchestrator"
	"github.com/toolgate/toolgate/internal/testkit"
	"github.com/toolgate/toolgate/wire"
)

// grant, grants and revoke give, list and revoke a standing decision on a
// real orchestrator's API.
func TestGrantCommands(t *testing.T) {
	sys := testkit.Test(t, testkit.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	o, err := sys.Orchestrator(ctx, "orch", orchestrator.Config{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.Handler(o, api.Config{}))
	t.Cleanup(srv.Close)
	toolgate := func(args ...string) string {
		t.Helper()
		var out bytes.Buffer
		if err := run(t.Context(), append(args, "--addr", srv.URL), &out, &out); err != nil {
			t.Fatalf("toolgate %v: %v\n%s", args, err, out.String())
		}
		return out.String()
	}

	var g client.Grant
	out := toolgate("grant", "--deny", "--message", "never", "--args", `{"path": "__init__.py"}`, "--ttl", "8h", "--json", "delete_file")
	if err := json.Unmarshal([]byte(out), &g); err != nil {
		t.Fatalf("grant printed %q: %v", out, err)
	}
	digest, _ := wire.DigestArgs(json.RawMessage(`{"path":"__init__.py"}`))
	if g.Tool != "delete_file" || g.Approved || g.Message != "never" || g.ArgsDigest != digest || g.GrantedBy != api.CallerLocal ||
		time.Until(g.ExpiresAt) < 7*time.Hour {
		t.Errorf("grant %+v", g)
	}
	if out := toolgate("grants"); !strings.Contains(out, g.ID) || !strings.Contains(out, "deny") || !strings.Contains(out, "args="+digest[:12]) {
		t.Errorf("grants printed:\n%s", out)
	}
	if out := toolgate("revoke", g.ID); out != "revoked "+g.ID+"\n" {
		t.Errorf("revoke printed %q", out)
	}
	if out := toolgate("grants"); out != "no grants\n" {
		t.Errorf("grants after the revoke printed %q", out)
	}
	var buf bytes.Buffer
	if err := run(t.Context(), []string{"grant", "--message", "x", "delete_file", "--addr", srv.URL}, &buf, &buf); err == nil {
		t.Error("grant --message without --deny accepted")
	}
}
