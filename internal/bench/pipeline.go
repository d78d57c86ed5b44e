package bench

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// pipeline publishes asynchronously with a bounded number of acks
// outstanding: publish blocks while depth acks are awaited, which keeps
// PublishAsync under its stall limit however many messages go out.
type pipeline struct {
	js      jetstream.JetStream
	pending chan future
	done    chan struct{}
	bg      failure
}

type future struct {
	f   jetstream.PubAckFuture
	tag int
}

// newPipeline starts the ack collector; onAck (may be nil) runs in it for
// every successful publish, in publish order.
func newPipeline(ctx context.Context, js jetstream.JetStream, depth int, onAck func(tag int, ack *jetstream.PubAck)) *pipeline {
	p := &pipeline{js: js, pending: make(chan future, depth), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for pf := range p.pending {
			select {
			case ack := <-pf.f.Ok():
				if onAck != nil {
					onAck(pf.tag, ack)
				}
			case err := <-pf.f.Err():
				p.bg.set(fmt.Errorf("publish %s: %w", pf.f.Msg().Subject, err))
			case <-ctx.Done():
				p.bg.set(ctx.Err())
			}
		}
	}()
	return p
}

// publish sends msg; tag is handed back to onAck.
func (p *pipeline) publish(ctx context.Context, msg *nats.Msg, tag int, opts ...jetstream.PublishOpt) error {
	if err := p.bg.get(); err != nil {
		return err
	}
	f, err := p.js.PublishMsgAsync(msg, opts...)
	if err != nil {
		return fmt.Errorf("publish %s: %w", msg.Subject, err)
	}
	select {
	case p.pending <- future{f, tag}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// wait ends the pipeline: it returns once every ack has arrived, with the
// first error.
func (p *pipeline) wait() error {
	close(p.pending)
	<-p.done
	return p.bg.get()
}
