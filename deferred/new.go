package deferred

import (
	"encoding/json"
	"errors"
	"fmt"
)

// ValueOf makes a plain result from any value encoding/json accepts; a
// json.RawMessage is taken as it is, after checking that it is valid JSON.
func ValueOf(v any) (Value, error) {
	raw, err := toJSON(v)
	if err != nil {
		return Value{}, fmt.Errorf("value: %w", err)
	}
	return Value{Value: raw}, nil
}

// Approve makes an approval. overrideArgs nil approves the model's args;
// anything else must encode to a JSON object and replaces them (D24).
func Approve(overrideArgs any) (Approved, error) {
	if overrideArgs == nil {
		return Approved{}, nil
	}
	raw, err := toJSON(overrideArgs)
	if err != nil {
		return Approved{}, fmt.Errorf("override args: %w", err)
	}
	if !isObject(raw) {
		return Approved{}, errors.New("override args: not a JSON object")
	}
	return Approved{OverrideArgs: raw}, nil
}

func toJSON(v any) (json.RawMessage, error) {
	if raw, ok := v.(json.RawMessage); ok {
		if !json.Valid(raw) {
			return nil, errors.New("not valid JSON")
		}
		return raw, nil
	}
	return json.Marshal(v)
}

// ReturnOf makes a result with more than a value, as Pydantic AI's
// ToolReturn: value goes to the model as the call's result, content (when
// not empty) to the model as a user part after the step's tool parts, and
// metadata stays on the tool-return part for the application, unseen by the
// model. value and metadata are taken as ValueOf takes a value; a nil
// metadata is none.
func ReturnOf(value any, content string, metadata any) (Return, error) {
	raw, err := toJSON(value)
	if err != nil {
		return Return{}, fmt.Errorf("return value: %w", err)
	}
	r := Return{Value: raw, Content: content}
	if metadata != nil {
		if r.Metadata, err = toJSON(metadata); err != nil {
			return Return{}, fmt.Errorf("return metadata: %w", err)
		}
	}
	return r, nil
}

// AskRetry answers an external call by asking the model to call again,
// telling it message (Pydantic AI's ModelRetry). The retry is charged to
// the tool's retry budget.
func AskRetry(message string) Retry { return Retry{Message: message} }

// Fail answers an external call as failed (Pydantic AI's ToolFailed): the
// model sees message in a tool return with outcome "failed".
func Fail(message string) Failed { return Failed{Message: message} }

// Deny refuses an approval call; the model is told message, or
// DefaultDenyMessage when it is empty.
func Deny(message string) Denied { return Denied{Message: message} }
