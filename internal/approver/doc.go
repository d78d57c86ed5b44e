// Package approver is toolgate's approval bot. It reads approval requests
// on its own durable consumer of TOOLGATE_APPROVALS (every approver sees
// every request), decides them with a Policy of CEL rules, asks a human
// through an Asker (the terminal Prompt) about what the policy escalates,
// and publishes decisions on toolgate.reply.<run>.approval, signed with
// ed25519 when it has a key.
//
// Escalating means not answering: the request stays pending at the
// orchestrator for another approver, and the first valid decision wins
// there. Errors only ever make the bot more cautious: a rule whose
// expression fails does not match, an unusable request is dead-lettered,
// a request past its deadline is skipped.
//
// Sign and Verify use wire.Decision.SigningBytes, so the orchestrator and
// approvers in other languages check signatures over the same bytes.
package approver
