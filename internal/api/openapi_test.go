package api_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/toolgate/toolgate/internal/api"
	"github.com/toolgate/toolgate/internal/api/site"
	"github.com/toolgate/toolgate/internal/chat/page"
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
