package deferred_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/toolgate/toolgate/deferred"
)

// batch is the paused output of the seed approval example plus two external
// calls, as the agent would produce it.
func batch() *deferred.Requests {
	return &deferred.Requests{
		Calls: []deferred.Call{
			{ToolName: "run_job", Args: raw(`{"job":"x"}`), ToolCallID: "job1"},
			{ToolName: "get_location", Args: raw(`{"precision":"city"}`), ToolCallID: "loc1"},
		},
		Approvals: []deferred.Call{
			{ToolName: "delete_file", Args: raw(`{"path":"a.txt"}`), ToolCallID: "del1"},
			{ToolName: "update_file", Args: raw(`{"path":".env","content":""}`), ToolCallID: "upd1"},
		},
		Metadata: map[string]json.RawMessage{"upd1": raw(`{"reason":"protected"}`), "job1": raw(`{"queue":"slow"}`)},
	}
}

func TestBuildResults(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		approvals  map[string]deferred.Decision
		calls      map[string]deferred.Result
		metadata   map[string]json.RawMessage
		approveAll bool
		want       *deferred.Results
		wantErr    error // compared by type and fields
	}{
		{
			name:      "partial answers",
			approvals: map[string]deferred.Decision{"del1": deferred.Denied{Message: "no"}},
			calls:     map[string]deferred.Result{"loc1": deferred.Value{Value: raw(`"Berlin"`)}},
			metadata:  map[string]json.RawMessage{"del1": raw(`{"by":"alice"}`)},
			want: &deferred.Results{
				Approvals: map[string]deferred.Decision{"del1": deferred.Denied{Message: "no"}},
				Calls:     map[string]deferred.Result{"loc1": deferred.Value{Value: raw(`"Berlin"`)}},
				Metadata:  map[string]json.RawMessage{"del1": raw(`{"by":"alice"}`)},
			},
		},
		{
			name:       "approve all keeps an explicit deny",
			approvals:  map[string]deferred.Decision{"del1": deferred.Denied{Message: "no"}},
			approveAll: true,
			want: &deferred.Results{Approvals: map[string]deferred.Decision{
				"del1": deferred.Denied{Message: "no"},
				"upd1": deferred.Approved{},
			}},
		},
		{
			name:       "approve all keeps an explicit override",
			approvals:  map[string]deferred.Decision{"upd1": deferred.Approved{OverrideArgs: raw(`{"path":".env.example","content":""}`)}},
			approveAll: true,
			want: &deferred.Results{Approvals: map[string]deferred.Decision{
				"del1": deferred.Approved{},
				"upd1": deferred.Approved{OverrideArgs: raw(`{"path":".env.example","content":""}`)},
			}},
		},
		{
			name:       "approve all alone",
			approveAll: true,
			want: &deferred.Results{Approvals: map[string]deferred.Decision{
				"del1": deferred.Approved{}, "upd1": deferred.Approved{},
			}},
		},
		{
			name:      "decision for an external call",
			approvals: map[string]deferred.Decision{"job1": deferred.Approved{}},
			wantErr:   &deferred.CategoryError{ToolCallID: "job1", Kind: deferred.KindCall},
		},
		{
			name:    "result for an approval call",
			calls:   map[string]deferred.Result{"del1": deferred.Value{Value: raw(`"deleted"`)}},
			wantErr: &deferred.CategoryError{ToolCallID: "del1", Kind: deferred.KindApproval},
		},
		{
			name:      "unknown approval id",
			approvals: map[string]deferred.Decision{"ghost": deferred.Approved{}},
			wantErr:   &deferred.NotPendingError{ToolCallID: "ghost"},
		},
		{
			name:    "unknown call id",
			calls:   map[string]deferred.Result{"ghost": deferred.Failed{Message: "x"}},
			wantErr: &deferred.NotPendingError{ToolCallID: "ghost"},
		},
		{
			name:     "unknown metadata id",
			metadata: map[string]json.RawMessage{"ghost": raw(`{}`)},
			wantErr:  &deferred.NotPendingError{ToolCallID: "ghost"},
		},
		{
			name:      "nil decision",
			approvals: map[string]deferred.Decision{"del1": nil},
			wantErr:   &deferred.InvalidAnswerError{ToolCallID: "del1", Kind: deferred.KindApproval, Reason: "decision is nil"},
		},
		{
			name:    "nil result",
			calls:   map[string]deferred.Result{"job1": nil},
			wantErr: &deferred.InvalidAnswerError{ToolCallID: "job1", Kind: deferred.KindCall, Reason: "result is nil"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := batch()
			before := batch()
			got, err := r.BuildResults(tt.approvals, tt.calls, tt.metadata, tt.approveAll)
			if diff := cmp.Diff(tt.wantErr, err, errorFields); diff != "" {
				t.Fatalf("error (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.want, got, cmpOpts); diff != "" {
				t.Errorf("results (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(before, r); diff != "" {
				t.Errorf("BuildResults changed the batch:\n%s", diff)
			}
		})
	}
}

// errorFields compares the error types of this package by their fields.
var errorFields = cmp.Comparer(func(a, b error) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return cmp.Equal(unwrapTyped(a), unwrapTyped(b))
})

func unwrapTyped(err error) any {
	var (
		ce *deferred.CategoryError
		ia *deferred.InvalidAnswerError
		np *deferred.NotPendingError
		mr *deferred.MissingResultsError
	)
	switch {
	case errors.As(err, &ce):
		return *ce
	case errors.As(err, &ia):
		return *ia
	case errors.As(err, &np):
		return *np
	case errors.As(err, &mr):
		return *mr
	}
	return err.Error()
}

func TestRemaining(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		res  *deferred.Results
		want *deferred.Requests
	}{
		{"nil results", nil, batch()},
		{"nothing answered", &deferred.Results{}, batch()},
		{
			name: "answers in their own category",
			res: &deferred.Results{
				Approvals: map[string]deferred.Decision{"upd1": deferred.Approved{}},
				Calls:     map[string]deferred.Result{"loc1": deferred.Value{Value: raw(`"Berlin"`)}},
			},
			want: &deferred.Requests{
				Calls:     []deferred.Call{{ToolName: "run_job", Args: raw(`{"job":"x"}`), ToolCallID: "job1"}},
				Approvals: []deferred.Call{{ToolName: "delete_file", Args: raw(`{"path":"a.txt"}`), ToolCallID: "del1"}},
				Metadata:  map[string]json.RawMessage{"job1": raw(`{"queue":"slow"}`)},
			},
		},
		{
			name: "answers in the wrong category do not count",
			res: &deferred.Results{
				Approvals: map[string]deferred.Decision{"job1": deferred.Approved{}, "loc1": deferred.Approved{}},
				Calls:     map[string]deferred.Result{"del1": deferred.Value{Value: raw(`1`)}, "upd1": deferred.Retry{Message: "x"}},
			},
			want: batch(),
		},
		{
			name: "nil answers do not count",
			res: &deferred.Results{
				Approvals: map[string]deferred.Decision{"del1": nil},
				Calls:     map[string]deferred.Result{"job1": nil},
			},
			want: batch(),
		},
		{
			name: "all answered",
			res: &deferred.Results{
				Approvals: map[string]deferred.Decision{"del1": deferred.Denied{}, "upd1": deferred.Approved{}},
				Calls:     map[string]deferred.Result{"job1": deferred.Failed{Message: "x"}, "loc1": deferred.Value{Value: raw(`1`)}},
			},
			want: nil,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := batch()
			got := r.Remaining(tt.res)
			if diff := cmp.Diff(tt.want, got, cmpOpts); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(batch(), r); diff != "" {
				t.Errorf("Remaining changed the batch:\n%s", diff)
			}
		})
	}
	var nilBatch *deferred.Requests
	if got := nilBatch.Remaining(&deferred.Results{}); got != nil {
		t.Errorf("nil batch: got %+v, want nil", got)
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	complete := func() *deferred.Results {
		return &deferred.Results{
			Approvals: map[string]deferred.Decision{"del1": deferred.Approved{}, "upd1": deferred.Denied{Message: "no"}},
			Calls:     map[string]deferred.Result{"job1": deferred.Value{Value: raw(`"done"`)}, "loc1": deferred.Retry{Message: "x"}},
		}
	}
	tests := []struct {
		name    string
		edit    func(*deferred.Results)
		wantErr error
		wantMsg string
	}{
		{name: "complete", edit: func(*deferred.Results) {}},
		{
			name: "complete with metadata",
			edit: func(r *deferred.Results) { r.Metadata = map[string]json.RawMessage{"del1": raw(`{"by":"alice"}`)} },
		},
		{
			name: "decision for an external call",
			edit: func(r *deferred.Results) {
				delete(r.Calls, "job1")
				r.Approvals["job1"] = deferred.Approved{}
			},
			wantErr: &deferred.CategoryError{ToolCallID: "job1", Kind: deferred.KindCall},
			wantMsg: `tool_call_id "job1" is an external call; it needs a result, not a decision`,
		},
		{
			name: "result for an approval call",
			edit: func(r *deferred.Results) {
				delete(r.Approvals, "del1")
				r.Calls["del1"] = deferred.Value{Value: raw(`"deleted"`)}
			},
			wantErr: &deferred.CategoryError{ToolCallID: "del1", Kind: deferred.KindApproval},
			wantMsg: `tool_call_id "del1" is an approval call; it needs a decision, not a result`,
		},
		{
			name: "category comes before completeness",
			edit: func(r *deferred.Results) {
				r.Approvals = map[string]deferred.Decision{"loc1": deferred.Approved{}}
				r.Calls = nil
			},
			wantErr: &deferred.CategoryError{ToolCallID: "loc1", Kind: deferred.KindCall},
		},
		{
			name:    "nil decision",
			edit:    func(r *deferred.Results) { r.Approvals["del1"] = nil },
			wantErr: &deferred.InvalidAnswerError{ToolCallID: "del1", Kind: deferred.KindApproval, Reason: "decision is nil"},
		},
		{
			name:    "pointer decision",
			edit:    func(r *deferred.Results) { r.Approvals["del1"] = &deferred.Approved{} },
			wantErr: &deferred.InvalidAnswerError{ToolCallID: "del1", Kind: deferred.KindApproval, Reason: "*deferred.Approved is not a decision; use deferred.Approved or deferred.Denied"},
		},
		{
			name:    "nil result",
			edit:    func(r *deferred.Results) { r.Calls["loc1"] = nil },
			wantErr: &deferred.InvalidAnswerError{ToolCallID: "loc1", Kind: deferred.KindCall, Reason: "result is nil"},
		},
		{
			name:    "missing approval",
			edit:    func(r *deferred.Results) { delete(r.Approvals, "upd1") },
			wantErr: &deferred.MissingResultsError{Expected: []string{"del1", "job1", "loc1", "upd1"}, Got: []string{"del1", "job1", "loc1"}},
			wantMsg: "results needed for all deferred calls: expected [del1 job1 loc1 upd1], got [del1 job1 loc1]",
		},
		{
			name:    "unknown id",
			edit:    func(r *deferred.Results) { r.Calls["bogus"] = deferred.Value{Value: raw(`"z"`)} },
			wantErr: &deferred.MissingResultsError{Expected: []string{"del1", "job1", "loc1", "upd1"}, Got: []string{"bogus", "del1", "job1", "loc1", "upd1"}},
		},
		{
			name:    "metadata for an unknown id",
			edit:    func(r *deferred.Results) { r.Metadata = map[string]json.RawMessage{"ghost": raw(`1`)} },
			wantErr: &deferred.NotPendingError{ToolCallID: "ghost"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := complete()
			tt.edit(res)
			err := batch().Check(res)
			if diff := cmp.Diff(tt.wantErr, err, errorFields); diff != "" {
				t.Fatalf("error (-want +got):\n%s", diff)
			}
			if tt.wantMsg != "" && err.Error() != tt.wantMsg {
				t.Errorf("message %q, want %q", err, tt.wantMsg)
			}
		})
	}
	t.Run("nil results against an empty batch", func(t *testing.T) {
		t.Parallel()
		if err := (&deferred.Requests{}).Check(nil); err != nil {
			t.Errorf("got %v", err)
		}
		err := batch().Check(nil)
		if err == nil || !strings.Contains(err.Error(), "expected [del1 job1 loc1 upd1], got []") {
			t.Errorf("got %v", err)
		}
	})
}

func TestConstructors(t *testing.T) {
	t.Parallel()
	v, err := deferred.ValueOf(map[string]any{"b": 1, "a": []int{2}})
	if err != nil || string(v.Value) != `{"a":[2],"b":1}` {
		t.Errorf("ValueOf map: %s, %v", v.Value, err)
	}
	v, err = deferred.ValueOf(raw(`1.50`))
	if err != nil || string(v.Value) != `1.50` {
		t.Errorf("ValueOf raw: %s, %v", v.Value, err)
	}
	if _, err := deferred.ValueOf(raw(`{`)); err == nil {
		t.Error("ValueOf invalid raw: no error")
	}
	if _, err := deferred.ValueOf(func() {}); err == nil {
		t.Error("ValueOf func: no error")
	}
	a, err := deferred.Approve(nil)
	if err != nil || a.OverrideArgs != nil {
		t.Errorf("Approve(nil): %+v, %v", a, err)
	}
	a, err = deferred.Approve(struct {
		Path string `json:"path"`
	}{"b.txt"})
	if err != nil || string(a.OverrideArgs) != `{"path":"b.txt"}` {
		t.Errorf("Approve(struct): %s, %v", a.OverrideArgs, err)
	}
	if _, err := deferred.Approve([]string{"x"}); err == nil {
		t.Error("Approve(list): no error")
	}
	if _, err := deferred.Approve(raw(`"x"`)); err == nil {
		t.Error("Approve(raw string): no error")
	}
}

func TestReturnOf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		value, meta   any
		content       string
		want          deferred.Return
		wantErrPrefix string
	}{
		{name: "value only", value: 42, want: deferred.Return{Value: json.RawMessage(`42`)}},
		{name: "all parts", value: "ok", content: "see the file", meta: map[string]string{"task_id": "t1"},
			want: deferred.Return{Value: json.RawMessage(`"ok"`), Content: "see the file", Metadata: json.RawMessage(`{"task_id":"t1"}`)}},
		{name: "raw value", value: json.RawMessage(`{"a":1}`), want: deferred.Return{Value: json.RawMessage(`{"a":1}`)}},
		{name: "invalid raw value", value: json.RawMessage(`{`), wantErrPrefix: "return value:"},
		{name: "unencodable metadata", value: 1, meta: func() {}, wantErrPrefix: "return metadata:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := deferred.ReturnOf(tt.value, tt.content, tt.meta)
			if tt.wantErrPrefix != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tt.wantErrPrefix) {
					t.Fatalf("err = %v, want prefix %q", err, tt.wantErrPrefix)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ReturnOf (-want +got):\n%s", diff)
			}
		})
	}
}
