package schemas_test

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/api"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/deferred"
	"github.com/toolgate/toolgate/internal/orchestrator"
	"github.com/toolgate/toolgate/schemas"
	"github.com/toolgate/toolgate/wire"
)

// goTypes maps every schema to the Go type whose JSON form it describes.
var goTypes = map[string]reflect.Type{
	"call_request":     reflect.TypeFor[wire.CallRequest](),
	"approval_request": reflect.TypeFor[wire.ApprovalRequest](),
	"call_reply":       reflect.TypeFor[wire.CallReply](),
	"decision":         reflect.TypeFor[wire.Decision](),
	"event":            reflect.TypeFor[wire.Event](),
	"event_batch":      reflect.TypeFor[wire.EventBatch](),
	"requests":         reflect.TypeFor[deferred.Requests](),
	"results":          reflect.TypeFor[deferred.Results](),
	"tool_advert":      reflect.TypeFor[bus.ToolAdvert](),
	"conversation":     reflect.TypeFor[api.ConversationView](),
	"run":              reflect.TypeFor[orchestrator.RunInfo](),
	"pending":          reflect.TypeFor[pendingAnswer](),
	// The approvers' questions to the orchestrator and its answers.
	"approval_status_request": reflect.TypeFor[wire.ApprovalStatusRequest](),
	"approval_status_reply":   reflect.TypeFor[wire.ApprovalStatusReply](),
	"decision_outcome":        reflect.TypeFor[wire.DecisionOutcome](),
	"grant":                   reflect.TypeFor[wire.Grant](),
}

// pendingAnswer is what GET /v1/pending writes (a map in package api).
type pendingAnswer struct {
	Pending []api.PendingView `json:"pending"`
}

func TestNamesMatchGoTypes(t *testing.T) {
	t.Parallel()
	var want []string
	for n := range goTypes {
		want = append(want, n)
	}
	slices.Sort(want)
	if got := schemas.Names(); !slices.Equal(got, want) {
		t.Errorf("schemas %v, Go types %v", got, want)
	}
}

// decodeStrict decodes doc into a new value of typ, refusing unknown fields,
// and runs the type's own validation where it has one.
func decodeStrict(t *testing.T, typ reflect.Type, doc []byte) (any, error) {
	t.Helper()
	p := reflect.New(typ)
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.DisallowUnknownFields()
	if err := dec.Decode(p.Interface()); err != nil {
		return nil, err
	}
	if v, ok := p.Elem().Interface().(interface{ Validate() error }); ok {
		if err := v.Validate(); err != nil {
			return nil, err
		}
	}
	return p.Elem().Interface(), nil
}

func TestExamples(t *testing.T) {
	t.Parallel()
	examples := os.DirFS("examples")
	for _, name := range schemas.Names() {
		files, err := fs.Glob(examples, name+"/*.json")
		if err != nil {
			t.Fatal(err)
		}
		if len(files) < 2 {
			t.Errorf("%s: %d examples, want at least 2", name, len(files))
		}
		for _, file := range files {
			t.Run(file, func(t *testing.T) {
				t.Parallel()
				doc, err := fs.ReadFile(examples, file)
				if err != nil {
					t.Fatal(err)
				}
				if err := schemas.Validate(name, doc); err != nil {
					t.Fatalf("schema: %v", err)
				}
				v, err := decodeStrict(t, goTypes[name], doc)
				if err != nil {
					t.Fatalf("Go: %v", err)
				}
				// What Go makes of the example is valid too.
				again, err := json.Marshal(v)
				if err != nil {
					t.Fatalf("re-encode: %v", err)
				}
				if err := schemas.Validate(name, again); err != nil {
					t.Errorf("re-encoded %s: %v", again, err)
				}
			})
		}
	}
}

// The signed decision examples are test vectors; README.md there names the key.
func TestDecisionExampleSignatures(t *testing.T) {
	t.Parallel()
	key := ed25519.NewKeyFromSeed([]byte("toolgate-example-signing-key-001")).Public().(ed25519.PublicKey)
	files, err := fs.Glob(os.DirFS("examples"), "decision/*.json")
	if err != nil {
		t.Fatal(err)
	}
	signed := 0
	for _, file := range files {
		doc, err := os.ReadFile(path.Join("examples", file))
		if err != nil {
			t.Fatal(err)
		}
		var d wire.Decision
		if err := json.Unmarshal(doc, &d); err != nil {
			t.Fatal(err)
		}
		if d.Signature == nil {
			continue
		}
		signed++
		if err := d.Verify(key); err != nil {
			t.Errorf("%s: %v", file, err)
		}
		d.Message += "!"
		if d.Verify(key) == nil {
			t.Errorf("%s: a changed decision still verifies", file)
		}
	}
	if signed < 2 {
		t.Errorf("%d signed decision examples, want at least 2", signed)
	}
}

func mustDigest(t *testing.T, args string) string {
	t.Helper()
	d, err := deferred.ArgsDigest(json.RawMessage(args))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestGoValuesValidate(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC)
	local := time.Date(2026, 3, 1, 13, 0, 0, 0, time.FixedZone("CET", 3600))
	key := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, 32))
	signed := func(d wire.Decision) wire.Decision {
		if err := d.Sign(key); err != nil {
			t.Fatal(err)
		}
		return d
	}
	raw := func(s string) json.RawMessage { return json.RawMessage(s) }
	tests := []struct {
		name   string
		schema string
		value  any
	}{
		{"call request", "call_request", wire.CallRequest{RunID: "r1", ConversationID: "c1", ToolCallID: "call_1", ToolName: "get_location", Args: raw(`{"precision":"city"}`), Deadline: now, Attempt: 1}},
		{"call request with metadata", "call_request", wire.CallRequest{RunID: "r1", ConversationID: "c1", ToolCallID: "call 1/ü", ToolName: "run_job", Args: raw(`{}`), Metadata: raw(`{"queue":"slow"}`), Deadline: local, Attempt: 3}},
		{"approval request", "approval_request", wire.ApprovalRequest{RunID: "r1", ConversationID: "c1", ToolCallID: "call_2", ToolName: "delete_file", Args: raw(`{"path":"a.txt"}`), ArgsDigest: mustDigest(t, `{"path":"a.txt"}`), Deadline: now, Attempt: 1}},
		{"approval request full", "approval_request", wire.ApprovalRequest{RunID: "r1", ConversationID: "c1", ToolCallID: "call_2", ToolName: "update_file", ToolDescription: "Update a file", Parameters: raw(`{"type":"object"}`), Args: raw(`{"path":".env","content":""}`), ArgsDigest: mustDigest(t, `{"path":".env","content":""}`), Metadata: raw(`{"reason":"protected"}`), Deadline: now, Attempt: 2}},
		{"reply return", "call_reply", wire.CallReply{RunID: "r1", ToolCallID: "call_1", Outcome: wire.OutcomeReturn, Value: raw(`"Berlin"`), WorkerID: "w1"}},
		{"reply return without value", "call_reply", wire.CallReply{RunID: "r1", ToolCallID: "call_1", Outcome: wire.OutcomeReturn}},
		{"reply return with extras", "call_reply", wire.CallReply{RunID: "r1", ToolCallID: "call_1", Outcome: wire.OutcomeReturn, Value: raw(`{"order":17}`), Content: "Receipt", Metadata: raw(`{"cents":1999}`)}},
		{"reply retry", "call_reply", wire.CallReply{RunID: "r1", ToolCallID: "call_1", Outcome: wire.OutcomeRetry, Message: "use ISO dates"}},
		{"reply failed", "call_reply", wire.CallReply{RunID: "r1", ToolCallID: "call_1", Outcome: wire.OutcomeFailed, Message: "timed out"}},
		{"decision approved", "decision", signed(wire.Decision{RunID: "r1", ToolCallID: "call_2", ArgsDigest: mustDigest(t, `{"path":"a.txt"}`), Approved: true, ApproverID: "alice", DecidedAt: now})},
		{"decision approved with override", "decision", signed(wire.Decision{RunID: "r1", ToolCallID: "call_2", ArgsDigest: mustDigest(t, `{"path":"a.txt"}`), Approved: true, OverrideArgs: raw(`{"path":"b.txt"}`), ApproverID: "alice", DecidedAt: local})},
		{"decision denied", "decision", signed(wire.Decision{RunID: "r1", ToolCallID: "call_2", ArgsDigest: mustDigest(t, `{}`), Approved: false, Message: "no", ApproverID: "bot", DecidedAt: now})},
		{"decision unsigned", "decision", wire.Decision{RunID: "r1", ToolCallID: "call_2", ArgsDigest: mustDigest(t, `{}`), ApproverID: "bot", DecidedAt: now}},
		{"event minimal", "event", wire.Event{ConversationID: "c1", Type: "run_started", Time: now}},
		{"event full", "event", wire.Event{ConversationID: "c1", RunID: "r1", Type: "tool_result", ToolCallID: "call_1", Data: raw(`{"kind":"tool_result","part":{"part_kind":"tool-return","tool_name":"t","tool_call_id":"call_1","value":1}}`), Time: local}},
		{"event of an unknown type", "event", wire.Event{ConversationID: "c1", Type: "something_new", Data: raw(`[1,"two"]`), Time: now}},
		{"run", "run", orchestrator.RunInfo{RunID: "r1_c1", ConversationID: "c1", Status: conversation.StatusPaused}},
		{"run queued", "run", orchestrator.RunInfo{RunID: "r2_c1", ConversationID: "c1", Status: conversation.StatusQueued}},
		{"pending none", "pending", pendingAnswer{Pending: []api.PendingView{}}},
		{"pending", "pending", pendingAnswer{Pending: []api.PendingView{{ConversationID: "c1", RunID: "r1_c1", ToolCallID: "d1", ToolName: "delete_file", Kind: "approval", Args: raw(`{"path":"a"}`), Deadline: now}}}},
		{"tool advert", "tool_advert", bus.ToolAdvert{Name: "now", Kind: "call", Executor: "exec", WorkerID: "w1", At: now}},
		{"tool advert go", "tool_advert", bus.ToolAdvert{Name: "get_weather", Description: "Weather", Parameters: raw(`{"type":"object"}`), Kind: "call", Executor: "go", WorkerID: "w1", At: now}},
		{"tool advert mcp", "tool_advert", bus.ToolAdvert{Name: "ev_echo", Description: "Echoes", Parameters: raw(`{"type":"object"}`), Kind: "call", Executor: "mcp", MCPServer: "ev", MCPTool: "echo", Annotations: raw(`{"readOnlyHint":true}`), WorkerID: "w1", At: local}},
		{"grant", "grant", wire.Grant{ID: "g1", Tool: "update_file", Approved: true, GrantedBy: "alice", GrantedAt: now}},
		{"grant full", "grant", wire.Grant{ID: "g2", Tool: "delete_file", ConversationID: "c1", ArgsDigest: mustDigest(t, `{}`), Caller: "ann", Message: "no",
			GrantedBy: "api", GrantedAt: local, ExpiresAt: local.Add(time.Hour), Signature: make([]byte, 64)}},
		{"requests empty", "requests", deferred.Requests{}},
		{"requests", "requests", deferred.Requests{
			Calls:     []deferred.Call{{ToolName: "run_job", Args: raw(`{"job":"x"}`), ToolCallID: "job1"}, {ToolName: "now", ToolCallID: "now1"}},
			Approvals: []deferred.Call{{ToolName: "delete_file", Args: raw(`{"path":"a.txt"}`), ToolCallID: "del1"}},
			Metadata:  map[string]json.RawMessage{"job1": raw(`{"queue":"slow"}`), "del1": raw(`"why"`)},
		}},
		{"status request", "approval_status_request", wire.ApprovalStatusRequest{Calls: []wire.CallRef{{RunID: "r1", ToolCallID: "call 1/ü"}}}},
		{"status reply", "approval_status_reply", wire.ApprovalStatusReply{Calls: []wire.ApprovalStatus{{RunID: "r1", ToolCallID: "call_1", State: wire.StateDecided, By: "alice"}}}},
		{"status reply error", "approval_status_reply", wire.ApprovalStatusReply{Calls: []wire.ApprovalStatus{}, Error: "status unknown for now"}},
		{"outcome", "decision_outcome", wire.DecisionOutcome{RunID: "r1", ToolCallID: "call_1", ApproverID: "bot", DecisionID: "r1/call_1/decision.bot.0011223344556677", Verdict: wire.VerdictLate, Reason: "approval expired"}},
		{"results empty", "results", deferred.Results{}},
		{"results every form", "results", deferred.Results{
			Approvals: map[string]deferred.Decision{
				"a1": deferred.Approved{},
				"a2": deferred.Approved{OverrideArgs: raw(`{"path":"b.txt"}`)},
				"a3": deferred.Denied{Message: deferred.DefaultDenyMessage},
				"a4": deferred.Denied{},
			},
			Calls: map[string]deferred.Result{
				"v1": deferred.Value{Value: raw(`"Berlin"`)},
				"v2": deferred.Value{Value: raw(`null`)},
				"v3": deferred.Value{},
				"v4": deferred.Value{Value: raw(`{"kind":"other","x":[1,2]}`)},
				"r1": deferred.Return{Value: raw(`{"order":17}`), Content: "Receipt", Metadata: raw(`{"cents":1999}`)},
				"r2": deferred.Return{},
				"r3": deferred.Return{Value: raw(`{"kind":"tool-failed","message":"data, not a failure"}`)},
				"m1": deferred.Retry{Message: "again"},
				"f1": deferred.Failed{Message: "boom"},
				"f2": deferred.Failed{},
			},
			Metadata: map[string]json.RawMessage{"a1": raw(`{"by":"alice"}`), "a2": nil},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := reflect.TypeOf(tt.value); got != goTypes[tt.schema] {
				t.Fatalf("value of type %v for schema %s", got, tt.schema)
			}
			doc, err := json.Marshal(tt.value)
			if err != nil {
				t.Fatal(err)
			}
			if err := schemas.Validate(tt.schema, doc); err != nil {
				t.Errorf("%s: %v", doc, err)
			}
		})
	}
}

func TestInvalidDocuments(t *testing.T) {
	t.Parallel()
	// Each document breaks the schema; the Go side must refuse it too
	// (decoding strictly, then the type's own validation).
	digest := strings.Repeat("ab", 32)
	tests := []struct {
		schema string
		name   string
		doc    string
	}{
		{"call_request", "missing tool_call_id", `{"run_id":"r","conversation_id":"c","tool_name":"t","args":{},"deadline":"2026-03-01T12:00:00Z","attempt":1}`},
		{"call_request", "args not an object", `{"run_id":"r","conversation_id":"c","tool_call_id":"i","tool_name":"t","args":"{}","deadline":"2026-03-01T12:00:00Z","attempt":1}`},
		{"call_request", "run_id with a dot", `{"run_id":"r.1","conversation_id":"c","tool_call_id":"i","tool_name":"t","args":{},"deadline":"2026-03-01T12:00:00Z","attempt":1}`},
		{"call_request", "deadline not RFC 3339", `{"run_id":"r","conversation_id":"c","tool_call_id":"i","tool_name":"t","args":{},"deadline":"tomorrow","attempt":1}`},
		{"approval_request", "missing run_id", `{"conversation_id":"c","tool_call_id":"i","tool_name":"t","args":{},"args_digest":"` + digest + `","deadline":"2026-03-01T12:00:00Z","attempt":1}`},
		{"approval_request", "digest not hex", `{"run_id":"r","conversation_id":"c","tool_call_id":"i","tool_name":"t","args":{},"args_digest":"sha256:abc","deadline":"2026-03-01T12:00:00Z","attempt":1}`},
		{"approval_request", "attempt a string", `{"run_id":"r","conversation_id":"c","tool_call_id":"i","tool_name":"t","args":{},"args_digest":"` + digest + `","deadline":"2026-03-01T12:00:00Z","attempt":"1"}`},
		{"call_reply", "missing tool_call_id", `{"run_id":"r","outcome":"return","value":1}`},
		{"call_reply", "unknown outcome", `{"run_id":"r","tool_call_id":"i","outcome":"ok"}`},
		{"call_reply", "retry without message", `{"run_id":"r","tool_call_id":"i","outcome":"retry"}`},
		{"call_reply", "metadata not an object", `{"run_id":"r","tool_call_id":"i","outcome":"return","metadata":[1]}`},
		{"decision", "missing tool_call_id", `{"run_id":"r","args_digest":"` + digest + `","approved":true,"approver_id":"a","decided_at":"2026-03-01T12:00:00Z"}`},
		{"decision", "approved a string", `{"run_id":"r","tool_call_id":"i","args_digest":"` + digest + `","approved":"yes","approver_id":"a","decided_at":"2026-03-01T12:00:00Z"}`},
		{"decision", "override on a denial", `{"run_id":"r","tool_call_id":"i","args_digest":"` + digest + `","approved":false,"override_args":{"a":1},"approver_id":"a","decided_at":"2026-03-01T12:00:00Z"}`},
		{"decision", "signature too short", `{"run_id":"r","tool_call_id":"i","args_digest":"` + digest + `","approved":true,"approver_id":"a","decided_at":"2026-03-01T12:00:00Z","signature":"AAAA"}`},
		{"event", "missing conversation_id", `{"type":"run_started","time":"2026-03-01T12:00:00Z"}`},
		{"event", "type a number", `{"conversation_id":"c","type":1,"time":"2026-03-01T12:00:00Z"}`},
		{"tool_advert", "missing worker_id", `{"name":"t","kind":"call","executor":"exec","at":"2026-03-01T12:00:00Z"}`},
		{"tool_advert", "kind approval", `{"name":"t","kind":"approval","executor":"exec","worker_id":"w","at":"2026-03-01T12:00:00Z"}`},
		{"tool_advert", "unknown executor", `{"name":"t","kind":"call","executor":"shell","worker_id":"w","at":"2026-03-01T12:00:00Z"}`},
		{"tool_advert", "name with a dot", `{"name":"a.b","kind":"call","executor":"exec","worker_id":"w","at":"2026-03-01T12:00:00Z"}`},
		{"tool_advert", "parameters a string", `{"name":"t","parameters":"{}","kind":"call","executor":"exec","worker_id":"w","at":"2026-03-01T12:00:00Z"}`},
		{"grant", "missing tool", `{"id":"g","approved":true,"granted_by":"a","granted_at":"2026-03-01T12:00:00Z"}`},
		{"grant", "message on an approval", `{"id":"g","tool":"t","approved":true,"message":"x","granted_by":"a","granted_at":"2026-03-01T12:00:00Z"}`},
		{"grant", "digest not hex", `{"id":"g","tool":"t","approved":true,"args_digest":"x","granted_by":"a","granted_at":"2026-03-01T12:00:00Z"}`},
		{"requests", "call without id", `{"calls":[{"tool_name":"t","args":{}}],"approvals":[],"metadata":{}}`},
		{"requests", "args a string", `{"calls":[],"approvals":[{"tool_name":"t","args":"{}","tool_call_id":"i"}],"metadata":{}}`},
		{"requests", "unknown field", `{"calls":[],"approvals":[],"metadata":{},"pending":[]}`},
		{"requests", "calls an object", `{"calls":{},"approvals":[],"metadata":{}}`},
		{"results", "string decision", `{"approvals":{"del1":"yes"},"calls":{},"metadata":{}}`},
		{"results", "null decision", `{"approvals":{"del1":null}}`},
		{"results", "decision object without kind", `{"approvals":{"del1":{"approved":true}}}`},
		{"results", "override not an object", `{"approvals":{"a":{"kind":"tool-approved","override_args":[1]}}}`},
		{"results", "tool-return without return_value", `{"calls":{"c":{"kind":"tool-return","content":"x"}}}`},
		{"results", "model-retry message a number", `{"calls":{"c":{"kind":"model-retry","message":1}}}`},
		{"results", "tool-failed with an extra field", `{"calls":{"c":{"kind":"tool-failed","message":"x","code":1}}}`},
		{"results", "approvals a list", `{"approvals":[true]}`},
	}
	for _, tt := range tests {
		t.Run(tt.schema+"/"+tt.name, func(t *testing.T) {
			t.Parallel()
			if err := schemas.Validate(tt.schema, []byte(tt.doc)); err == nil {
				t.Errorf("schema accepted %s", tt.doc)
			}
			if _, err := decodeStrict(t, goTypes[tt.schema], []byte(tt.doc)); err == nil {
				t.Errorf("Go accepted %s", tt.doc)
			}
		})
	}
}

// Every field of a Go type is a property of its schema and the other way
// round, so the two cannot drift apart silently.
func TestSchemaPropertiesMatchGoFields(t *testing.T) {
	t.Parallel()
	for name, typ := range goTypes {
		doc := schemaDoc(t, name)
		props, _ := doc["properties"].(map[string]any)
		var inSchema, inGo []string
		for p := range props {
			inSchema = append(inSchema, p)
		}
		for f := range typ.Fields() {
			tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if tag != "" && tag != "-" {
				inGo = append(inGo, tag)
			}
		}
		slices.Sort(inSchema)
		slices.Sort(inGo)
		if !slices.Equal(inSchema, inGo) {
			t.Errorf("%s: schema properties %v, Go fields %v", name, inSchema, inGo)
		}
		defs, _ := doc["$defs"].(map[string]any)
		if call, ok := defs["call"].(map[string]any); ok && name == "requests" {
			var callProps, callFields []string
			for p := range call["properties"].(map[string]any) {
				callProps = append(callProps, p)
			}
			for f := range reflect.TypeFor[deferred.Call]().Fields() {
				tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
				callFields = append(callFields, tag)
			}
			slices.Sort(callProps)
			slices.Sort(callFields)
			if !slices.Equal(callProps, callFields) {
				t.Errorf("requests call: schema properties %v, Go fields %v", callProps, callFields)
			}
		}
	}
}

func TestSchemaHeadersAndDescriptions(t *testing.T) {
	t.Parallel()
	for _, name := range schemas.Names() {
		doc := schemaDoc(t, name)
		if got, want := doc["$id"], schemas.BaseURL+name+".schema.json"; got != want {
			t.Errorf("%s: $id %v, want %s", name, got, want)
		}
		if got := doc["$schema"]; got != "https://json-schema.org/draft/2020-12/schema" {
			t.Errorf("%s: $schema %v", name, got)
		}
		for _, missing := range undescribed(doc, name) {
			t.Errorf("no description: %s", missing)
		}
	}
}

// undescribed lists the properties and definitions under node that have no
// description. Conditional subschemas (if/then/not/oneOf) only constrain and
// are not visited.
func undescribed(node map[string]any, at string) []string {
	var out []string
	if d, _ := node["description"].(string); d == "" {
		out = append(out, at)
	}
	for _, key := range []string{"properties", "$defs"} {
		m, _ := node[key].(map[string]any)
		for k, v := range m {
			if sub, ok := v.(map[string]any); ok {
				out = append(out, undescribed(sub, at+"/"+key+"/"+k)...)
			}
		}
	}
	if items, ok := node["items"].(map[string]any); ok && items["$ref"] == nil {
		out = append(out, undescribed(items, at+"/items")...)
	}
	return out
}

func schemaDoc(t *testing.T, name string) map[string]any {
	t.Helper()
	b, err := schemas.Raw(name)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	return doc
}

func TestCompileByID(t *testing.T) {
	t.Parallel()
	if _, err := schemas.Compile(schemas.BaseURL + "results.schema.json"); err != nil {
		t.Errorf("by $id: %v", err)
	}
	if _, err := schemas.Compile("results.schema.json"); err != nil {
		t.Errorf("by file name: %v", err)
	}
	if _, err := schemas.Compile("nope"); err == nil {
		t.Error("unknown schema: no error")
	}
	if err := schemas.Validate("event", []byte(`{"conversation_id":"c","type":"x","time":"2026-03-01T12:00:00Z"} {}`)); err == nil {
		t.Error("trailing data: no error")
	}
}

// eventData maps each $defs entry of event.schema.json that is an
// orchestrator event's data to the Go type the orchestrator marshals.
var eventData = map[string]reflect.Type{
	"run_started":            reflect.TypeFor[wire.RunStarted](),
	"pending_call":           reflect.TypeFor[wire.PendingCall](),
	"run_completed":          reflect.TypeFor[wire.RunCompleted](),
	"run_failed":             reflect.TypeFor[wire.RunFailed](),
	"reply_applied":          reflect.TypeFor[wire.ReplyApplied](),
	"reply_refused":          reflect.TypeFor[wire.ReplyRefused](),
	"calls_expired":          reflect.TypeFor[wire.CallsExpired](),
	"conversation_cancelled": reflect.TypeFor[wire.ConversationCancelled](),
	"agent_unavailable":      reflect.TypeFor[wire.AgentUnavailable](),
	"tool_unserved":          reflect.TypeFor[wire.ToolUnserved](),
	"approval_escalated":     reflect.TypeFor[wire.ApprovalEscalated](),
}

// Every field of an event's data type is a property of its schema and the
// other way round; and each of its values validates in an event of its
// type.
func TestEventDataSchemasMatchGoTypes(t *testing.T) {
	t.Parallel()
	defs, _ := schemaDoc(t, "event")["$defs"].(map[string]any)
	for name, typ := range eventData {
		def, _ := defs[name].(map[string]any)
		props, _ := def["properties"].(map[string]any)
		var inSchema, inGo []string
		for p := range props {
			inSchema = append(inSchema, p)
		}
		for f := range typ.Fields() {
			if tag, _, _ := strings.Cut(f.Tag.Get("json"), ","); tag != "" && tag != "-" {
				inGo = append(inGo, tag)
			}
		}
		slices.Sort(inSchema)
		slices.Sort(inGo)
		if !slices.Equal(inSchema, inGo) {
			t.Errorf("event data %s: schema properties %v, Go fields %v", name, inSchema, inGo)
		}
	}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	yes := true
	for typ, data := range map[string]any{
		wire.EventRunStarted:            wire.RunStarted{Resume: true, Agent: "files", Replica: "orch-1"},
		wire.EventRunPaused:             []wire.PendingCall{{ConversationID: "c1", RunID: "r1", ToolCallID: "d1", ToolName: "delete_file", Kind: wire.ReplyKindApproval, Args: json.RawMessage(`{"path":"a"}`), Metadata: json.RawMessage(`{"reason":"protected"}`), Deadline: now}},
		wire.EventRunCompleted:          wire.RunCompleted{Output: "done"},
		wire.EventRunFailed:             wire.RunFailed{Error: "model request limit of 50 reached"},
		wire.EventReplyApplied:          wire.ReplyApplied{Kind: wire.ReplyKindApproval, Approved: &yes, ApproverID: "ann"},
		wire.EventReplyRefused:          wire.ReplyRefused{Kind: wire.ReplyKindCall, Verdict: "late", Reason: "past its deadline"},
		wire.EventCallDispatched:        wire.PendingCall{ConversationID: "c1", RunID: "r1", ToolCallID: "u1", ToolName: "update_file", Kind: wire.ReplyKindCall, Args: json.RawMessage(`{"path":"a"}`), Deadline: now},
		wire.EventCallsExpired:          wire.CallsExpired{Calls: 1, ToolCallIDs: []string{"d1"}},
		wire.EventConversationCancelled: wire.ConversationCancelled{Reason: "cancelled", ToolCallIDs: []string{}},
		wire.EventAgentUnavailable:      wire.AgentUnavailable{Agent: "files", Reason: "no live replica runs it", FailsAt: now},
		wire.EventToolUnserved:          wire.ToolUnserved{Tool: "get_weather", Reason: "no worker takes its calls", Deadline: now},
		wire.EventApprovalEscalated:     wire.ApprovalEscalated{Tool: "deploy", To: []string{"managers"}, Deadline: now},
	} {
		d, err := json.Marshal(data)
		if err != nil {
			t.Fatal(err)
		}
		doc, err := json.Marshal(wire.Event{ConversationID: "c1", RunID: "r1", Type: typ, Data: d, Time: now})
		if err != nil {
			t.Fatal(err)
		}
		if err := schemas.Validate("event", doc); err != nil {
			t.Errorf("%s: %v", doc, err)
		}
		// The schema holds the data to its type: the data of another
		// type does not pass.
		doc, err = json.Marshal(wire.Event{ConversationID: "c1", Type: typ, Data: json.RawMessage(`{"unrelated":1}`), Time: now})
		if err != nil {
			t.Fatal(err)
		}
		if err := schemas.Validate("event", doc); err == nil {
			t.Errorf("%s with unrelated data passes", typ)
		}
	}
}

// Every event type wire declares (its Event… constants, which the agent
// and the orchestrator emit) has its data schema in event.schema.json,
// applied by type, and is named in the description of "type". Before,
// approval_escalated had none, and its data passed unchecked.
func TestEveryEventTypeHasADataSchema(t *testing.T) {
	t.Parallel()
	f, err := parser.ParseFile(token.NewFileSet(), "../wire/events.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, decl := range f.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if !strings.HasPrefix(name.Name, "Event") || i >= len(vs.Values) {
					continue
				}
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					v, err := strconv.Unquote(lit.Value)
					if err != nil {
						t.Fatal(err)
					}
					types = append(types, v)
				}
			}
		}
	}
	if len(types) < 19 {
		t.Fatalf("found %d event types in wire/events.go: %v", len(types), types)
	}
	doc := schemaDoc(t, "event")
	defs, _ := doc["$defs"].(map[string]any)
	applied := map[string]string{}
	allOf, _ := doc["allOf"].([]any)
	for _, a := range allOf {
		var c struct {
			If struct {
				Properties struct {
					Type struct {
						Const string `json:"const"`
					} `json:"type"`
				} `json:"properties"`
			} `json:"if"`
			Then struct {
				Properties struct {
					Data struct {
						Ref string `json:"$ref"`
					} `json:"data"`
				} `json:"properties"`
			} `json:"then"`
		}
		b, _ := json.Marshal(a)
		if err := json.Unmarshal(b, &c); err != nil {
			t.Fatal(err)
		}
		applied[c.If.Properties.Type.Const] = strings.TrimPrefix(c.Then.Properties.Data.Ref, "#/$defs/")
	}
	props, _ := doc["properties"].(map[string]any)
	typeProp, _ := props["type"].(map[string]any)
	desc, _ := typeProp["description"].(string)
	for _, typ := range types {
		def, ok := applied[typ]
		if !ok {
			t.Errorf("event type %s: no data schema applied to it (allOf)", typ)
			continue
		}
		if _, ok := defs[def]; !ok {
			t.Errorf("event type %s: its data schema %s is not in $defs", typ, def)
		}
		if !regexp.MustCompile(`\b` + regexp.QuoteMeta(typ) + `\b`).MatchString(desc) {
			t.Errorf("event type %s is not named in the description of type", typ)
		}
	}
}
