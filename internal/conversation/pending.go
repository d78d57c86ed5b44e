package conversation

import "github.com/toolgate/toolgate/wire"

// PendingCalls lists the calls of the conversation's batch still waiting
// for their reply, in the batch's order.
func (c *State) PendingCalls() []wire.PendingCall {
	out := []wire.PendingCall{}
	if c.Batch == nil {
		return out
	}
	for _, pc := range c.Batch.Calls {
		if pc.Reply != nil {
			continue
		}
		out = append(out, c.PendingCallOf(pc))
	}
	return out
}

// PendingCallOf is pc, a call of c's batch, as events and approvers see it.
func (c *State) PendingCallOf(pc *PendingCall) wire.PendingCall {
	return wire.PendingCall{
		ConversationID: c.ID,
		RunID:          c.Batch.RunID,
		ToolCallID:     pc.ToolCallID,
		ToolName:       pc.ToolName,
		Kind:           string(pc.Kind),
		Args:           pc.Args,
		Metadata:       pc.Metadata,
		Deadline:       pc.Deadline.UTC(),
	}
}
