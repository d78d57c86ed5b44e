package approval_test

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	"github.com/toolgate/toolgate/approval"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func setup(t *testing.T) (*nats.Conn, *bus.Bus) {
	t.Helper()
	srv := bustest.NewServer(t)
	b := bustest.Connect(t, srv, "test")
	bustest.Setup(t, b)
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc, b
}

func request(t *testing.T, b *bus.Bus, run, call, tool, args string) {
	t.Helper()
	digest, err := wire.DigestArgs(json.RawMessage(args))
	if err != nil {
		t.Fatal(err)
	}
	req := wire.ApprovalRequest{RunID: run, ConversationID: "c1", ToolCallID: call, ToolName: tool,
		Args: json.RawMessage(args), ArgsDigest: digest, Deadline: time.Now().Add(time.Minute), Attempt: 1}
	if _, err := b.PublishApproval(bustest.Context(t), req); err != nil {
		t.Fatal(err)
	}
}

func TestBotDecidesSignsAndEscalates(t *testing.T) {
	nc, b := setup(t)
	pub, key, err := approval.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	var failedOnce atomic.Bool
	var mu sync.Mutex
	handled := map[string]string{}
	bot, err := approval.New(nc, approval.Config{ID: "bot", Key: key, Handled: func(req approval.Request, o string) {
		mu.Lock()
		handled[req.ToolCallID] = o
		mu.Unlock()
	}}, approval.DeciderFunc(func(ctx context.Context, req approval.Request) (approval.Verdict, error) {
		switch req.ToolName {
		case "delete_file":
			return approval.Deny("deleting is not allowed"), nil
		case "read_file":
			return approval.Approve().WithMetadata(map[string]string{"ticket": "OPS-7"}), nil
		case "send_mail":
			return approval.ApproveWithArgs(map[string]string{"to": "review@example.com"}), nil
		case "transfer":
			return approval.Escalate(), nil
		case "flaky":
			if !failedOnce.Swap(true) {
				return approval.Verdict{}, errors.New("policy service down")
			}
		}
		return approval.Approve(), nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	bustest.Run(t, "bot", bot.Run)

	request(t, b, "r1", "a", "read_file", `{"path":"x"}`)
	request(t, b, "r1", "b", "delete_file", `{"path":"x"}`)
	request(t, b, "r1", "c", "send_mail", `{"to":"boss@example.com"}`)
	request(t, b, "r1", "d", "transfer", `{"amount":100}`)
	request(t, b, "r1", "e", "flaky", `{}`)

	var got map[string]wire.Decision
	bustest.Poll(t, bustest.Timeout, "four decisions and an escalation", func() (bool, string) {
		got = map[string]wire.Decision{}
		for _, d := range bustest.Decisions(t, b, "r1") {
			got[d.ToolCallID] = d
		}
		mu.Lock()
		defer mu.Unlock()
		return len(got) == 4 && handled["d"] == "escalated", ""
	})
	for id, d := range got {
		if err := d.Verify(pub); err != nil {
			t.Errorf("decision %s: %v", id, err)
		}
		if d.ApproverID != "bot" {
			t.Errorf("decision %s approver = %q", id, d.ApproverID)
		}
	}
	if d := got["a"]; !d.Approved || len(d.OverrideArgs) != 0 || string(d.Metadata) != `{"ticket":"OPS-7"}` {
		t.Errorf("approve with metadata = %+v", d)
	}
	if d := got["b"]; d.Approved || d.Message != "deleting is not allowed" {
		t.Errorf("deny = %+v", d)
	}
	if d := got["c"]; !d.Approved || string(d.OverrideArgs) != `{"to":"review@example.com"}` {
		t.Errorf("approve with args = %+v", d)
	}
	if _, ok := got["d"]; ok {
		t.Error("an escalated request got a decision")
	}
	if d := got["e"]; !d.Approved || !failedOnce.Load() {
		t.Errorf("a decider error did not hand the request back: %+v", d)
	}
}

func TestPolicyIsADecider(t *testing.T) {
	p, err := approval.ParsePolicy([]byte(`
rules:
  - tool: delete_file
    action: deny
    message: no deleting
  - tool: "*"
    when: args.amount < 1000
    action: approve
`))
	if err != nil {
		t.Fatal(err)
	}
	nc, b := setup(t)
	bot, err := approval.New(nc, approval.Config{ID: "policy"}, p)
	if err != nil {
		t.Fatal(err)
	}
	bustest.Run(t, "bot", bot.Run)
	request(t, b, "r2", "a", "delete_file", `{"path":"x"}`)
	request(t, b, "r2", "b", "transfer", `{"amount":10}`)
	var ds []wire.Decision
	bustest.Poll(t, bustest.Timeout, "two decisions", func() (bool, string) {
		ds = bustest.Decisions(t, b, "r2")
		return len(ds) == 2, ""
	})
	for _, d := range ds {
		want := d.ToolCallID == "b"
		if d.Approved != want || len(d.Signature) != 0 {
			t.Errorf("decision %+v", d)
		}
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	nc, _ := setup(t)
	approve := approval.DeciderFunc(func(context.Context, approval.Request) (approval.Verdict, error) { return approval.Approve(), nil })
	for name, c := range map[string]approval.Config{
		"no id":     {},
		"dotted id": {ID: "a.b"},
		"short key": {ID: "a", Key: ed25519.PrivateKey{1, 2}},
		"bad tool":  {ID: "a", Tool: "x y"},
	} {
		if _, err := approval.New(nc, c, approve); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := approval.New(nc, approval.Config{ID: "a"}, nil); err == nil {
		t.Error("nil decider accepted")
	}
}

func TestWithMetadataOnlyOnAnApproval(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		v    approval.Verdict
		want string
	}{
		{"approve", approval.Approve().WithMetadata(map[string]int{"n": 1}), "approve"},
		{"deny", approval.Deny("no").WithMetadata(map[string]int{"n": 1}), "invalid: metadata: only an approval gives its tool metadata"},
		{"not an object", approval.Approve().WithMetadata([]int{1}), "invalid: metadata: want a JSON object"},
	} {
		if got := tc.v.String(); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
