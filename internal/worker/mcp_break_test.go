package worker_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/worker"
	"github.com/toolgate/toolgate/wire"
)

// Environment of the test binary run as a misbehaving MCP server (see
// TestMain): how it breaks its session, and the file where it notes each
// call it runs (its side effect).
const (
	badMCPEnv   = "WORKER_TEST_BAD_MCP"
	badMCPMarks = "WORKER_TEST_BAD_MCP_MARKS"
)

// serveBadMCP is a stdio MCP server with two tools: "slow" notes its call
// and never answers; "breaker" notes its call and then answers with a frame
// the client cannot take, as the mode says: "malformed" (not JSON) or
// "huge" (over the client's 16 MiB frame limit).
func serveBadMCP(mode, marks string) {
	in := bufio.NewReader(os.Stdin)
	out := bufio.NewWriter(os.Stdout)
	send := func(v any) {
		b, _ := json.Marshal(v)
		out.Write(append(b, '\n'))
		out.Flush()
	}
	mark := func(tool string) {
		f, err := os.OpenFile(marks, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			os.Exit(2)
		}
		fmt.Fprintln(f, tool)
		f.Close()
	}
	for {
		line, err := in.ReadBytes('\n')
		if err != nil {
			return
		}
		var req struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				ProtocolVersion string `json:"protocolVersion"`
				Name            string `json:"name"`
			} `json:"params"`
		}
		if json.Unmarshal(line, &req) != nil || req.ID == nil {
			continue // notifications
		}
		reply := func(result any) { send(map[string]any{"jsonrpc": "2.0", "id": req.ID, "result": result}) }
		switch req.Method {
		case "initialize":
			reply(map[string]any{"protocolVersion": req.Params.ProtocolVersion, "capabilities": map[string]any{"tools": map[string]any{}},
				"serverInfo": map[string]any{"name": "bad", "version": "1"}})
		case "tools/list":
			schema := map[string]any{"type": "object"}
			reply(map[string]any{"tools": []any{
				map[string]any{"name": "slow", "inputSchema": schema},
				map[string]any{"name": "breaker", "inputSchema": schema},
			}})
		case "tools/call":
			mark(req.Params.Name)
			if req.Params.Name != "breaker" {
				continue
			}
			switch mode {
			case "huge":
				reply(map[string]any{"content": []any{map[string]any{"type": "text", "text": strings.Repeat("x", 17<<20)}}})
			default:
				out.WriteString(`{"jsonrpc":"2.0","id":` + string(req.ID) + `,"result":{oops}}` + "\n")
				out.Flush()
			}
		default:
			reply(map[string]any{})
		}
	}
}

// An MCP server that breaks its session (a malformed frame, an answer over
// the frame limit) while another call is in flight fails both calls with
// the reason, and neither is run again: the server may have done their
// work.
func TestMCPBrokenSessionFailsItsCallsWithoutRunningThemAgain(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"malformed", "huge"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			exe, err := os.Executable()
			if err != nil {
				t.Fatal(err)
			}
			marks := t.TempDir() + "/marks"
			ctx := bustest.Context(t)
			srv, err := worker.NewMCPServer(ctx, worker.MCPConfig{Name: "bad", Command: []string{exe},
				Env: []string{badMCPEnv + "=" + mode, badMCPMarks + "=" + marks}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = srv.Close() })
			e := newEnv(t)
			w := newWorker(t, worker.Config{Bus: e.bus, Tools: srv.Tools(), ID: "w1",
				BackOff: []time.Duration{10 * time.Millisecond}})
			srv.Bind(w)
			run(t, w)
			got := e.replies(t)
			ran := func(tool string) int {
				b, _ := os.ReadFile(marks)
				return strings.Count(string(b), tool+"\n")
			}

			e.publish(t, call("slow", "c1", `{}`))
			bustest.WaitFor(t, "the slow call running", func() bool { return ran("slow") == 1 })
			e.publish(t, call("breaker", "c2", `{}`))
			replies := got.wait(t, 2)
			for _, r := range replies {
				if r.Outcome != wire.OutcomeFailed || !strings.Contains(r.Message, "MCP server bad") || !strings.Contains(r.Message, "not run again") {
					t.Errorf("reply %s = %+v, want failed with the broken session's reason", r.ToolCallID, r)
				}
			}
			// Both calls are acked: nothing is left to deliver again.
			for _, tool := range []string{"slow", "breaker"} {
				name, _ := wire.CallConsumerName(tool)
				bustest.WaitFor(t, "call_"+tool+" settled", func() bool {
					c, err := e.bus.JetStream().Consumer(ctx, wire.StreamCalls, name)
					if err != nil {
						return false
					}
					info, err := c.Info(ctx)
					return err == nil && info.NumAckPending == 0 && info.NumPending == 0 && info.NumRedelivered == 0
				})
			}
			if s, b := ran("slow"), ran("breaker"); s != 1 || b != 1 {
				t.Errorf("calls run: slow %d, breaker %d; want each once", s, b)
			}
			if n := len(got.wait(t, 2)); n != 2 {
				t.Errorf("%d replies, want 2", n)
			}
		})
	}
}
