package orchestrator

// KeyedID lets tests name the ids an idempotency key gives.
var KeyedID = keyedID
