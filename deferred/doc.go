// Package deferred is the vocabulary of deferred tool calls: the batch a
// paused run ends with (Requests), the answers that resume it (Results), the
// decisions and results those answers hold, and the control-flow errors a tool
// returns to defer itself. It does no I/O; it imports only the standard
// library and msgpack, so every other package, a program's included, can
// depend on it.
//
// A Go tool defers its call by returning CallDeferred(meta) (an external
// result will answer it) or ApprovalRequired(meta) (an approver must decide);
// meta travels with the batch as Requests.Metadata, keyed by tool_call_id.
// Whoever answers (an inline handler, a worker, a client resuming the run)
// builds each answer with a constructor:
//
//	external calls: ValueOf(v), ReturnOf(v, content, meta), AskRetry(msg), Fail(msg)
//	approvals:      Approve(nil), Approve(editedArgs), Deny(msg)
//
// Dynamic values (tool args, metadata, result values) are kept as raw JSON
// text (json.RawMessage) everywhere: msgpack would otherwise turn numbers into
// int8/uint16/float32 and break equality after a round trip.
//
// The rules over a batch live here too: Requests.BuildResults assembles
// answers (D32), Requests.Remaining says what is still open (D33),
// Requests.Check validates answers before a resume (D19, D20), and ArgsDigest
// binds a decision to the args it was made for (D36). Requests and Results
// encode to Pydantic AI's JSON shapes and to an explicit msgpack form (D34).
package deferred
