package deferred

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
)

// The JSON forms follow Pydantic AI's DeferredToolRequests and
// DeferredToolResults (D34), so tools written for it can talk to ours:
//
//	approvals: true | false
//	         | {"kind":"tool-approved","override_args":{...}}   (override_args optional, may be null)
//	         | {"kind":"tool-denied","message":"..."}            (message optional: DefaultDenyMessage)
//	calls:     {"kind":"tool-return","return_value":V,"content":"...","metadata":M}
//	         | {"kind":"model-retry","message":"..."}
//	         | {"kind":"tool-failed","message":"..."}
//	         | any other JSON value: a plain Value
//
// The calls form is ambiguous by design of that wire format: a plain value
// that is an object whose "kind" is "tool-return", "model-retry" or
// "tool-failed" is read as that form. To keep every encoded Results lossless,
// MarshalJSON refuses such a Value; send it as Return{Value: ...} instead.
// Keys are matched exactly (case-sensitive) and unknown keys in a kinded
// object are an error, so a form never half-parses.
const (
	jsonKindApproved = "tool-approved"
	jsonKindDenied   = "tool-denied"
	jsonKindReturn   = "tool-return"
	jsonKindRetry    = "model-retry"
	jsonKindFailed   = "tool-failed"
)

var emptyObject = json.RawMessage("{}")

// MarshalJSON writes nil lists as [] and nil metadata as {}, and args the
// model did not send as {}.
func (r Requests) MarshalJSON() ([]byte, error) {
	w := requestsJSON{
		Calls:     callsOrEmpty(r.Calls),
		Approvals: callsOrEmpty(r.Approvals),
		Metadata:  r.Metadata,
	}
	if w.Metadata == nil {
		w.Metadata = map[string]json.RawMessage{}
	}
	return json.Marshal(w)
}

// UnmarshalJSON decodes and checks a batch: unknown fields, empty or
// duplicate tool_call_ids, args that are not a JSON object and metadata for
// ids outside the batch are errors. Null or missing args become {}.
func (r *Requests) UnmarshalJSON(b []byte) error {
	if isNull(b) {
		return nil
	}
	var w requestsJSON
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return fmt.Errorf("decode requests: %w", err)
	}
	if dec.More() {
		return errors.New("decode requests: trailing data")
	}
	v := Requests(w)
	if err := v.normalize(); err != nil {
		return fmt.Errorf("decode requests: %w", err)
	}
	*r = v
	return nil
}

type requestsJSON struct {
	Calls     []Call                     `json:"calls"`
	Approvals []Call                     `json:"approvals"`
	Metadata  map[string]json.RawMessage `json:"metadata"`
}

func callsOrEmpty(calls []Call) []Call {
	out := make([]Call, len(calls))
	copy(out, calls)
	for i := range out {
		if len(out[i].Args) == 0 {
			out[i].Args = emptyObject
		}
	}
	return out
}

// normalize checks a decoded batch and turns absent args into {}.
func (r *Requests) normalize() error {
	seen := make(map[string]bool, len(r.Calls)+len(r.Approvals))
	for _, list := range []struct {
		name  string
		calls []Call
	}{{"calls", r.Calls}, {"approvals", r.Approvals}} {
		for i := range list.calls {
			c := &list.calls[i]
			if c.ToolCallID == "" {
				return fmt.Errorf("%s[%d]: tool_call_id is empty", list.name, i)
			}
			if c.ToolName == "" {
				return fmt.Errorf("%s[%d] (tool_call_id %q): tool_name is empty", list.name, i, c.ToolCallID)
			}
			if seen[c.ToolCallID] {
				return fmt.Errorf("duplicate tool_call_id %q", c.ToolCallID)
			}
			seen[c.ToolCallID] = true
			if len(c.Args) == 0 || isNull(c.Args) {
				c.Args = emptyObject
				continue
			}
			if !json.Valid(c.Args) || !isObject(c.Args) {
				return fmt.Errorf("args of tool_call_id %q: not a JSON object", c.ToolCallID)
			}
		}
	}
	for id, m := range r.Metadata {
		if !seen[id] {
			return fmt.Errorf("metadata for tool_call_id %q, which is not in the batch", id)
		}
		if err := checkRaw(m); err != nil {
			return fmt.Errorf("metadata of tool_call_id %q: %w", id, err)
		}
	}
	return nil
}

// MarshalJSON writes the Pydantic AI form described above. Nil maps are
// written as {}; a nil, pointer or ambiguous answer is an error naming its id.
func (r Results) MarshalJSON() ([]byte, error) {
	w := resultsJSON{
		Approvals: make(map[string]json.RawMessage, len(r.Approvals)),
		Calls:     make(map[string]json.RawMessage, len(r.Calls)),
		Metadata:  r.Metadata,
	}
	for _, id := range sortedKeys(r.Approvals) {
		b, err := marshalDecision(id, r.Approvals[id])
		if err != nil {
			return nil, fmt.Errorf("encode results: %w", err)
		}
		w.Approvals[id] = b
	}
	for _, id := range sortedKeys(r.Calls) {
		b, err := marshalResult(id, r.Calls[id])
		if err != nil {
			return nil, fmt.Errorf("encode results: %w", err)
		}
		w.Calls[id] = b
	}
	if w.Metadata == nil {
		w.Metadata = map[string]json.RawMessage{}
	}
	return json.Marshal(w)
}

type resultsJSON struct {
	Approvals map[string]json.RawMessage `json:"approvals"`
	Calls     map[string]json.RawMessage `json:"calls"`
	Metadata  map[string]json.RawMessage `json:"metadata"`
}

// UnmarshalJSON reads the Pydantic AI form. `true` is Approved{}, `false` is
// Denied{Message: DefaultDenyMessage} (D22); any other approval value that is
// not a decision object is an *InvalidAnswerError naming its id (D20). The
// decoded maps are never nil.
func (r *Results) UnmarshalJSON(b []byte) error {
	if isNull(b) {
		return nil
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil {
		return fmt.Errorf("decode results: %w", err)
	}
	for k := range top {
		if k != "approvals" && k != "calls" && k != "metadata" {
			return fmt.Errorf("decode results: unknown field %q", k)
		}
	}
	var approvals, calls, metadata map[string]json.RawMessage
	for _, f := range []struct {
		name string
		dst  *map[string]json.RawMessage
	}{{"approvals", &approvals}, {"calls", &calls}, {"metadata", &metadata}} {
		raw, ok := top[f.name]
		if !ok {
			continue
		}
		if err := json.Unmarshal(raw, f.dst); err != nil {
			return fmt.Errorf("decode results: %s: %w", f.name, err)
		}
	}
	v := Results{
		Approvals: make(map[string]Decision, len(approvals)),
		Calls:     make(map[string]Result, len(calls)),
		Metadata:  make(map[string]json.RawMessage, len(metadata)),
	}
	for _, id := range sortedKeys(approvals) {
		d, err := unmarshalDecision(id, approvals[id])
		if err != nil {
			return fmt.Errorf("decode results: %w", err)
		}
		v.Approvals[id] = d
	}
	for _, id := range sortedKeys(calls) {
		res, err := unmarshalResult(id, calls[id])
		if err != nil {
			return fmt.Errorf("decode results: %w", err)
		}
		v.Calls[id] = res
	}
	for id, m := range metadata {
		v.Metadata[id] = m
	}
	*r = v
	return nil
}

func marshalDecision(id string, d Decision) (json.RawMessage, error) {
	if err := checkDecision(id, d); err != nil {
		return nil, err
	}
	switch d := d.(type) {
	case Approved:
		w := struct {
			Kind         string          `json:"kind"`
			OverrideArgs json.RawMessage `json:"override_args,omitempty"`
		}{Kind: jsonKindApproved}
		if !isAbsent(d.OverrideArgs) {
			w.OverrideArgs = d.OverrideArgs
		}
		return json.Marshal(w)
	case Denied:
		return json.Marshal(struct {
			Kind    string `json:"kind"`
			Message string `json:"message"`
		}{jsonKindDenied, d.Message})
	}
	panic("unreachable: checkDecision accepts only Approved and Denied")
}

func marshalResult(id string, res Result) (json.RawMessage, error) {
	if err := checkResult(id, res); err != nil {
		return nil, err
	}
	switch res := res.(type) {
	case Value:
		if len(res.Value) == 0 {
			return json.RawMessage("null"), nil
		}
		if kind, _, ok := resultKind(res.Value); ok {
			return nil, &InvalidAnswerError{ToolCallID: id, Kind: KindCall, Reason: fmt.Sprintf(
				"a plain value that is an object of kind %q would be read as that form; send it as a Return", kind)}
		}
		return res.Value, nil
	case Return:
		w := struct {
			Kind        string          `json:"kind"`
			ReturnValue json.RawMessage `json:"return_value"`
			Content     string          `json:"content,omitempty"`
			Metadata    json.RawMessage `json:"metadata,omitempty"`
		}{Kind: jsonKindReturn, ReturnValue: res.Value, Content: res.Content}
		if len(w.ReturnValue) == 0 {
			w.ReturnValue = json.RawMessage("null")
		}
		if !isAbsent(res.Metadata) {
			w.Metadata = res.Metadata
		}
		return json.Marshal(w)
	case Retry:
		return marshalMessage(jsonKindRetry, res.Message)
	case Failed:
		return marshalMessage(jsonKindFailed, res.Message)
	}
	panic("unreachable: checkResult accepts only Value, Return, Retry and Failed")
}

func marshalMessage(kind, msg string) (json.RawMessage, error) {
	return json.Marshal(struct {
		Kind    string `json:"kind"`
		Message string `json:"message"`
	}{kind, msg})
}

func unmarshalDecision(id string, raw json.RawMessage) (Decision, error) {
	bad := func(reason string, args ...any) error {
		return &InvalidAnswerError{ToolCallID: id, Kind: KindApproval, Reason: fmt.Sprintf(reason, args...)}
	}
	switch t := bytes.TrimSpace(raw); {
	case bytes.Equal(t, []byte("true")):
		return Approved{}, nil
	case bytes.Equal(t, []byte("false")):
		return Denied{Message: DefaultDenyMessage}, nil
	}
	kind, fields, ok := objectKind(raw)
	switch {
	case ok && kind == jsonKindApproved:
		if k := unknownKey(fields, "kind", "override_args"); k != "" {
			return nil, bad("unknown field %q in %s", k, kind)
		}
		args := fields["override_args"]
		if isAbsent(args) {
			return Approved{}, nil
		}
		if !isObject(args) {
			return nil, bad("override_args is not a JSON object")
		}
		return Approved{OverrideArgs: args}, nil
	case ok && kind == jsonKindDenied:
		if k := unknownKey(fields, "kind", "message"); k != "" {
			return nil, bad("unknown field %q in %s", k, kind)
		}
		msg, present, err := stringField(fields, "message")
		if err != nil {
			return nil, bad("%s: %v", kind, err)
		}
		if !present {
			msg = DefaultDenyMessage
		}
		return Denied{Message: msg}, nil
	}
	return nil, bad("not a decision: want true, false, {\"kind\":%q} or {\"kind\":%q}, got %s",
		jsonKindApproved, jsonKindDenied, excerpt(raw))
}

func unmarshalResult(id string, raw json.RawMessage) (Result, error) {
	kind, fields, ok := resultKind(raw)
	if !ok {
		return Value{Value: raw}, nil
	}
	bad := func(reason string, args ...any) error {
		return &InvalidAnswerError{ToolCallID: id, Kind: KindCall, Reason: kind + ": " + fmt.Sprintf(reason, args...)}
	}
	switch kind {
	case jsonKindReturn:
		if k := unknownKey(fields, "kind", "return_value", "content", "metadata"); k != "" {
			return nil, bad("unknown field %q", k)
		}
		v, present := fields["return_value"]
		if !present {
			return nil, bad("return_value is missing")
		}
		content, _, err := stringField(fields, "content")
		if err != nil {
			return nil, bad("%v", err)
		}
		out := Return{Value: v, Content: content}
		if m := fields["metadata"]; !isAbsent(m) {
			out.Metadata = m
		}
		return out, nil
	default: // model-retry, tool-failed
		if k := unknownKey(fields, "kind", "message"); k != "" {
			return nil, bad("unknown field %q", k)
		}
		msg, present, err := stringField(fields, "message")
		if err != nil {
			return nil, bad("%v", err)
		}
		if !present {
			return nil, bad("message is missing")
		}
		if kind == jsonKindRetry {
			return Retry{Message: msg}, nil
		}
		return Failed{Message: msg}, nil
	}
}

// resultKind reports whether raw is one of the kinded result objects.
func resultKind(raw json.RawMessage) (string, map[string]json.RawMessage, bool) {
	kind, fields, ok := objectKind(raw)
	if !ok || (kind != jsonKindReturn && kind != jsonKindRetry && kind != jsonKindFailed) {
		return "", nil, false
	}
	return kind, fields, true
}

// objectKind returns the string value of the exact key "kind" of a JSON
// object, with all its fields.
func objectKind(raw json.RawMessage) (string, map[string]json.RawMessage, bool) {
	if !isObject(raw) {
		return "", nil, false
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return "", nil, false
	}
	k, ok := fields["kind"]
	if !ok {
		return "", nil, false
	}
	var kind string
	if !isString(k) || json.Unmarshal(k, &kind) != nil {
		return "", nil, false
	}
	return kind, fields, true
}

func stringField(fields map[string]json.RawMessage, name string) (string, bool, error) {
	raw, ok := fields[name]
	if !ok || isNull(raw) {
		return "", ok && !isNull(raw), nil
	}
	var s string
	if !isString(raw) || json.Unmarshal(raw, &s) != nil {
		return "", true, fmt.Errorf("%s is not a string", name)
	}
	return s, true, nil
}

func unknownKey(fields map[string]json.RawMessage, known ...string) string {
	for _, k := range sortedKeys(fields) {
		if !slices.Contains(known, k) {
			return k
		}
	}
	return ""
}

func excerpt(raw json.RawMessage) string {
	const max = 64
	s := string(bytes.TrimSpace(raw))
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}

func firstByte(raw []byte) byte {
	t := bytes.TrimLeft(raw, " \t\r\n")
	if len(t) == 0 {
		return 0
	}
	return t[0]
}

func isObject(raw []byte) bool { return firstByte(raw) == '{' }
func isString(raw []byte) bool { return firstByte(raw) == '"' }
func isNull(raw []byte) bool   { return bytes.Equal(bytes.TrimSpace(raw), []byte("null")) }

// isAbsent treats a missing optional JSON value and an explicit null alike.
func isAbsent(raw []byte) bool { return len(raw) == 0 || isNull(raw) }

// checkRaw accepts nil (no value, written as null) or one valid JSON text.
func checkRaw(raw []byte) error {
	if len(raw) == 0 || json.Valid(raw) {
		return nil
	}
	return errors.New("not valid JSON")
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
