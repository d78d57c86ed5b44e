// Package deferred is the vocabulary of deferred tool calls: the batch a
// paused run ends with (Requests), the answers that resume it (Results), the
// decisions and results those answers hold, and the control-flow errors a tool
// returns to defer itself. It does no I/O; it imports only the standard
// library and codec support, so every other package can depend on it.
//
// Dynamic values (tool args, metadata, result values) are kept as raw JSON
// text (json.RawMessage) everywhere: msgpack would otherwise turn numbers into
// int8/uint16/float32 and break equality after a round trip.
package deferred
