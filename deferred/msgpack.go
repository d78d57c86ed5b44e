package deferred

import (
	"encoding/json"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// The msgpack forms carry the same information as the JSON ones, with an
// explicit "kind" on every answer so that nothing is ambiguous:
//
//	approvals: {"kind":"tool-approved","override_args":bin?} | {"kind":"tool-denied","message":str}
//	calls:     {"kind":"value","value":bin?}
//	         | {"kind":"tool-return","value":bin?,"content":str?,"metadata":bin?}
//	         | {"kind":"model-retry","message":str?} | {"kind":"tool-failed","message":str?}
//	metadata:  {id: bin}
//
// JSON values (args, values, metadata) stay JSON text in bin fields, so a
// round trip never changes a number's type. Maps are written in sorted key
// order, so equal Results encode to equal bytes.
const msgpackKindValue = "value"

type requestsMsgpack Requests

// EncodeMsgpack writes the batch with its msgpack tags.
func (r Requests) EncodeMsgpack(enc *msgpack.Encoder) error {
	return enc.Encode(requestsMsgpack(r))
}

// DecodeMsgpack decodes and checks a batch as UnmarshalJSON does.
func (r *Requests) DecodeMsgpack(dec *msgpack.Decoder) error {
	var w requestsMsgpack
	if err := dec.Decode(&w); err != nil {
		return fmt.Errorf("decode requests: %w", err)
	}
	v := Requests(w)
	if err := v.normalize(); err != nil {
		return fmt.Errorf("decode requests: %w", err)
	}
	*r = v
	return nil
}

type decisionMsgpack struct {
	Kind         string  `msgpack:"kind"`
	OverrideArgs []byte  `msgpack:"override_args,omitempty"`
	Message      *string `msgpack:"message,omitempty"`
}

type resultMsgpack struct {
	Kind     string `msgpack:"kind"`
	Value    []byte `msgpack:"value,omitempty"`
	Content  string `msgpack:"content,omitempty"`
	Metadata []byte `msgpack:"metadata,omitempty"`
	Message  string `msgpack:"message,omitempty"`
}

type resultsMsgpack struct {
	Approvals map[string]decisionMsgpack `msgpack:"approvals"`
	Calls     map[string]resultMsgpack   `msgpack:"calls"`
	Metadata  map[string][]byte          `msgpack:"metadata"`
}

// EncodeMsgpack writes the form above; nil maps stay nil. A nil, pointer or
// malformed answer is an error naming its id.
func (r Results) EncodeMsgpack(enc *msgpack.Encoder) error {
	if err := enc.EncodeMapLen(3); err != nil {
		return err
	}
	if err := encodeSorted(enc, "approvals", r.Approvals, func(id string, d Decision) (any, error) {
		if err := checkDecision(id, d); err != nil {
			return nil, err
		}
		switch d := d.(type) {
		case Approved:
			w := &decisionMsgpack{Kind: jsonKindApproved}
			if !isAbsent(d.OverrideArgs) {
				w.OverrideArgs = d.OverrideArgs
			}
			return w, nil
		case Denied:
			return &decisionMsgpack{Kind: jsonKindDenied, Message: &d.Message}, nil
		}
		panic("unreachable: checkDecision accepts only Approved and Denied")
	}); err != nil {
		return err
	}
	if err := encodeSorted(enc, "calls", r.Calls, func(id string, res Result) (any, error) {
		if err := checkResult(id, res); err != nil {
			return nil, err
		}
		switch res := res.(type) {
		case Value:
			return &resultMsgpack{Kind: msgpackKindValue, Value: res.Value}, nil
		case Return:
			return &resultMsgpack{Kind: jsonKindReturn, Value: res.Value, Content: res.Content, Metadata: res.Metadata}, nil
		case Retry:
			return &resultMsgpack{Kind: jsonKindRetry, Message: res.Message}, nil
		case Failed:
			return &resultMsgpack{Kind: jsonKindFailed, Message: res.Message}, nil
		}
		panic("unreachable: checkResult accepts only Value, Return, Retry and Failed")
	}); err != nil {
		return err
	}
	return encodeSorted(enc, "metadata", r.Metadata, func(id string, m json.RawMessage) (any, error) {
		if err := checkRaw(m); err != nil {
			return nil, fmt.Errorf("metadata of tool_call_id %q: %w", id, err)
		}
		return []byte(m), nil
	})
}

func encodeSorted[V any](enc *msgpack.Encoder, name string, m map[string]V, wire func(string, V) (any, error)) error {
	if err := enc.EncodeString(name); err != nil {
		return err
	}
	if m == nil {
		return enc.EncodeNil()
	}
	if err := enc.EncodeMapLen(len(m)); err != nil {
		return err
	}
	for _, id := range sortedKeys(m) {
		w, err := wire(id, m[id])
		if err != nil {
			return fmt.Errorf("encode results: %w", err)
		}
		if err := enc.EncodeString(id); err != nil {
			return err
		}
		if err := enc.Encode(w); err != nil {
			return err
		}
	}
	return nil
}

// DecodeMsgpack reads the form above. Unknown kinds, fields that do not
// belong to a kind and JSON values that are not valid JSON are errors.
func (r *Results) DecodeMsgpack(dec *msgpack.Decoder) error {
	var w resultsMsgpack
	if err := dec.Decode(&w); err != nil {
		return fmt.Errorf("decode results: %w", err)
	}
	var v Results
	if w.Approvals != nil {
		v.Approvals = make(map[string]Decision, len(w.Approvals))
	}
	for id, a := range w.Approvals {
		d, err := decisionFromMsgpack(id, a)
		if err != nil {
			return fmt.Errorf("decode results: %w", err)
		}
		v.Approvals[id] = d
	}
	if w.Calls != nil {
		v.Calls = make(map[string]Result, len(w.Calls))
	}
	for id, c := range w.Calls {
		res, err := resultFromMsgpack(id, c)
		if err != nil {
			return fmt.Errorf("decode results: %w", err)
		}
		v.Calls[id] = res
	}
	if w.Metadata != nil {
		v.Metadata = make(map[string]json.RawMessage, len(w.Metadata))
	}
	for id, m := range w.Metadata {
		if err := checkRaw(m); err != nil {
			return fmt.Errorf("decode results: metadata of tool_call_id %q: %w", id, err)
		}
		v.Metadata[id] = rawOrNil(m)
	}
	*r = v
	return nil
}

func decisionFromMsgpack(id string, w decisionMsgpack) (Decision, error) {
	bad := func(reason string, args ...any) error {
		return &InvalidAnswerError{ToolCallID: id, Kind: KindApproval, Reason: fmt.Sprintf(reason, args...)}
	}
	switch w.Kind {
	case jsonKindApproved:
		if w.Message != nil {
			return nil, bad("%s has a message", w.Kind)
		}
		if isAbsent(w.OverrideArgs) {
			return Approved{}, nil
		}
		if !json.Valid(w.OverrideArgs) || !isObject(w.OverrideArgs) {
			return nil, bad("override_args is not a JSON object")
		}
		return Approved{OverrideArgs: w.OverrideArgs}, nil
	case jsonKindDenied:
		if len(w.OverrideArgs) != 0 {
			return nil, bad("%s has override_args", w.Kind)
		}
		if w.Message == nil {
			return Denied{Message: DefaultDenyMessage}, nil
		}
		return Denied{Message: *w.Message}, nil
	}
	return nil, bad("not a decision: kind %q", w.Kind)
}

func resultFromMsgpack(id string, w resultMsgpack) (Result, error) {
	bad := func(reason string, args ...any) error {
		return &InvalidAnswerError{ToolCallID: id, Kind: KindCall, Reason: fmt.Sprintf(reason, args...)}
	}
	hasValue := len(w.Value) != 0
	hasExtras := w.Content != "" || len(w.Metadata) != 0
	switch w.Kind {
	case msgpackKindValue, jsonKindReturn:
		if w.Message != "" {
			return nil, bad("%s has a message", w.Kind)
		}
		if hasValue && !json.Valid(w.Value) {
			return nil, bad("value is not valid JSON")
		}
		if w.Kind == msgpackKindValue {
			if hasExtras {
				return nil, bad("value has content or metadata; use kind %s", jsonKindReturn)
			}
			return Value{Value: rawOrNil(w.Value)}, nil
		}
		if len(w.Metadata) != 0 && !json.Valid(w.Metadata) {
			return nil, bad("metadata is not valid JSON")
		}
		return Return{Value: rawOrNil(w.Value), Content: w.Content, Metadata: rawOrNil(w.Metadata)}, nil
	case jsonKindRetry, jsonKindFailed:
		if hasValue || hasExtras {
			return nil, bad("%s has a value, content or metadata", w.Kind)
		}
		if w.Kind == jsonKindRetry {
			return Retry{Message: w.Message}, nil
		}
		return Failed{Message: w.Message}, nil
	}
	return nil, bad("unknown result kind %q", w.Kind)
}

func rawOrNil(b []byte) json.RawMessage {
	if len(b) == 0 {
		return nil
	}
	return b
}
