package deferred_test

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/toolgate/toolgate/deferred"
)

func exampleBatch() *deferred.Requests {
	return &deferred.Requests{
		Calls: []deferred.Call{
			{ToolName: "get_location", Args: json.RawMessage(`{"precision":"city"}`), ToolCallID: "loc1"},
		},
		Approvals: []deferred.Call{
			{ToolName: "delete_file", Args: json.RawMessage(`{"path":"a.txt"}`), ToolCallID: "del1"},
			{ToolName: "update_file", Args: json.RawMessage(`{"path":".env","content":""}`), ToolCallID: "upd1"},
		},
		Metadata: map[string]json.RawMessage{"upd1": json.RawMessage(`{"reason":"protected"}`)},
	}
}

func ExampleRequests_BuildResults() {
	batch := exampleBatch()
	city, err := deferred.ValueOf("Berlin")
	if err != nil {
		panic(err)
	}
	// Deny one call explicitly and approve every other approval.
	res, err := batch.BuildResults(
		map[string]deferred.Decision{"upd1": deferred.Denied{Message: "not the .env file"}},
		map[string]deferred.Result{"loc1": city},
		nil, true)
	if err != nil {
		panic(err)
	}
	fmt.Println("complete:", batch.Check(res) == nil)

	// A decision for an external call is refused.
	_, err = batch.BuildResults(map[string]deferred.Decision{"loc1": deferred.Approved{}}, nil, nil, false)
	fmt.Println(err)
	// Output:
	// complete: true
	// tool_call_id "loc1" is an external call; it needs a result, not a decision
}

func ExampleRequests_Remaining() {
	batch := exampleBatch()
	res := &deferred.Results{
		Approvals: map[string]deferred.Decision{"del1": deferred.Approved{}},
		// An answer in the wrong category resolves nothing.
		Calls: map[string]deferred.Result{"upd1": deferred.Value{Value: json.RawMessage(`"updated"`)}},
	}
	rest := batch.Remaining(res)
	b, err := json.Marshal(rest)
	if err != nil {
		panic(err)
	}
	fmt.Println(string(b))
	fmt.Println(batch.Check(res))
	// Output:
	// {"calls":[{"tool_name":"get_location","args":{"precision":"city"},"tool_call_id":"loc1"}],"approvals":[{"tool_name":"update_file","args":{"path":".env","content":""},"tool_call_id":"upd1"}],"metadata":{"upd1":{"reason":"protected"}}}
	// tool_call_id "upd1" is an approval call; it needs a decision, not a result
}

// Every answer has a constructor: ValueOf, ReturnOf, AskRetry and Fail
// for external calls, Approve and Deny for approvals.
func ExampleResults_MarshalJSON() {
	override, err := deferred.Approve(map[string]string{"path": "b.txt"})
	if err != nil {
		panic(err)
	}
	city, err := deferred.ValueOf("Berlin")
	if err != nil {
		panic(err)
	}
	receipt, err := deferred.ReturnOf(map[string]int{"order": 17}, "Receipt attached", map[string]string{"task_id": "t7"})
	if err != nil {
		panic(err)
	}
	res := deferred.Results{
		Approvals: map[string]deferred.Decision{
			"a1": deferred.Approved{},
			"a2": override,
			"a3": deferred.Deny("no"),
		},
		Calls: map[string]deferred.Result{
			"c1": city,
			"c2": receipt,
			"c3": deferred.AskRetry("use ISO dates"),
			"c4": deferred.Fail("timed out"),
		},
	}
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		panic(err)
	}
	fmt.Println(string(b))

	// Pydantic AI's shorthand decisions decode too.
	var in deferred.Results
	if err := json.Unmarshal([]byte(`{"approvals":{"a1":true,"a2":false}}`), &in); err != nil {
		panic(err)
	}
	fmt.Printf("%#v\n%#v\n", in.Approvals["a1"], in.Approvals["a2"])
	// Output:
	// {
	//   "approvals": {
	//     "a1": {
	//       "kind": "tool-approved"
	//     },
	//     "a2": {
	//       "kind": "tool-approved",
	//       "override_args": {
	//         "path": "b.txt"
	//       }
	//     },
	//     "a3": {
	//       "kind": "tool-denied",
	//       "message": "no"
	//     }
	//   },
	//   "calls": {
	//     "c1": "Berlin",
	//     "c2": {
	//       "kind": "tool-return",
	//       "return_value": {
	//         "order": 17
	//       },
	//       "content": "Receipt attached",
	//       "metadata": {
	//         "task_id": "t7"
	//       }
	//     },
	//     "c3": {
	//       "kind": "model-retry",
	//       "message": "use ISO dates"
	//     },
	//     "c4": {
	//       "kind": "tool-failed",
	//       "message": "timed out"
	//     }
	//   },
	//   "metadata": {}
	// }
	// deferred.Approved{OverrideArgs:json.RawMessage(nil)}
	// deferred.Denied{Message:"The tool call was denied."}
}

// A Go tool defers its call with metadata, which travels with the batch
// keyed by the call's id; the loop finds the deferral with errors.As.
func ExampleCallDeferred() {
	for _, err := range []error{
		deferred.CallDeferred(map[string]string{"task_id": "task_0"}),
		deferred.ApprovalRequired(map[string]any{"reason": "over the limit"}),
		deferred.CallDeferred(nil),
	} {
		var d *deferred.Deferral
		if errors.As(err, &d) {
			fmt.Printf("%s %s\n", d.Kind, d.Metadata)
		}
	}
	// Output:
	// call {"task_id":"task_0"}
	// approval {"reason":"over the limit"}
	// call
}
