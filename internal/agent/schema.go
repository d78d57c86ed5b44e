package agent

import (
	"encoding/json"
	"reflect"

	"github.com/toolgate/toolgate/internal/argschema"
)

// argsSchema is a compiled JSON Schema for a tool's args object.
type argsSchema struct{ s *argschema.Schema }

func compileSchema(name string, schema json.RawMessage) (*argsSchema, error) {
	s, err := argschema.Compile(name, schema)
	if err != nil {
		return nil, err
	}
	return &argsSchema{s: s}, nil
}

// validate checks args against the schema (argschema.Schema.Validate).
func (s *argsSchema) validate(args json.RawMessage) error { return s.s.Validate(args) }

// reflectSchema derives the JSON Schema of an args type (argschema.Reflect).
func reflectSchema(t reflect.Type) (json.RawMessage, error) { return argschema.Reflect(t) }
