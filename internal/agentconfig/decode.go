package agentconfig

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"

	"github.com/toolgate/toolgate/internal/orchestrator"
)

// doc is where each field of a decoded config stands in its source, so
// that an error about a field can name its line.
type doc struct {
	// lines holds the line of each field path present ("tools[0].name").
	lines map[string]int
	// at holds the path of the field each key or value token belongs to,
	// by the token's offset.
	at map[int]string
}

// decode reads data into cfg strictly: an unknown field, a value of the
// wrong type, a duplicate key and malformed YAML are errors naming the
// field's path and line. The fields' json tags are their names.
func decode(data []byte, cfg *orchestrator.AgentConfig) (*doc, error) {
	file, err := parser.ParseBytes(data, 0)
	if err != nil {
		return nil, yamlError(nil, err)
	}
	d := &doc{lines: map[string]int{}, at: map[int]string{}}
	if len(file.Docs) == 0 || file.Docs[0].Body == nil {
		return d, nil // empty: validation says what is missing
	}
	if len(file.Docs) > 1 {
		return nil, fmt.Errorf("line %d: one YAML document expected, found %d", file.Docs[1].GetToken().Position.Line, len(file.Docs))
	}
	body := file.Docs[0].Body
	// Durations are checked here, against the node, because the decoder
	// reports an error of a type's own decoding without its place.
	if err := d.walk(body, "", reflect.TypeFor[orchestrator.AgentConfig]()); err != nil {
		return nil, err
	}
	if err := yaml.NodeToValue(body, cfg, yaml.Strict(), yaml.UseJSONUnmarshaler()); err != nil {
		return nil, yamlError(d, err)
	}
	return d, nil
}

var durationType = reflect.TypeFor[orchestrator.Duration]()

// walk records the paths and lines under node, the value of the field at
// path of Go type t (nil when the field is unknown: decoding refuses it).
func (d *doc) walk(node ast.Node, path string, t reflect.Type) error {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if tok := node.GetToken(); tok != nil {
		if _, ok := d.at[tok.Position.Offset]; !ok {
			d.at[tok.Position.Offset] = path
		}
	}
	switch n := node.(type) {
	case *ast.AnchorNode:
		return d.walk(n.Value, path, t)
	case *ast.TagNode:
		return d.walk(n.Value, path, t)
	case *ast.MappingNode:
		for _, mv := range n.Values {
			if err := d.walk(mv, path, t); err != nil {
				return err
			}
		}
	case *ast.MappingValueNode:
		key := n.Key.GetToken()
		child := key.Value
		if path != "" {
			child = path + "." + key.Value
		}
		d.lines[child] = key.Position.Line
		d.at[key.Position.Offset] = child
		return d.walk(n.Value, child, fieldType(t, key.Value))
	case *ast.SequenceNode:
		var elem reflect.Type
		if t != nil && t.Kind() == reflect.Slice {
			elem = t.Elem()
		}
		for i, v := range n.Values {
			child := path + "[" + strconv.Itoa(i) + "]"
			d.lines[child] = v.GetToken().Position.Line
			if err := d.walk(v, child, elem); err != nil {
				return err
			}
		}
	default:
		if t == durationType {
			var v orchestrator.Duration
			if err := yaml.NodeToValue(node, &v, yaml.UseJSONUnmarshaler()); err != nil {
				return fmt.Errorf("line %d: %s: %v", node.GetToken().Position.Line, path, err)
			}
		}
	}
	return nil
}

// fieldType is the type of the field of struct type t named name by its
// json tag; nil when there is none.
func fieldType(t reflect.Type, name string) reflect.Type {
	if t == nil || t.Kind() != reflect.Struct {
		return nil
	}
	for i := range t.NumField() {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if tag == name && tag != "-" {
			return f.Type
		}
	}
	return nil
}

// line is the line of the field at path or, when it is absent (a
// required field left out), of the nearest field that holds it; 0 when
// none does.
func (d *doc) line(path string) int {
	for path != "" {
		if l, ok := d.lines[path]; ok {
			return l
		}
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			break
		}
		path = path[:i]
	}
	return 0
}

// locate prefixes a *fieldError with its field's line.
func (d *doc) locate(err error) error {
	var fe *fieldError
	if errors.As(err, &fe) {
		if l := d.line(fe.Path); l > 0 {
			return fmt.Errorf("line %d: %w", l, err)
		}
	}
	return err
}

// yamlError says where a decode error is: its line and, when the
// document is known, the field's path.
func yamlError(d *doc, err error) error {
	var ye yaml.Error
	if !errors.As(err, &ye) || ye.GetToken() == nil {
		return fmt.Errorf("decode: %v", err)
	}
	tok := ye.GetToken()
	path := ""
	if d != nil {
		path = d.at[tok.Position.Offset]
	}
	var (
		unknown *yaml.UnknownFieldError
		typ     *yaml.TypeError
	)
	switch {
	case errors.As(err, &unknown):
		// The token is the unknown key; name the mapping it is in.
		if i := strings.LastIndexAny(path, ".["); i >= 0 {
			return fmt.Errorf("line %d: %s: unknown field %q", tok.Position.Line, path[:i], tok.Value)
		}
		return fmt.Errorf("line %d: unknown field %q", tok.Position.Line, tok.Value)
	case errors.As(err, &typ) && path != "":
		return fmt.Errorf("line %d: %s: cannot use %s here (want %s)", tok.Position.Line, path, kindOf(typ.SrcType), kindOf(typ.DstType))
	}
	return fmt.Errorf("line %d: %s", tok.Position.Line, ye.GetMessage())
}

// kindOf names a type as a config's author knows it.
func kindOf(t reflect.Type) string {
	if t == nil {
		return "this value"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "a mapping"
	}
	return t.String()
}
