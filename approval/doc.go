// Package approval runs approval bots from Go: a Decider answers each
// approval request — approve, approve with other args, deny with a message
// the model is told, or escalate (leave it to other approvers or a human) —
// and the bot publishes the answer as a decision, signed with its ed25519
// key so that an orchestrator that trusts the key accepts it.
//
//	bot, _ := approval.New(nc, approval.Config{ID: "bot", Key: key},
//		approval.DeciderFunc(func(ctx context.Context, req approval.Request) (approval.Verdict, error) {
//			if req.ToolName == "delete_file" {
//				return approval.Deny("deleting is not allowed"), nil
//			}
//			return approval.Approve(), nil
//		}))
//	err := bot.Run(ctx)
//
// Every bot sees every request (each has its own durable consumer), and
// the orchestrator takes the first valid decision. Requests past their
// deadline are skipped, and so are those the orchestrator says are no
// longer pending (decided, expired, cancelled, their conversation
// deleted); a decision the orchestrator refuses is reported (Handled's
// "refused", Refused's reason); a request handled once is not decided again when
// redelivered. A Decider's error hands the request back to be delivered
// again; a policy (LoadPolicy, the approver binary's CEL rules) is one
// Decider among others.
//
// It wraps the approver binary's engine (internal/approver), so the bot
// and the binary follow the same delivery and signing rules, and does not
// link nats-server.
package approval
