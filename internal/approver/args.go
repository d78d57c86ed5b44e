package approver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// ArgsError lists why edited args were refused, one problem per entry, so
// that a page can show them next to the editor.
type ArgsError struct {
	Problems []string
}

func (e *ArgsError) Error() string { return "args: " + strings.Join(e.Problems, "; ") }

// noLoader refuses external references: a tool's schema comes from the
// request, and a $ref must not make an approver read files or fetch URLs.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("loading %s: external schema references are not allowed", url)
}

var schemaPrinter = message.NewPrinter(language.English)

// ValidateArgs checks that args is one JSON object and, when schema (the
// tool's parameters, ApprovalRequest.Parameters) is not empty, that it
// conforms to it. Refused args are an *ArgsError; an unusable schema is a
// plain error.
func ValidateArgs(schema, args json.RawMessage) error {
	trimmed := bytes.TrimSpace(args)
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(trimmed))
	if err != nil {
		return &ArgsError{Problems: []string{"not valid JSON: " + err.Error()}}
	}
	if _, ok := inst.(map[string]any); !ok {
		return &ArgsError{Problems: []string{"must be a JSON object"}}
	}
	if len(bytes.TrimSpace(schema)) == 0 {
		return nil
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		return fmt.Errorf("tool schema is not JSON: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(noLoader{})
	const loc = "toolgate:///approval/parameters.json"
	if err := c.AddResource(loc, doc); err != nil {
		return fmt.Errorf("tool schema: %w", err)
	}
	compiled, err := c.Compile(loc)
	if err != nil {
		return fmt.Errorf("compile tool schema: %w", err)
	}
	err = compiled.Validate(inst)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return err
	}
	var problems []string
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			problems = append(problems, fmt.Sprintf("at '/%s': %s", strings.Join(e.InstanceLocation, "/"),
				e.ErrorKind.LocalizedString(schemaPrinter)))
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	return &ArgsError{Problems: problems}
}
