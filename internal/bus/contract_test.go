package bus_test

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/wire"
)

// A worker written in another language only binds to call_<tool>: the
// orchestrator's first publication for the tool creates it with the
// settings that carry the guarantees, so a call the foreign worker keeps
// failing ends "exhausted 5 deliveries", not by its deadline.
func TestForeignWorkerBindsToTheCallConsumer(t *testing.T) {
	t.Parallel()
	srv := bustest.NewServer(t)
	orch := bustest.Connect(t, srv, "orchestrator")
	bustest.Setup(t, orch)
	ctx := bustest.Context(t)

	md, err := orch.HandleMaxDeliveries(ctx, bus.MaxDeliveriesConfig{})
	if err != nil {
		t.Fatal(err)
	}
	stop(t, md)
	replies := make(chan bus.Reply, 4)
	consumeReplies(t, orch, "orchestrator", bus.ConsumeConfig{AckWait: 2 * time.Second},
		func(_ context.Context, d *bus.Delivery[bus.Reply]) error { replies <- d.Msg; return nil })

	call := bustest.SampleCall("run1", "c1")
	call.ToolName = "flaky"
	o, err := bus.CallMessage(call)
	if err != nil {
		t.Fatal(err)
	}
	// The orchestrator's path: publishBatch hands its calls to PublishBatch.
	if err := orch.PublishBatch(ctx, []bus.Outgoing{o}); err != nil {
		t.Fatal(err)
	}

	// A plain NATS client, as another language has: no toolgate code.
	nc, err := nats.Connect(srv.ClientURL(), nats.Name("foreign worker"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := js.Consumer(ctx, wire.StreamCalls, "call_flaky")
	if err != nil {
		t.Fatalf("bind to call_flaky before any tool-worker ran: %v", err)
	}
	want, err := bus.CallConsumerConfig("flaky")
	if err != nil {
		t.Fatal(err)
	}
	got := cons.CachedInfo().Config
	if got.MaxDeliver != 5 || got.MaxDeliver != want.MaxDeliver || got.AckWait != want.AckWait ||
		got.AckPolicy != jetstream.AckExplicitPolicy || got.FilterSubject != "toolgate.call.flaky" ||
		got.MaxAckPending != want.MaxAckPending {
		t.Errorf("call_flaky: %+v, want %+v", got, want)
	}

	var deliveries atomic.Int64
	cc, err := cons.Consume(func(m jetstream.Msg) {
		deliveries.Add(1)
		_ = m.Nak() // the call keeps failing
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cc.Stop)

	r := bustest.Recv(t, replies, "the failed reply")
	if r.Call == nil || r.Call.Outcome != wire.OutcomeFailed || r.Call.Message != "exhausted 5 deliveries" || r.Call.ToolCallID != "c1" {
		t.Fatalf("reply %+v, want failed \"exhausted 5 deliveries\"", r.Call)
	}
	if n := deliveries.Load(); n != 5 {
		t.Errorf("the foreign worker got %d deliveries, want 5", n)
	}
}

// A tool-worker's own settings (here a shorter ack wait) are not undone by
// the orchestrator's publications.
func TestCallConsumerKeepsAWorkersSettings(t *testing.T) {
	t.Parallel()
	srv := bustest.NewServer(t)
	orch := bustest.Connect(t, srv, "orchestrator")
	bustest.Setup(t, orch)
	worker := bustest.Connect(t, srv, "worker")
	consumeCalls(t, worker, "weather", bus.ConsumeConfig{AckWait: 3 * time.Second},
		func(context.Context, *bus.Delivery[wire.CallRequest]) error { return nil })
	publishCall(t, orch, bustest.SampleCall("run1", "c1"))
	cons, err := orch.JetStream().Consumer(bustest.Context(t), wire.StreamCalls, "call_weather")
	if err != nil {
		t.Fatal(err)
	}
	if got := cons.CachedInfo().Config.AckWait; got != 3*time.Second {
		t.Errorf("ack wait %s after the orchestrator published, want the worker's 3s", got)
	}
}

// protocolDoc is docs/protocol.md, the wire contract for other languages.
func protocolDoc(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../docs/protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// tableRows returns the cells of the rows of doc's tables whose first cell
// matches first.
func tableRows(doc string, first *regexp.Regexp) [][]string {
	var rows [][]string
	for _, line := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(line, "|") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if first.MatchString(cells[0]) {
			rows = append(rows, cells)
		}
	}
	return rows
}

var backticked = regexp.MustCompile("`([^`]+)`")

// fill replaces the placeholders of a template from the doc.
func fill(template string, values map[string]string) string {
	return regexp.MustCompile(`<[a-z_]+>`).ReplaceAllStringFunc(template, func(p string) string {
		if v, ok := values[p[1:len(p)-1]]; ok {
			return v
		}
		return p
	})
}

// subjectMatches is NATS subject matching of a filter with * and >.
func subjectMatches(filter, subject string) bool {
	f, s := strings.Split(filter, "."), strings.Split(subject, ".")
	for i, tok := range f {
		if tok == ">" {
			return len(s) > i
		}
		if i >= len(s) || (tok != "*" && tok != s[i]) {
			return false
		}
	}
	return len(f) == len(s)
}

// The streams and subjects docs/protocol.md states are the ones Setup
// creates, each subject captured by its stream and built by the code as
// the doc writes it.
func TestProtocolDocStreamsAndSubjects(t *testing.T) {
	t.Parallel()
	doc := protocolDoc(t)
	values := map[string]string{"tool": "T", "run_id": "R", "conversation_id": "C", "kind": "decode",
		"stream": wire.StreamCalls, "consumer": "call_T"}
	built := map[string]func() (string, error){
		"toolgate.call.<tool>":             func() (string, error) { return wire.CallSubject("T") },
		"toolgate.approval.<tool>":         func() (string, error) { return wire.ApprovalSubject("T") },
		"toolgate.reply.<run_id>.call":     func() (string, error) { return wire.CallReplySubject("R") },
		"toolgate.reply.<run_id>.approval": func() (string, error) { return wire.DecisionSubject("R") },
		"toolgate.event.<conversation_id>": func() (string, error) { return wire.EventSubject("C") },
		"toolgate.dlq.<kind>":              func() (string, error) { return wire.DLQSubject("decode") },
		"toolgate.audit.<run_id>":          func() (string, error) { return wire.AuditSubject("R") },
		"toolgate.conv.<conversation_id>":  func() (string, error) { return bus.ConversationSubject("C"), nil },
	}
	configs := map[string][]string{}
	for _, sc := range (bus.SetupConfig{}).StreamConfigs() {
		configs[sc.Name] = sc.Subjects
	}
	rows := tableRows(doc, regexp.MustCompile("^`TOOLGATE_"))
	seen := map[string]bool{}
	for _, row := range rows {
		stream := strings.Trim(row[0], "`")
		seen[stream] = true
		if _, ok := configs[stream]; !ok {
			t.Errorf("the doc names stream %s, which Setup does not create", stream)
			continue
		}
		for _, m := range backticked.FindAllStringSubmatch(row[1], -1) {
			subj := fill(m[1], values)
			var by []string
			for name, fs := range configs {
				for _, f := range fs {
					if subjectMatches(f, subj) {
						by = append(by, name)
					}
				}
			}
			if len(by) != 1 || by[0] != stream {
				t.Errorf("%s (%s) is captured by %v, the doc says %s", m[1], subj, by, stream)
			}
			if f, ok := built[m[1]]; ok {
				if got, err := f(); err != nil || got != subj {
					t.Errorf("the code builds %s as %q (%v), the doc %q", m[1], got, err, subj)
				}
				delete(built, m[1])
			}
		}
	}
	for name := range configs {
		if !seen[name] {
			t.Errorf("stream %s is not in the doc's table", name)
		}
	}
	for tmpl := range built {
		t.Errorf("subject %s is not in the doc's table", tmpl)
	}
}

// The message ids docs/protocol.md states are the ones the publishers of
// calls, approval requests, results and decisions (the Outgoing builders
// that bus, the tool-worker and the approver publish with) set.
func TestProtocolDocMessageIDs(t *testing.T) {
	t.Parallel()
	doc := protocolDoc(t)
	call := bustest.SampleCall("run1", "c1")
	call.Attempt = 3
	appr := bustest.SampleApproval("run1", "c2")
	reply := bustest.SampleReply("run1", "c3")
	dec := bustest.SampleDecision("run1", "c4")
	if err := dec.Sign(ed25519.NewKeyFromSeed(make([]byte, 32))); err != nil {
		t.Fatal(err)
	}
	// The doc's rule for <hash>, computed here on its own.
	body, err := dec.SigningBytes()
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(append(body, dec.Signature...))
	build := map[string]func() (bus.Outgoing, error){
		"CallRequest":     func() (bus.Outgoing, error) { return bus.CallMessage(call) },
		"ApprovalRequest": func() (bus.Outgoing, error) { return bus.ApprovalMessage(appr) },
		"CallReply":       func() (bus.Outgoing, error) { return bus.CallReplyMessage(reply) },
		"Decision":        func() (bus.Outgoing, error) { return bus.DecisionMessage(dec) },
	}
	values := map[string]map[string]string{
		"CallRequest":     {"run_id": call.RunID, "tool_call_id": call.ToolCallID, "tool": call.ToolName, "attempt": "3"},
		"ApprovalRequest": {"run_id": appr.RunID, "tool_call_id": appr.ToolCallID, "tool": appr.ToolName, "attempt": strconv.Itoa(appr.Attempt)},
		"CallReply":       {"run_id": reply.RunID, "tool_call_id": reply.ToolCallID},
		"Decision":        {"run_id": dec.RunID, "tool_call_id": dec.ToolCallID, "approver_id": dec.ApproverID, "hash": hex.EncodeToString(sum[:8])},
	}
	rows := tableRows(doc, regexp.MustCompile(`^(CallRequest|ApprovalRequest|CallReply|Decision)$`))
	if len(rows) != len(build) {
		t.Fatalf("the doc's id table has %d rows, want %d", len(rows), len(build))
	}
	for _, row := range rows {
		o, err := build[row[0]]()
		if err != nil {
			t.Fatal(err)
		}
		subj := fill(strings.Trim(row[1], "`"), values[row[0]])
		id := fill(strings.Trim(row[2], "`"), values[row[0]])
		if o.Subject != subj || o.MsgID != id {
			t.Errorf("%s: the code publishes on %q with id %q, the doc says %q and %q", row[0], o.Subject, o.MsgID, subj, id)
		}
	}
	// A corrected decision gets another id.
	fixed := dec
	fixed.Message = "corrected"
	if a, b := mustID(t, dec), mustID(t, fixed); a == b {
		t.Errorf("a corrected decision keeps the id %s", a)
	}
}

func mustID(t *testing.T, d wire.Decision) string {
	t.Helper()
	id, err := d.MsgID()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// The call consumer's configuration in docs/protocol.md is, field for
// field, the one the orchestrator creates (CallConsumerConfig).
func TestProtocolDocCallConsumer(t *testing.T) {
	t.Parallel()
	doc := protocolDoc(t)
	m := regexp.MustCompile("(?s)```json call_consumer\n(.*?)```").FindStringSubmatch(doc)
	if m == nil {
		t.Fatal("no call_consumer block in docs/protocol.md")
	}
	var stated map[string]any
	if err := json.Unmarshal([]byte(strings.ReplaceAll(m[1], "<tool>", "T")), &stated); err != nil {
		t.Fatalf("the doc's block: %v", err)
	}
	cc, err := bus.CallConsumerConfig("T")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(cc)
	if err != nil {
		t.Fatal(err)
	}
	var code map[string]any
	if err := json.Unmarshal(raw, &code); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(code, stated); diff != "" {
		t.Errorf("call_<tool> (-code +doc):\n%s", diff)
	}
}

// Every dead-letter kind and header is in docs/protocol.md's tables.
func TestProtocolDocDeadLetters(t *testing.T) {
	t.Parallel()
	doc := protocolDoc(t)
	for _, kind := range []string{bus.DLQDecode, bus.DLQInvalid, bus.DLQHandler, bus.DLQMaxDeliveries} {
		if !strings.Contains(doc, "| `"+kind+"` |") {
			t.Errorf("dead-letter kind %s is not in the doc", kind)
		}
	}
	for _, h := range []string{wire.HeaderDLQReason, wire.HeaderDLQSubject, wire.HeaderDLQStream, wire.HeaderDLQSeq,
		wire.HeaderDLQConsumer, wire.HeaderDLQTruncated, "Toolgate-DLQ-Msg-Id"} {
		if !strings.Contains(doc, "| `"+h+"` |") {
			t.Errorf("dead-letter header %s is not in the doc", h)
		}
	}
}

// docs/other-languages.md keeps the short version, and README.md links
// the protocol: what the short version says of ids and the call consumer
// agrees with docs/protocol.md.
func TestShortVersionAgreesWithProtocolDoc(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "docs/protocol.md") {
		t.Error("README does not link docs/protocol.md")
	}
	b, err = os.ReadFile("../../docs/other-languages.md")
	if err != nil {
		t.Fatal(err)
	}
	short, doc := string(b), protocolDoc(t)
	if !strings.Contains(short, "(protocol.md)") {
		t.Error("docs/other-languages.md does not link protocol.md")
	}
	ids := regexp.MustCompile("Nats-Msg-Id: (<run_id>[^`]*)`").FindAllStringSubmatch(short, -1)
	if len(ids) == 0 {
		t.Error("docs/other-languages.md gives no Nats-Msg-Id")
	}
	for _, m := range ids {
		if !strings.Contains(doc, "`"+m[1]+"`") {
			t.Errorf("docs/other-languages.md gives the id %s, which docs/protocol.md does not", m[1])
		}
	}
	for _, m := range regexp.MustCompile(`max_deliver(?:\s|\x60)*(\d+)`).FindAllStringSubmatch(short, -1) {
		if m[1] != "5" {
			t.Errorf("docs/other-languages.md says max_deliver %s", m[1])
		}
	}
}
