package api_test

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/internal/agentconfig"
	"github.com/toolgate/toolgate/internal/api"
	"github.com/toolgate/toolgate/internal/api/site"
	"github.com/toolgate/toolgate/internal/chat/page"
	"github.com/toolgate/toolgate/internal/orchestrator"
	"github.com/toolgate/toolgate/internal/telemetry"
	"github.com/toolgate/toolgate/internal/testkit"
	"github.com/toolgate/toolgate/internal/worker"
	"github.com/toolgate/toolgate/schemas"
)

// openAPIFile is the HTTP API's OpenAPI document, from this package.
const openAPIFile = "../../docs/openapi.yaml"

// loadOpenAPI loads the OpenAPI document and validates it as OpenAPI 3.1.
// The JSON Schemas it refers to (../schemas/*.schema.json) refer to each
// other by their $id (https://toolgate.dev/schemas/...), which is read from
// the embedded schemas, never fetched.
func loadOpenAPI(t testing.TB) *openapi3.T {
	t.Helper()
	loader := openapi3.NewLoader()
	loader.IsExternalRefsAllowed = true
	loader.ReadFromURIFunc = func(l *openapi3.Loader, u *url.URL) ([]byte, error) {
		if base, _ := url.Parse(schemas.BaseURL); u.Host == base.Host {
			if !strings.HasPrefix(u.Path, base.Path) {
				return nil, fmt.Errorf("%s: not under %s", u, schemas.BaseURL)
			}
			return schemas.Raw(path.Base(u.Path))
		}
		if u.Scheme != "" || u.Host != "" {
			return nil, fmt.Errorf("%s: the document refers only to files beside it and to the schemas", u)
		}
		return openapi3.ReadFromFile(l, u)
	}
	doc, err := loader.LoadFromFile(openAPIFile)
	if err != nil {
		t.Fatalf("load %s: %v", openAPIFile, err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("%s is not a valid OpenAPI document: %v", openAPIFile, err)
	}
	if !doc.IsOpenAPI31OrLater() || doc.IsOpenAPI32OrLater() {
		t.Fatalf("%s: openapi %s, want 3.1", openAPIFile, doc.OpenAPI)
	}
	return doc
}

// servedPatterns are the patterns the orchestrator's site registers, as
// cmd/orchestrator configures it (with metrics).
func servedPatterns() []string {
	return site.Patterns(site.Config{API: api.Config{Metrics: http.NotFoundHandler()}})
}

// routeProblems compares the operations doc documents with the patterns
// the server registers (site.Patterns): a route ("GET /v1/pending") must be
// an operation, a path's 405 fallback ("/v1/pending") a documented path,
// and an operation a route, unless the chat page serves it (page.Path and
// below, whose mux is its own: the live test probes those).
func routeProblems(doc *openapi3.T, patterns []string) []string {
	var problems []string
	served := map[string]bool{}
	for _, p := range patterns {
		method, route, hasMethod := strings.Cut(p, " ")
		if !hasMethod {
			method, route = "", p
		}
		route = strings.ReplaceAll(strings.TrimSuffix(route, "{$}"), "...}", "}")
		switch {
		case route == "/":
			// The 404 for everything else.
		case method == "":
			if doc.Paths.Value(route) == nil {
				problems = append(problems, fmt.Sprintf("path %s is served but not documented", route))
			}
		default:
			served[method+" "+route] = true
			if item := doc.Paths.Value(route); item == nil || item.GetOperation(method) == nil {
				problems = append(problems, fmt.Sprintf("%s %s is served but not documented", method, route))
			}
		}
	}
	for route, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			if !served[method+" "+route] && route != page.Path && !strings.HasPrefix(route, page.Path+"/") {
				problems = append(problems, fmt.Sprintf("%s %s is documented but not served", method, route))
			}
		}
	}
	slices.Sort(problems)
	return problems
}

// The document is valid OpenAPI 3.1 (its schemas under schemas/ included),
// and documents every route the orchestrator serves and no other.
func TestOpenAPIDocumentsEveryRoute(t *testing.T) {
	t.Parallel()
	doc := loadOpenAPI(t)
	for _, p := range routeProblems(doc, servedPatterns()) {
		t.Error(p)
	}
}

// The check above fails when the document lacks a route the server has,
// or has one the server lacks.
func TestOpenAPIRouteCheckFindsGaps(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		edit     func(doc *openapi3.T, patterns []string) []string
		problems []string
	}{
		{"nothing changed", func(_ *openapi3.T, p []string) []string { return p }, nil},
		{"a path left out", func(doc *openapi3.T, p []string) []string {
			doc.Paths.Delete("/v1/pending")
			return p
		}, []string{"GET /v1/pending is served but not documented", "path /v1/pending is served but not documented"}},
		{"a method left out", func(doc *openapi3.T, p []string) []string {
			doc.Paths.Value("/v1/grants").Post = nil
			return p
		}, []string{"POST /v1/grants is served but not documented"}},
		{"a route added", func(_ *openapi3.T, p []string) []string {
			return append(p, "GET /v1/inbox", "/v1/inbox")
		}, []string{"GET /v1/inbox is served but not documented", "path /v1/inbox is served but not documented"}},
		{"a route gone", func(_ *openapi3.T, p []string) []string {
			return slices.DeleteFunc(p, func(s string) bool { return s == "GET /healthz" })
		}, []string{"GET /healthz is documented but not served"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			doc := loadOpenAPI(t)
			got := routeProblems(doc, tc.edit(doc, servedPatterns()))
			if !slices.Equal(got, tc.problems) {
				t.Errorf("problems %q, want %q", got, tc.problems)
			}
		})
	}
}

// openAPIScript drives answerAgent (answer_test.go): its one response asks
// for two approvals, a frontend tool's answer and a worker's read, so that
// every kind of pending call and answer is shown.
const openAPIScript = `
- calls:
    - {tool: update_file, id: upd, args: {path: a.txt, content: from the model}}
    - {tool: delete_file, id: del, args: {path: b.txt}}
    - {tool: local_time, id: time, args: {}}
    - {tool: read_file, id: read, args: {path: c.txt}}
- text: done
- text: and more
- text: and more again
`

// checker is an http.RoundTripper that checks every request and its answer
// against the OpenAPI document (openapi3filter), and records the statuses
// each operation answered with.
type checker struct {
	t      testing.TB
	router routers.Router
	opts   *openapi3filter.Options

	mu   sync.Mutex
	seen map[string][]int // "GET /v1/pending" -> statuses
}

func newChecker(t testing.TB, doc *openapi3.T, serverURL string) *checker {
	t.Helper()
	doc.Servers = openapi3.Servers{{URL: serverURL}}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	opts := &openapi3filter.Options{
		IncludeResponseStatus: true,
		MultiError:            true,
		AuthenticationFunc: func(_ context.Context, in *openapi3filter.AuthenticationInput) error {
			if in.SecuritySchemeName != "bearer" {
				return fmt.Errorf("unknown security scheme %q", in.SecuritySchemeName)
			}
			if !strings.HasPrefix(in.RequestValidationInput.Request.Header.Get("Authorization"), "Bearer ") {
				return errors.New("no bearer token")
			}
			return nil
		},
	}
	return &checker{t: t, router: router, opts: opts, seen: map[string][]int{}}
}

type uncheckedKey struct{}

// unchecked marks a request that breaks the document on purpose (no token,
// a bad parameter, no body): only its answer is checked.
func unchecked(req *http.Request) *http.Request {
	return req.WithContext(context.WithValue(req.Context(), uncheckedKey{}, true))
}

func (c *checker) RoundTrip(req *http.Request) (*http.Response, error) {
	route, params, err := c.router.FindRoute(req)
	if err != nil {
		c.t.Errorf("%s %s: no operation of the document: %v", req.Method, req.URL.Path, err)
		return http.DefaultTransport.RoundTrip(req)
	}
	op := req.Method + " " + route.Path
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: c.opts}
	if req.Context().Value(uncheckedKey{}) == nil {
		if err := openapi3filter.ValidateRequest(req.Context(), in); err != nil {
			c.t.Errorf("%s: the request does not fit the document: %v", op, err)
		}
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.seen[op] = append(c.seen[op], resp.StatusCode)
	c.mu.Unlock()
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header, Options: c.opts}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt == "text/event-stream" {
		// A stream is read by the caller, event by event; its status,
		// headers and media type are checked here.
		opts := *c.opts
		opts.ExcludeResponseBody = true
		out.Options = &opts
		if r := route.Operation.Responses.Status(resp.StatusCode); r == nil || r.Value.Content.Get(mt) == nil {
			c.t.Errorf("%s: %d %s is not a documented answer", op, resp.StatusCode, mt)
		}
	} else {
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return nil, err
		}
		resp.Body = io.NopCloser(bytes.NewReader(body))
		out.SetBodyBytes(body)
	}
	if err := openapi3filter.ValidateResponse(req.Context(), out); err != nil {
		c.t.Errorf("%s: the answer does not fit the document: %v", op, err)
	}
	return resp, nil
}

// The orchestrator's site, live on an embedded JetStream, answers every
// documented operation as the document says: the main routes driven
// through a conversation (start, pause, answers, a queued prompt, its
// events, cancel, delete), grants, records, metrics, the chat routes and
// page, and every operation probed with made-up ids and no body. Every
// request and answer is checked against the document by the client's
// transport, and every operation must have answered with a success once.
func TestOpenAPIAnswersFitTheDocument(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	agent, err := agentconfig.Parse([]byte(answerAgent), fstest.MapFS{"script.yaml": {Data: []byte(openAPIScript)}})
	if err != nil {
		t.Fatal(err)
	}
	sys := testkit.Test(t, testkit.Options{})
	reg := telemetry.NewRegistry()
	o, err := sys.Orchestrator(ctx, "orch", orchestrator.Config{Agent: agent, ReconcileInterval: time.Second, Metrics: telemetry.NewOrchestratorMetrics(reg)})
	if err != nil {
		t.Fatal(err)
	}
	tools, err := testkit.BuiltinTools(t.TempDir(), "update_file", "delete_file", "read_file")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sys.Worker(ctx, "files", worker.Config{Tools: tools}); err != nil {
		t.Fatal(err)
	}
	const token = "openapi-secret"
	srv := httptest.NewServer(site.Handler(o, site.Config{API: api.Config{Token: token, Metrics: telemetry.Handler(reg)}}))
	t.Cleanup(srv.Close)
	doc := loadOpenAPI(t)
	chk := newChecker(t, doc, srv.URL)
	hc := &http.Client{Transport: chk}
	cl, err := client.New(client.Config{BaseURL: srv.URL, Token: token, HTTP: hc})
	if err != nil {
		t.Fatal(err)
	}
	send := func(req *http.Request) (int, []byte) {
		t.Helper()
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, b
	}
	newReq := func(method, path, body string) *http.Request {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, srv.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		return req
	}
	do := func(method, path, body string, want int) map[string]any {
		t.Helper()
		status, b := send(newReq(method, path, body))
		if status != want {
			t.Fatalf("%s %s: %d %s, want %d", method, path, status, b, want)
		}
		var v map[string]any
		if len(b) > 0 && json.Unmarshal(b, &v) != nil {
			v = nil
		}
		return v
	}
	// openStream opens an event stream and returns its body, to read.
	openStream := func(req *http.Request, want int) io.ReadCloser {
		t.Helper()
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != want {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			t.Fatalf("%s %s: %d %s, want %d", req.Method, req.URL.Path, resp.StatusCode, b, want)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp.Body
	}

	t.Run("probe", func(t *testing.T) {
		// Every documented operation is served: made-up ids, no body, no
		// 404 of an unknown endpoint and no 405. Without a token, those
		// the document secures answer 401 and the others do not.
		for route, item := range doc.Paths.Map() {
			for method, op := range item.Operations() {
				p := route
				for _, prm := range append(slices.Clone(item.Parameters), op.Parameters...) {
					if prm.Value.In == openapi3.ParameterInPath {
						v := "probe1"
						if prm.Value.Example != nil {
							v = fmt.Sprint(prm.Value.Example)
						}
						p = strings.ReplaceAll(p, "{"+prm.Value.Name+"}", v)
					}
				}
				req := unchecked(newReq(method, p, ""))
				if method == http.MethodGet && strings.HasSuffix(route, "/events") {
					req.Header.Set("Last-Event-ID", "not an id")
				}
				status, b := send(req)
				if status == http.StatusMethodNotAllowed || status == http.StatusNotFound && strings.Contains(string(b), "no such endpoint") {
					t.Errorf("%s %s (%s %s): %d %s", method, p, method, route, status, b)
				}
				// Without a token: 401 where the document asks for one.
				req = unchecked(newReq(method, p, ""))
				req.Header.Del("Authorization")
				security := doc.Security
				if op.Security != nil {
					security = *op.Security
				}
				needsToken := len(security) > 0 && !slices.ContainsFunc(security, func(r openapi3.SecurityRequirement) bool { return len(r) == 0 })
				if status, b := send(req); (status == http.StatusUnauthorized) != needsToken {
					t.Errorf("%s %s without a token: %d %s; the document says a token is needed: %v", method, p, status, b, needsToken)
				}
			}
		}
	})

	do("GET", "/healthz", "", 200)
	if p := do("GET", "/v1/pending", "", 200); len(p["pending"].([]any)) != 0 {
		t.Errorf("pending before any run: %v", p)
	}

	start := newReq("POST", "/v1/runs", `{"prompt": "go", "caller": {"id": "ann"}}`)
	start.Header.Set("Idempotency-Key", "openapi-1")
	status, b := send(start)
	var run struct{ RunID, ConversationID string }
	if err := json.Unmarshal(b, &struct {
		RunID          *string `json:"run_id"`
		ConversationID *string `json:"conversation_id"`
	}{&run.RunID, &run.ConversationID}); status != 202 || err != nil {
		t.Fatalf("start: %d %s", status, b)
	}
	conv := run.ConversationID
	if _, err := cl.Wait(ctx, conv, client.StatusPaused); err != nil {
		t.Fatal(err)
	}
	do("GET", "/v1/runs/"+run.RunID, "", 200)
	do("GET", "/v1/conversations", "", 200)
	do("GET", "/v1/conversations?status=paused&limit=1", "", 200)
	do("GET", "/v1/conversations/"+conv, "", 200)
	pending := do("GET", "/v1/pending", "", 200)["pending"].([]any)
	args := map[string]json.RawMessage{}
	for _, p := range pending {
		pc := p.(map[string]any)
		a, _ := json.Marshal(pc["args"])
		args[pc["tool_call_id"].(string)] = a
	}
	if len(args["upd"]) == 0 || len(args["del"]) == 0 {
		t.Fatalf("pending: %v, want the approvals upd and del", pending)
	}
	do("POST", "/v1/runs", `{"prompt": "then this", "conversation_id": "`+conv+`"}`, 202)

	grant := do("POST", "/v1/grants", `{"tool": "update_file", "approved": true, "ttl": "1h"}`, 201)
	do("GET", "/v1/grants", "", 200)
	do("DELETE", "/v1/grants/"+grant["id"].(string), "", 200)
	do("DELETE", "/v1/grants/"+grant["id"].(string), "", 404)

	calls := "/v1/conversations/" + conv + "/calls/"
	do("POST", calls+"upd", `{"decision": {"approved": true, "args": `+string(args["upd"])+`}}`, 202)
	do("POST", calls+"upd", `{"decision": {"approved": true, "args": `+string(args["upd"])+`}}`, 409)
	do("POST", calls+"read", `{"result": "not the worker"}`, 422)
	do("POST", calls+"nothing", `{"result": 1}`, 404)
	do("POST", calls+"time", `{"result": {"kind": "tool-return", "return_value": "12:00"}}`, 202)
	do("POST", calls+"del", `{"decision": {"approved": false, "args": `+string(args["del"])+`, "message": "keep it"}}`, 202)
	if _, err := cl.Wait(ctx, conv, client.StatusCompleted); err != nil {
		t.Fatal(err)
	}

	t.Run("events", func(t *testing.T) {
		event := doc.Components.Schemas["Event"].Value
		body := openStream(newReq("GET", "/v1/conversations/"+conv+"/events", ""), 200)
		frames := readFrames(t, body, "run_completed")
		for _, f := range frames {
			if !regexp.MustCompile(`^[0-9]+(\.[0-9]+)?$`).MatchString(f.id) {
				t.Errorf("event id %q", f.id)
			}
			var typ struct{ Type string }
			if err := json.Unmarshal([]byte(f.data), &typ); err != nil || typ.Type != f.event {
				t.Errorf("event %s: data %s, want its type", f.event, f.data)
			}
			var v any
			if err := json.Unmarshal([]byte(f.data), &v); err != nil {
				t.Fatal(err)
			}
			if err := event.VisitJSON(v, openapi3.EnableJSONSchema2020()); err != nil {
				t.Errorf("event %s does not fit the document's Event: %v", f.event, err)
			}
		}
		if len(frames) < 3 {
			t.Errorf("%d events", len(frames))
		}
		after := newReq("GET", "/v1/conversations/"+conv+"/events", "")
		after.Header.Set("Last-Event-ID", frames[0].id)
		if next := readFrames(t, openStream(after, 200), ""); next[0].id == frames[0].id {
			t.Errorf("after Last-Event-ID %s: %s again", frames[0].id, next[0].id)
		}
	})

	do("POST", "/v1/conversations/"+conv+"/cancel", "", 409)
	other := do("POST", "/v1/runs", `{"prompt": "go", "new_conversation_id": "copenapi2"}`, 202)
	if _, err := cl.Wait(ctx, other["conversation_id"].(string), client.StatusPaused); err != nil {
		t.Fatal(err)
	}
	do("POST", "/v1/conversations/copenapi2/cancel", "", 202)
	do("DELETE", "/v1/conversations/copenapi2?corrupt=true", "", 409)
	do("DELETE", "/v1/conversations/copenapi2", "", 204)
	do("DELETE", "/v1/conversations/copenapi2", "", 404)

	do("GET", "/v1/dlq", "", 200)
	if a := do("GET", "/v1/audit?conversation="+conv+"&since=1h&limit=10", "", 200); len(a["records"].([]any)) == 0 {
		t.Errorf("audit of %s: no records", conv)
	}
	if status, b := send(newReq("GET", "/metrics", "")); status != 200 || !strings.Contains(string(b), "toolgate_") {
		t.Errorf("metrics: %d %.200s", status, b)
	}

	t.Run("chat", func(t *testing.T) {
		for _, p := range []string{"/chat", "/chat/", "/chat/assets/chat.js"} {
			if status, _ := send(newReq("GET", p, "")); status != 200 {
				t.Errorf("GET %s: %d", p, status)
			}
		}
		// The chat routes are opaque here: their status and media type
		// are checked, their protocols are the adapters' tests'.
		readFrames(t, openStream(newReq("POST", "/v1/agui", `{"threadId": "t1", "runId": "r1", "messages": [{"id": "m1", "role": "user", "content": "go"}]}`), 200), "")
		readFrames(t, openStream(newReq("POST", "/v1/ai-sdk/chat", `{"id": "chat1", "trigger": "submit-message", "messages": [{"id": "m1", "role": "user", "parts": [{"type": "text", "text": "go"}]}]}`), 200), "")
		readFrames(t, openStream(newReq("GET", "/v1/ai-sdk/chat/chat1/stream", ""), 200), "")
		do("GET", "/v1/ai-sdk/chat/nochat/stream", "", 204)
	})

	chk.mu.Lock()
	defer chk.mu.Unlock()
	for route, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			op := method + " " + route
			if !slices.ContainsFunc(chk.seen[op], func(s int) bool { return s/100 == 2 || s/100 == 3 }) {
				t.Errorf("%s never answered with a success (%v)", op, chk.seen[op])
			}
		}
	}
}

type sseFrame struct{ id, event, data string }

// readFrames reads Server-Sent Events from body until one of type until
// (the first frame when until is empty), skipping comments.
func readFrames(t *testing.T, body io.Reader, until string) []sseFrame {
	t.Helper()
	var frames []sseFrame
	var f sseFrame
	sc := bufio.NewScanner(body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if f != (sseFrame{}) {
				frames = append(frames, f)
				if until == "" || f.event == until {
					return frames
				}
			}
			f = sseFrame{}
		case strings.HasPrefix(line, ":"):
		default:
			k, v, _ := strings.Cut(line, ":")
			v = strings.TrimPrefix(v, " ")
			switch k {
			case "id":
				f.id = v
			case "event":
				f.event = v
			case "data":
				f.data += v
			}
		}
	}
	t.Fatalf("stream ended (%v) before an event %q; read %d", sc.Err(), until, len(frames))
	return nil
}

// docs/http-api.md, the API's page for people, names every operation of
// the document ("`GET /v1/pending`"), so that the two stay in step.
func TestHTTPAPIPageNamesEveryOperation(t *testing.T) {
	t.Parallel()
	doc := loadOpenAPI(t)
	md, err := os.ReadFile("../../docs/http-api.md")
	if err != nil {
		t.Fatal(err)
	}
	for route, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			if op := "`" + method + " " + route + "`"; !bytes.Contains(md, []byte(op)) {
				t.Errorf("docs/http-api.md does not name %s", op)
			}
		}
	}
}

// jsonFields are the names of the JSON object t encodes to or decodes
// from, embedded structs' included.
func jsonFields(t reflect.Type) []string {
	var names []string
	for f := range t.Fields() {
		tag := f.Tag.Get("json")
		if tag == "-" || !f.IsExported() && !f.Anonymous {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			names = append(names, jsonFields(f.Type)...)
			continue
		}
		names = append(names, cmp.Or(name, f.Name))
	}
	slices.Sort(names)
	return names
}

// The document's own schemas of bodies have the fields of the Go types the
// handlers decode (which refuse unknown fields) and encode: a field added
// to one is added to the other.
func TestOpenAPISchemasMatchGoTypes(t *testing.T) {
	t.Parallel()
	doc := loadOpenAPI(t)
	tests := []struct {
		schema string
		typ    reflect.Type
	}{
		{"StartRun", reflect.TypeFor[api.StartRunRequest]()},
		{"Answer", reflect.TypeFor[api.AnswerRequest]()},
		{"AnswerDecision", reflect.TypeFor[api.DecisionBody]()},
		{"AnswerState", reflect.TypeFor[api.AnswerState]()},
		{"GrantRequest", reflect.TypeFor[api.GrantBody]()},
		{"ConversationState", reflect.TypeFor[api.ConversationState]()},
		{"ConversationList", reflect.TypeFor[orchestrator.ConversationList]()},
		{"ConversationSummary", reflect.TypeFor[orchestrator.ConversationSummary]()},
		{"DeadLetterPage", reflect.TypeFor[orchestrator.DeadLetterPage]()},
		{"DeadLetter", reflect.TypeFor[orchestrator.DeadLetter]()},
		{"AuditPage", reflect.TypeFor[orchestrator.AuditPage]()},
		{"AuditRecord", reflect.TypeFor[orchestrator.AuditEntry]()},
		{"GrantList", reflect.TypeFor[api.GrantList]()},
	}
	for _, tc := range tests {
		t.Run(tc.schema, func(t *testing.T) {
			t.Parallel()
			ref := doc.Components.Schemas[tc.schema]
			if ref == nil {
				t.Fatalf("no schema %s", tc.schema)
			}
			var props []string
			for p := range ref.Value.Properties {
				props = append(props, p)
			}
			slices.Sort(props)
			if want := jsonFields(tc.typ); !slices.Equal(props, want) {
				t.Errorf("%s has %q, %s has %q", tc.schema, props, tc.typ, want)
			}
		})
	}
	// A stored grant is the grant (schemas/grant.schema.json) and what the
	// orchestrator makes of it.
	var props []string
	for _, s := range doc.Components.Schemas["StoredGrant"].Value.AllOf {
		for p := range s.Value.Properties {
			props = append(props, p)
		}
	}
	slices.Sort(props)
	if want := jsonFields(reflect.TypeFor[orchestrator.StoredGrant]()); !slices.Equal(props, want) {
		t.Errorf("StoredGrant has %q, orchestrator.StoredGrant has %q", props, want)
	}
}
