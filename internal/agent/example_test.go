package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"sync"

	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/deferred"
)

type updateFileArgs struct {
	Path    string `json:"path"`
	Content string `json:"content"`
}

type deleteFileArgs struct {
	Path string `json:"path"`
}

var protectedFiles = map[string]bool{".env": true}

// fileTools are the seed article's update_file (approval needed for
// protected files only) and delete_file (approval always needed).
func fileTools(withReason bool) []agent.Tool {
	updateFile, err := agent.NewTool("update_file", "Update a file",
		func(ctx *agent.RunContext, a updateFileArgs) (string, error) {
			if protectedFiles[a.Path] && !ctx.ToolCallApproved {
				if withReason {
					return "", deferred.ApprovalRequired(map[string]string{"reason": "protected"})
				}
				return "", deferred.ApprovalRequired(nil)
			}
			return fmt.Sprintf("File '%s' updated: '%s'", a.Path, a.Content), nil
		})
	if err != nil {
		log.Fatal(err)
	}
	deleteFile, err := agent.NewTool("delete_file", "Delete a file",
		func(ctx *agent.RunContext, a deleteFileArgs) (string, error) {
			return fmt.Sprintf("File '%s' deleted", a.Path), nil
		}, agent.RequiresApproval())
	if err != nil {
		log.Fatal(err)
	}
	return []agent.Tool{updateFile, deleteFile}
}

// A run that meets calls needing approval pauses with a batch; a second run
// resumes it with the decisions (the seed article's first example).
func Example_approvalRequired() {
	ctx := context.Background()
	model := agent.NewScriptModel("", []agent.ScriptResponse{
		{Calls: []agent.ScriptCall{
			{Tool: "delete_file", ID: "delete_file", Args: json.RawMessage(`{"path":"__init__.py"}`)},
			{Tool: "update_file", ID: "update_file_readme", Args: json.RawMessage(`{"path":"README.md","content":"Hello, world!"}`)},
			{Tool: "update_file", ID: "update_file_dotenv", Args: json.RawMessage(`{"path":".env","content":""}`)},
		}},
		{Calls: []agent.ScriptCall{
			{Tool: "update_file", ID: "update_file_backup", Args: json.RawMessage(`{"path":"README.md.bak","content":"Hello, world!"}`)},
		}},
		{Text: "Deleting __init__.py is not allowed; README.md and .env are updated and README.md.bak is created."},
	})
	a, err := agent.New(agent.Config{Model: model, Tools: fileTools(true), AllowDeferred: true})
	if err != nil {
		log.Fatal(err)
	}
	res, err := a.Run(ctx, agent.RunInput{Prompt: "Delete `__init__.py`, write `Hello, world!` to `README.md`, and clear `.env`"})
	if err != nil {
		log.Fatal(err)
	}
	requests := res.Deferred
	for _, c := range requests.Approvals {
		fmt.Printf("approval needed: %s %s %s\n", c.ToolCallID, c.ToolName, c.Args)
	}
	fmt.Printf("metadata: %s\n", requests.Metadata["update_file_dotenv"])

	approvals := map[string]deferred.Decision{}
	for _, c := range requests.Approvals {
		switch c.ToolName {
		case "update_file":
			approvals[c.ToolCallID] = deferred.Approved{}
		case "delete_file":
			approvals[c.ToolCallID] = deferred.Denied{Message: "Deleting files is not allowed"}
		}
	}
	results, err := requests.BuildResults(approvals, nil, nil, false)
	if err != nil {
		log.Fatal(err)
	}
	res, err = a.Run(ctx, agent.RunInput{
		Prompt:   "Now create a backup of README.md",
		History:  res.AllMessages,
		Results:  results,
		Requests: requests,
	})
	if err != nil {
		log.Fatal(err)
	}
	for _, p := range res.NewMessages[0].Parts {
		switch p.Kind {
		case agent.PartToolReturn:
			fmt.Printf("%s: %s %s\n", p.ToolCallID, p.Outcome, p.Value)
		case agent.PartUserPrompt:
			fmt.Printf("user: %s\n", p.Content)
		}
	}
	fmt.Println(res.Output)
	// Output:
	// approval needed: delete_file delete_file {"path":"__init__.py"}
	// approval needed: update_file_dotenv update_file {"path":".env","content":""}
	// metadata: {"reason":"protected"}
	// delete_file: denied "Deleting files is not allowed"
	// update_file_dotenv: success "File '.env' updated: ''"
	// user: Now create a backup of README.md
	// Deleting __init__.py is not allowed; README.md and .env are updated and README.md.bak is created.
}

type calculateArgs struct {
	Question string `json:"question"`
}

// A tool hands its work to a background task and defers the call; the run
// is resumed with the task's result (the seed article's second example).
func Example_externalCall() {
	ctx := context.Background()
	var mu sync.Mutex
	var wg sync.WaitGroup
	answers := map[string]int{}
	calculateAnswer, err := agent.NewTool("calculate_answer", "Start a long-running calculation in the background",
		func(ctx *agent.RunContext, a calculateArgs) (string, error) {
			mu.Lock()
			taskID := fmt.Sprintf("task_%d", len(answers))
			answers[taskID] = 0
			mu.Unlock()
			wg.Go(func() {
				mu.Lock()
				defer mu.Unlock()
				answers[taskID] = 42
			})
			return "", deferred.CallDeferred(map[string]string{"task_id": taskID})
		})
	if err != nil {
		log.Fatal(err)
	}
	model := agent.NewScriptModel("", []agent.ScriptResponse{
		{Calls: []agent.ScriptCall{{Tool: "calculate_answer", ID: "pyd_ai_tool_call_id",
			Args: json.RawMessage(`{"question":"the ultimate question of life, the universe, and everything"}`)}}},
		{Text: "The answer to the ultimate question of life, the universe, and everything is 42."},
	})
	a, err := agent.New(agent.Config{Model: model, Tools: []agent.Tool{calculateAnswer}, AllowDeferred: true})
	if err != nil {
		log.Fatal(err)
	}
	res, err := a.Run(ctx, agent.RunInput{Prompt: "Calculate the answer to the ultimate question of life, the universe, and everything"})
	if err != nil {
		log.Fatal(err)
	}
	requests := res.Deferred
	fmt.Printf("calls: %s, metadata: %s\n", requests.Calls[0].ToolCallID, requests.Metadata["pyd_ai_tool_call_id"])

	wg.Wait()
	calls := map[string]deferred.Result{}
	for _, c := range requests.Calls {
		var meta struct {
			TaskID string `json:"task_id"`
		}
		_ = json.Unmarshal(requests.Metadata[c.ToolCallID], &meta)
		mu.Lock()
		answer, ok := answers[meta.TaskID]
		mu.Unlock()
		if !ok {
			calls[c.ToolCallID] = deferred.Retry{Message: "No result for this tool call was found."}
			continue
		}
		v, err := deferred.ValueOf(answer)
		if err != nil {
			log.Fatal(err)
		}
		calls[c.ToolCallID] = v
	}
	results, err := requests.BuildResults(nil, calls, nil, false)
	if err != nil {
		log.Fatal(err)
	}
	res, err = a.Run(ctx, agent.RunInput{History: res.AllMessages, Results: results, Requests: requests})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Output)
	// Output:
	// calls: pyd_ai_tool_call_id, metadata: {"task_id":"task_0"}
	// The answer to the ultimate question of life, the universe, and everything is 42.
}

type taskArgs struct {
	Task string `json:"task"`
}

// handleDeferred is the seed article's handler: deletes are denied, other
// approvals granted, and external calls answered inline.
func handleDeferred(ctx *agent.RunContext, requests *deferred.Requests) (*deferred.Results, error) {
	approvals := map[string]deferred.Decision{}
	for _, c := range requests.Approvals {
		if c.ToolName == "delete_file" {
			approvals[c.ToolCallID] = deferred.Denied{Message: "Deleting files is not allowed"}
		} else {
			approvals[c.ToolCallID] = deferred.Approved{}
		}
	}
	calls := map[string]deferred.Result{}
	for _, c := range requests.Calls {
		v, err := deferred.ValueOf(fmt.Sprintf("(external result for %s)", c.ToolName))
		if err != nil {
			return nil, err
		}
		calls[c.ToolCallID] = v
	}
	return requests.BuildResults(approvals, calls, nil, false)
}

func handlerAgent(model agent.Model) *agent.Agent {
	sendToWorker, err := agent.NewTool("send_to_worker", "Hand a task to a worker",
		func(ctx *agent.RunContext, a taskArgs) (string, error) {
			return "", deferred.CallDeferred(nil)
		})
	if err != nil {
		log.Fatal(err)
	}
	a, err := agent.New(agent.Config{
		Model:    model,
		Tools:    append(fileTools(false), sendToWorker),
		Handlers: []agent.Handler{agent.HandlerFunc(handleDeferred)},
	})
	if err != nil {
		log.Fatal(err)
	}
	return a
}

// An inline handler resolves the deferred calls and the run goes on without
// pausing (the seed article's third example).
func Example_handler() {
	model := agent.NewScriptModel("", []agent.ScriptResponse{
		{Calls: []agent.ScriptCall{
			{Tool: "update_file", ID: "update_file_readme", Args: json.RawMessage(`{"path":"README.md","content":"Hello, world!"}`)},
			{Tool: "delete_file", ID: "delete_file", Args: json.RawMessage(`{"path":"__init__.py"}`)},
			{Tool: "update_file", ID: "update_file_dotenv", Args: json.RawMessage(`{"path":".env","content":""}`)},
			{Tool: "send_to_worker", ID: "send_to_worker_1", Args: json.RawMessage(`{"task":"report"}`)},
		}},
		{Text: "README.md is updated, .env is cleared and the worker answered; deleting __init__.py was not allowed."},
	})
	res, err := handlerAgent(model).Run(context.Background(), agent.RunInput{
		Prompt: "Write `Hello, world!` to `README.md`, delete `__init__.py`, clear `.env`, and send the report task to the worker",
	})
	if err != nil {
		log.Fatal(err)
	}
	for _, p := range res.NewMessages[2].Parts {
		fmt.Printf("%s: %s %s\n", p.ToolCallID, p.Outcome, p.Value)
	}
	fmt.Println(res.Output)
	// Output:
	// update_file_readme: success "File 'README.md' updated: 'Hello, world!'"
	// delete_file: denied "Deleting files is not allowed"
	// update_file_dotenv: success "File '.env' updated: ''"
	// send_to_worker_1: success "(external result for send_to_worker)"
	// README.md is updated, .env is cleared and the worker answered; deleting __init__.py was not allowed.
}

// The event stream shows a batch before the handler answers it, and what
// the handler resolved (the seed article's event example).
func ExampleAgent_Events() {
	model := agent.NewScriptModel("", []agent.ScriptResponse{
		{Calls: []agent.ScriptCall{
			{Tool: "delete_file", ID: "delete_file", Args: json.RawMessage(`{"path":"__init__.py"}`)},
			{Tool: "update_file", ID: "update_file_readme", Args: json.RawMessage(`{"path":"README.md","content":"Hello, world!"}`)},
			{Tool: "update_file", ID: "update_file_dotenv", Args: json.RawMessage(`{"path":".env","content":""}`)},
		}},
		{Text: "Done; deleting __init__.py was not allowed."},
	})
	var batch *deferred.Requests
	for ev, err := range handlerAgent(model).Events(context.Background(), agent.RunInput{
		Prompt: "Delete `__init__.py`, write `Hello, world!` to `README.md`, and clear `.env`",
	}) {
		if err != nil {
			log.Fatal(err)
		}
		switch ev.Kind {
		case agent.EventDeferredRequests:
			batch = ev.Requests
			var names []string
			for _, c := range ev.Requests.Approvals {
				names = append(names, c.ToolName)
			}
			fmt.Printf("Approvals needed: %v\n", names)
		case agent.EventDeferredResults:
			var ids []string
			for _, c := range batch.Approvals {
				if _, ok := ev.Results.Approvals[c.ToolCallID]; ok {
					ids = append(ids, c.ToolCallID)
				}
			}
			fmt.Printf("Resolved: %v\n", ids)
		case agent.EventRunDone:
			fmt.Println(ev.Result.Output)
		}
	}
	// Output:
	// Approvals needed: [delete_file update_file]
	// Resolved: [delete_file update_file_dotenv]
	// Done; deleting __init__.py was not allowed.
}
