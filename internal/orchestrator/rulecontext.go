package orchestrator

import (
	"github.com/toolgate/toolgate/internal/agent"
)

// ruleContext is what a tool's approval rule sees of run rc besides the
// call (RuleContext): read from the run's history, which holds every
// earlier run of the conversation.
func ruleContext(rc *agent.RunContext, convAgent string, tc *ToolConfig) RuleContext {
	out := RuleContext{Caller: rc.Caller, Metadata: tc.ApprovalMetadata, ConversationID: rc.ConversationID, Agent: convAgent}
	runs := map[string]bool{rc.RunID: true}
	index := map[string]int{}
	for _, m := range rc.Messages {
		if m.RunID != "" {
			runs[m.RunID] = true
		}
		for _, p := range m.Parts {
			switch p.Kind {
			case agent.PartToolCall:
				index[p.ToolCallID] = len(out.Calls)
				out.Calls = append(out.Calls, RuleCall{Tool: p.ToolName})
			case agent.PartToolReturn, agent.PartRetryPrompt:
				i, ok := index[p.ToolCallID]
				if !ok {
					continue
				}
				if p.Kind == agent.PartRetryPrompt {
					out.Calls[i].Outcome = "retry"
				} else {
					out.Calls[i].Outcome = string(p.Outcome)
					if out.Calls[i].Outcome == "" {
						out.Calls[i].Outcome = string(agent.OutcomeSuccess)
					}
				}
			}
		}
	}
	out.Runs = len(runs)
	return out
}
