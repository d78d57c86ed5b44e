// Package deferred is the vocabulary of deferred tool calls: the batch a
// paused run ends with (Requests), the answers that resume it (Results), the
// decisions and results those answers hold, and the control-flow errors a tool
// returns to defer itself. It does no I/O; it imports only the standard
// library and codec support, so every other package can depend on it.
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
