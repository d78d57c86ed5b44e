package orchestrator

import "context"

// KeyedID lets tests name the ids an idempotency key gives.
var KeyedID = keyedID

// Reconcile runs one reconcile pass.
func (o *Orchestrator) Reconcile(ctx context.Context) error { return o.reconcile(ctx) }
