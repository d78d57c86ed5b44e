// Package typeschema derives the JSON Schema of a tool's args from a Go
// struct type and checks args against a schema so derived. It is the part
// of argschema a Go worker needs, apart so that a one-tool worker does not
// link argschema's general validator (with its localisation tables): the
// schemas it checks are plain objects of typed properties.
package typeschema

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
	invopop "github.com/invopop/jsonschema"
)

// Of derives the JSON Schema of an args type. Struct fields without
// omitempty are required and unknown properties are refused, so that the
// model learns about typos instead of having them ignored.
func Of(t reflect.Type) (json.RawMessage, error) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil, fmt.Errorf("args type %s is not a struct: give its JSON Schema explicitly", t)
	}
	r := invopop.Reflector{DoNotReference: true, ExpandedStruct: true, Anonymous: true}
	s := r.ReflectFromType(t)
	b, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("marshal schema of %s: %w", t, err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("schema of %s: %w", t, err)
	}
	delete(m, "$schema")
	delete(m, "$id")
	if _, ok := m["properties"]; !ok {
		m["properties"] = map[string]any{}
	}
	return json.Marshal(m)
}

// Checker checks args against an object schema.
type Checker struct {
	root *jsonschema.Resolved
	// props are the property schemas resolved on their own, to check each
	// property apart; a property whose schema refers elsewhere in the
	// document is missing and checked only as part of the whole.
	props    map[string]*jsonschema.Resolved
	required []string
	closed   bool // additionalProperties is false
}

// Compile prepares schema, which must describe an object and may not refer
// to other documents, for Check.
func Compile(schema json.RawMessage) (*Checker, error) {
	var s jsonschema.Schema
	if err := json.Unmarshal(schema, &s); err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	if s.Type != "" && s.Type != "object" {
		return nil, fmt.Errorf("schema must describe an object, not %s", s.Type)
	}
	root, err := s.Resolve(nil)
	if err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	c := &Checker{root: root, props: map[string]*jsonschema.Resolved{}, required: s.Required}
	if s.AdditionalProperties != nil && s.AdditionalProperties.Not != nil {
		c.closed = true
	}
	for name, p := range s.Properties {
		if r, err := p.Resolve(nil); err == nil {
			c.props[name] = r
		}
	}
	return c, nil
}

// Check reports whether args fit the schema. The error names every
// offending property (a missing one, an unknown one, one of the wrong
// shape), so that the model can fix its whole call at once.
func (c *Checker) Check(args json.RawMessage) error {
	var inst any
	if err := json.Unmarshal(args, &inst); err != nil {
		return fmt.Errorf("args are not valid JSON: %v", err)
	}
	err := c.root.Validate(inst)
	if err == nil {
		return nil
	}
	obj, ok := inst.(map[string]any)
	if !ok {
		return fmt.Errorf("at '/': %s", innermost(err))
	}
	var msgs []string
	for _, name := range c.required {
		if _, ok := obj[name]; !ok {
			msgs = append(msgs, fmt.Sprintf("at '/': missing property '%s'", name))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(obj)) {
		p, known := c.props[name]
		switch {
		case known:
			if err := p.Validate(obj[name]); err != nil {
				msgs = append(msgs, fmt.Sprintf("at '/%s': %s", name, innermost(err)))
			}
		case c.closed:
			msgs = append(msgs, fmt.Sprintf("at '/': additional property '%s' not allowed", name))
		}
	}
	if len(msgs) == 0 {
		return fmt.Errorf("at '/': %s", innermost(err))
	}
	return errors.New(strings.Join(msgs, "; "))
}

// innermost is the message of the deepest error err wraps: the validator
// prefixes each level with the schema path it was in, which says nothing
// to a model.
func innermost(err error) string {
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return err.Error()
		}
		err = next
	}
}
