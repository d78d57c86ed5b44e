package api_test

import (
	"crypto/ed25519"
	"net/http"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/api/apitest"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/orchestrator"
)

// Grants given over the API decide the calls they cover when the run
// pauses, recorded as by the grant; the caller the API authenticated is
// their giver; the list shows them; a revoked one is gone.
func TestGrantRoutes(t *testing.T) {
	t.Parallel()
	e := newAnswerEnv(t)
	grants := e.url + "/v1/grants"
	status, allow := apitest.DoJSON(t, "POST", grants, apitest.Bearer(e.ann),
		`{"tool":"update_file","approved":true,"args":{"path":"a.txt","content":"from the model"},"ttl":"1h"}`)
	if status != http.StatusCreated || allow["granted_by"] != "ann" || allow["args_digest"] == "" || allow["expires_at"] == nil {
		t.Fatalf("give an approval: %d %v", status, allow)
	}
	status, deny := apitest.DoJSON(t, "POST", grants, apitest.Bearer(e.ann), `{"tool":"delete_file","approved":false,"message":"never"}`)
	if status != http.StatusCreated {
		t.Fatalf("give a denial: %d %v", status, deny)
	}
	for _, body := range []string{
		`{"tool":"delete_file"}`, // approved missing
		`{"tool":"delete_file","approved":true,"ttl":"-1h"}`,
		`{"tool":"delete_file","approved":true,"args":{},"args_digest":"00"}`,
		`{"tool":"a.b","approved":true}`,
	} {
		if status, got := apitest.DoJSON(t, "POST", grants, apitest.Bearer(e.ann), body); status != http.StatusBadRequest {
			t.Errorf("%s: %d %v, want 400", body, status, got)
		}
	}
	status, list := apitest.DoJSON(t, "GET", grants, apitest.Bearer(e.ann), "")
	if gs, _ := list["grants"].([]any); status != http.StatusOK || len(gs) != 2 {
		t.Fatalf("list: %d %v", status, list)
	}

	conv := e.start(t, "files")
	if d := e.call(t, conv, "upd").Decision(); d == nil || d.Outcome != conversation.OutcomeApproved || d.By != "grant:"+allow["id"].(string) {
		t.Errorf("upd decided %+v, want approved by the grant", d)
	}
	if d := e.call(t, conv, "del").Decision(); d == nil || d.Outcome != conversation.OutcomeDenied || d.Message != "never" {
		t.Errorf("del decided %+v, want denied by the standing denial", d)
	}

	if status, got := apitest.DoJSON(t, "DELETE", grants+"/"+deny["id"].(string), apitest.Bearer(e.ann), ""); status != http.StatusOK || got["status"] != "revoked" {
		t.Errorf("revoke: %d %v", status, got)
	}
	if status, got := apitest.DoJSON(t, "DELETE", grants+"/"+deny["id"].(string), apitest.Bearer(e.ann), ""); status != http.StatusNotFound {
		t.Errorf("revoke again: %d %v, want 404", status, got)
	}
	if status, list := apitest.DoJSON(t, "GET", grants, apitest.Bearer(e.ann), ""); status != http.StatusOK || len(list["grants"].([]any)) != 1 {
		t.Errorf("list after the revoke: %d %v", status, list)
	}
	if status, got := apitest.DoJSON(t, "PUT", grants, apitest.Bearer(e.ann), "{}"); status != http.StatusMethodNotAllowed {
		t.Errorf("PUT: %d %v, want 405", status, got)
	}
}

// Where approver keys are trusted, only a named user of the API may give
// a grant, as only one may decide over HTTP.
func TestGrantRouteWithTrustedKeys(t *testing.T) {
	t.Parallel()
	pub, _, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	e := newAnswerEnvWith(t, orchestrator.Config{TrustedApprovers: map[string]ed25519.PublicKey{"bot": pub}})
	const body = `{"tool":"delete_file","approved":true}`
	if status, got := apitest.DoJSON(t, "POST", e.url+"/v1/grants", apitest.Bearer(e.anon), body); status != http.StatusForbidden || !strings.Contains(got["error"].(string), "users") {
		t.Fatalf("shared token: %d %v", status, got)
	}
	if status, got := apitest.DoJSON(t, "POST", e.url+"/v1/grants", apitest.Bearer(e.ann), body); status != http.StatusCreated {
		t.Fatalf("named user: %d %v", status, got)
	}
}
