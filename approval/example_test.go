package approval_test

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/toolgate/toolgate/approval"
)

// A decider is a function of the request: here, small transfers pass,
// large ones go to a human, and deletions are refused.
func Example() {
	d := approval.DeciderFunc(func(ctx context.Context, req approval.Request) (approval.Verdict, error) {
		var args struct {
			Amount float64 `json:"amount"`
		}
		switch {
		case req.ToolName == "delete_file":
			return approval.Deny("deleting files is not allowed"), nil
		case json.Unmarshal(req.Args, &args) != nil:
			return approval.Escalate(), nil
		case args.Amount > 1000:
			return approval.Escalate(), nil
		}
		return approval.Approve(), nil
	})
	for _, req := range []approval.Request{
		{ToolName: "transfer", Args: json.RawMessage(`{"amount":20}`)},
		{ToolName: "transfer", Args: json.RawMessage(`{"amount":5000}`)},
		{ToolName: "delete_file", Args: json.RawMessage(`{"path":"/etc"}`)},
	} {
		v, _ := d.Decide(context.Background(), req)
		fmt.Println(v)
	}
	// Output:
	// approve
	// escalate
	// deny: deleting files is not allowed
}

// The approver binary's CEL policy is a Decider too.
func ExampleParsePolicy() {
	p, err := approval.ParsePolicy([]byte(`
rules:
  - tool: send_mail
    action: approve
    override_args: {to: review@example.com}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	v, _ := p.Decide(context.Background(), approval.Request{ToolName: "send_mail", Args: json.RawMessage(`{"to":"boss@example.com"}`)})
	fmt.Println(v)
	// Output: approve with args {"to":"review@example.com"}
}
