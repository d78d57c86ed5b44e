// Package bench is toolgate's performance harness: it measures the deferred
// call round trip through toolgate side by side with what JetStream itself
// does for the same traffic, on one embedded server with file storage.
//
// A Case fixes the number of tool-workers, the batch size (deferred calls
// per paused run) and the in-flight window (calls outstanding at once, so
// Window/Batch conversations run concurrently). Each Target runs a case and
// returns a Measurement:
//
//   - RawTarget: the JetStream baseline. Conversations publish their batch
//     to a work-queue stream with PublishAsync; N workers pull one call at a
//     time (Consume with PullMaxMessages(1)), publish a CallReply to a
//     limits stream and ack; one consumer collects the replies. Messages
//     are real msgpack-encoded CallRequest/CallReply with toolgate's
//     headers and de-duplication ids.
//   - FloorTarget: core NATS request-reply with the same messages, the
//     lower bound of any broker round trip.
//   - ToolgateTarget: conversations through the orchestrator's Go API with
//     the offline script model, real tool-workers serving the built-in
//     noop tool, each conversation pausing on a batch of calls until its
//     follow-up run starts.
//
// The memory case holds many paused conversations at once (MemoryTarget);
// the codec case compares msgpack with JSON for every wire message. Run
// writes everything into Results, which are saved as results.json,
// results.md and plot.png and compared with the previous results.json.
package bench
