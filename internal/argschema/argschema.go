// Package argschema derives the JSON Schema of a tool's args from a Go
// type and validates args against a schema, with errors that name every
// offending location so that a model can fix its call. The agent's tools
// and the public worker's typed tools share it.
package argschema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/toolgate/toolgate/internal/typeschema"
)

// Schema is a compiled JSON Schema for a tool's args object.
type Schema struct {
	compiled *jsonschema.Schema
}

// noLoader refuses to load any external resource: tool schemas may come from
// configuration or from workers, and a $ref must not make the agent read
// files or fetch URLs.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("loading %s: external schema references are not allowed", url)
}

// Compile compiles the JSON Schema of tool name's args; it must describe
// an object and may not refer to external resources.
func Compile(name string, schema json.RawMessage) (*Schema, error) {
	if len(bytes.TrimSpace(schema)) == 0 {
		return nil, fmt.Errorf("tool %s: parameters schema is empty", name)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		return nil, fmt.Errorf("tool %s: parameters schema is not JSON: %w", name, err)
	}
	obj, ok := doc.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("tool %s: parameters schema is not an object", name)
	}
	if t, ok := obj["type"]; ok && t != "object" {
		return nil, fmt.Errorf("tool %s: parameters schema must describe an object, not %v", name, t)
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(noLoader{})
	loc := "toolgate:///tools/" + name + ".json"
	if err := c.AddResource(loc, doc); err != nil {
		return nil, fmt.Errorf("tool %s: %w", name, err)
	}
	compiled, err := c.Compile(loc)
	if err != nil {
		return nil, fmt.Errorf("tool %s: compile parameters schema: %w", name, err)
	}
	return &Schema{compiled: compiled}, nil
}

var schemaPrinter = message.NewPrinter(language.English)

// Validate checks args against the schema. The error text names every
// offending location so that the model can fix its call.
func (s *Schema) Validate(args json.RawMessage) error {
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(args))
	if err != nil {
		return fmt.Errorf("args are not valid JSON: %v", err)
	}
	err = s.compiled.Validate(inst)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return err
	}
	var msgs []string
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			msgs = append(msgs, fmt.Sprintf("at '/%s': %s", strings.Join(e.InstanceLocation, "/"), e.ErrorKind.LocalizedString(schemaPrinter)))
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	return errors.New(strings.Join(msgs, "; "))
}

// Reflect derives the JSON Schema of an args type (typeschema.Of). Struct
// fields without omitempty are required and unknown properties are refused,
// so that the model learns about typos instead of having them ignored.
func Reflect(t reflect.Type) (json.RawMessage, error) { return typeschema.Of(t) }
