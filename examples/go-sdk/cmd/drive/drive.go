package main

import (
	"context"
	"fmt"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/wire"
)

// Drive starts a conversation with prompt, reports each event of it
// through show while it runs, and returns it once it has ended.
func Drive(ctx context.Context, c *client.Client, prompt string, show func(string)) (*client.Conversation, error) {
	run, err := c.Start(ctx, client.StartRequest{Prompt: prompt})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for ev, err := range c.Events(ctx, run.ConversationID, "") {
		if err != nil {
			return nil, err
		}
		switch ev.Type {
		case wire.EventRunPaused:
			show("paused: waiting for workers and approvers")
		case wire.EventReplyApplied:
			show(fmt.Sprintf("reply to %s: %s", ev.ToolCallID, ev.Data))
		case wire.EventRunCompleted, wire.EventRunFailed:
			return c.Wait(ctx, run.ConversationID)
		}
	}
	return nil, fmt.Errorf("the event stream of %s ended: %w", run.ConversationID, ctx.Err())
}
