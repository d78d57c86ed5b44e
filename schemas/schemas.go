// Package schemas holds the JSON Schemas (draft 2020-12) of toolgate's wire
// messages and of the deferred-tool batch and its answers: the contract for
// tool-workers, approvers and clients written in other languages. The files
// are embedded; examples of every message are under examples/.
package schemas

import (
	"bytes"
	"embed"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// BaseURL prefixes every schema's $id: BaseURL + name + ".schema.json".
const BaseURL = "https://toolgate.dev/schemas/"

const suffix = ".schema.json"

//go:embed *.schema.json
var files embed.FS

// Names lists the schemas by name ("call_request", "results", ...), sorted.
func Names() []string {
	entries, err := fs.ReadDir(files, ".")
	if err != nil {
		panic(fmt.Sprintf("schemas: embedded files: %v", err)) // cannot happen with go:embed
	}
	var names []string
	for _, e := range entries {
		names = append(names, strings.TrimSuffix(e.Name(), suffix))
	}
	slices.Sort(names)
	return names
}

// Raw returns the text of the named schema, e.g. for serving it over HTTP.
// name may be given with or without the ".schema.json" suffix.
func Raw(name string) ([]byte, error) {
	b, err := files.ReadFile(strings.TrimSuffix(name, suffix) + suffix)
	if err != nil {
		return nil, fmt.Errorf("schema %q: %w", name, err)
	}
	return b, nil
}

// Compile compiles the named schema ("call_request" or its $id) with format
// assertions on, so that "date-time" values must be RFC 3339.
func Compile(name string) (*jsonschema.Schema, error) {
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	for _, n := range Names() {
		b, err := Raw(n)
		if err != nil {
			return nil, err
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			return nil, fmt.Errorf("schema %s: %w", n, err)
		}
		if err := c.AddResource(BaseURL+n+suffix, doc); err != nil {
			return nil, fmt.Errorf("schema %s: %w", n, err)
		}
	}
	name = strings.TrimSuffix(strings.TrimPrefix(name, BaseURL), suffix)
	if !slices.Contains(Names(), name) {
		return nil, fmt.Errorf("schema %q: no such schema", name)
	}
	s, err := c.Compile(BaseURL + name + suffix)
	if err != nil {
		return nil, fmt.Errorf("compile schema %s: %w", name, err)
	}
	return s, nil
}

var compiled sync.Map // name -> *jsonschema.Schema

// Validate checks one JSON document against the named schema. Compiled
// schemas are kept for later calls.
func Validate(name string, doc []byte) error {
	name = strings.TrimSuffix(strings.TrimPrefix(name, BaseURL), suffix)
	s, ok := compiled.Load(name)
	if !ok {
		sch, err := Compile(name)
		if err != nil {
			return err
		}
		s, _ = compiled.LoadOrStore(name, sch)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return fmt.Errorf("validate %s: %w", name, err)
	}
	if err := s.(*jsonschema.Schema).Validate(v); err != nil {
		return fmt.Errorf("validate %s: %w", name, err)
	}
	return nil
}
