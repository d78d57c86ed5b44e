package typeschema_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/argschema"
	"github.com/toolgate/toolgate/internal/typeschema"
)

type address struct {
	Street string `json:"street"`
	Number int    `json:"number,omitempty" jsonschema:"minimum=1"`
}

type order struct {
	City  string   `json:"city" jsonschema:"enum=Paris,enum=Lyon"`
	Count int      `json:"count,omitempty" jsonschema:"minimum=1,maximum=10"`
	Tags  []string `json:"tags,omitempty"`
	Ship  *address `json:"ship,omitempty"`
}

// Check accepts and refuses what argschema's general validator does, and
// names every offending property.
func TestCheckAgreesWithArgschema(t *testing.T) {
	t.Parallel()
	schema, err := typeschema.Of(reflect.TypeFor[order]())
	if err != nil {
		t.Fatal(err)
	}
	c, err := typeschema.Compile(schema)
	if err != nil {
		t.Fatal(err)
	}
	full, err := argschema.Compile("order", schema)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, args string
		want       []string // in the error; nil: valid
	}{
		{name: "valid", args: `{"city":"Paris","count":2,"tags":["a"],"ship":{"street":"Rue","number":3}}`},
		{name: "only required", args: `{"city":"Lyon"}`},
		{name: "missing and unknown", args: `{"town":"Paris"}`, want: []string{"'city'", "'town'"}},
		{name: "enum", args: `{"city":"Rome"}`, want: []string{"/city"}},
		{name: "range and type", args: `{"city":"Paris","count":11,"tags":[1]}`, want: []string{"/count", "/tags"}},
		{name: "nested", args: `{"city":"Paris","ship":{"number":0}}`, want: []string{"/ship"}},
		{name: "not an object", args: `[1]`, want: []string{"at '/'"}},
		{name: "not JSON", args: `{`, want: []string{"not valid JSON"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := c.Check(json.RawMessage(tt.args))
			ferr := full.Validate(json.RawMessage(tt.args))
			if (err == nil) != (ferr == nil) {
				t.Fatalf("Check = %v, argschema = %v", err, ferr)
			}
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Check = %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Check accepted them")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Check = %q, want it to name %s", err, w)
				}
			}
		})
	}
}

func TestCompileRefusesNonObjects(t *testing.T) {
	t.Parallel()
	if _, err := typeschema.Compile(json.RawMessage(`{"type":"string"}`)); err == nil {
		t.Error("a string schema was accepted")
	}
	if _, err := typeschema.Of(reflect.TypeFor[int]()); err == nil {
		t.Error("an int args type was accepted")
	}
}
