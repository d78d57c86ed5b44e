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
