// Package seam lets the module's own code run the public worker engine on
// a bus it configured (its logger, content type and counters), which the
// public constructor, taking a *nats.Conn, does not offer.
package seam

import "github.com/toolgate/toolgate/internal/bus"

// OnBus is set by package worker: it returns a *worker.Worker for a
// worker.Config (cfg) on b, which the worker does not close. It is typed
// with any because package worker imports this one.
var OnBus func(b *bus.Bus, cfg any) (any, error)
