package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"

	"github.com/toolgate/toolgate/internal/typeschema"
)

// Func builds a tool from a typed function: the JSON Schema of its args is
// derived from Args (a struct; fields without omitempty are required and
// unknown fields refused, so the model learns of its typos; `jsonschema`
// tags add descriptions and constraints, see invopop/jsonschema), args are
// checked against it and decoded into Args, and the function's result is
// the reply's value, marshalled to JSON. Args that do not fit the schema
// are answered with Retry naming every offending field, without calling fn.
func Func[Args, Out any](name, description string, fn func(ctx context.Context, call Call, args Args) (Out, error)) (Tool, error) {
	if fn == nil {
		return Tool{}, fmt.Errorf("worker: tool %s: function is nil", name)
	}
	schema, err := typeschema.Of(reflect.TypeFor[Args]())
	if err != nil {
		return Tool{}, fmt.Errorf("worker: tool %s: %w", name, err)
	}
	checker, err := typeschema.Compile(schema)
	if err != nil {
		return Tool{}, fmt.Errorf("worker: tool %s: %w", name, err)
	}
	h := HandlerFunc(func(ctx context.Context, call Call) (Reply, error) {
		if err := checker.Check(call.Args); err != nil {
			return Reply{}, Retry("invalid args: %v", err)
		}
		var args Args
		dec := json.NewDecoder(bytes.NewReader(call.Args))
		if err := dec.Decode(&args); err != nil {
			return Reply{}, Retry("invalid args: %v", err)
		}
		out, err := fn(ctx, call, args)
		if err != nil {
			return Reply{}, err
		}
		return Return(out)
	})
	return Tool{Name: name, Description: description, Parameters: schema, Handler: h}, nil
}

// Register adds a tool built by Func to w.
func Register[Args, Out any](w *Worker, name, description string, fn func(ctx context.Context, call Call, args Args) (Out, error)) error {
	t, err := Func(name, description, fn)
	if err != nil {
		return err
	}
	return w.Handle(t)
}
