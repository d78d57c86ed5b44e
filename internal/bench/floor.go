package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/toolgate/toolgate/wire"
)

const floorSubject = "bench.rr." + sampleTool

// FloorTarget is core NATS request-reply with the same messages and shape
// as RawTarget: Case.Workers responders in one queue group, each on its own
// connection, and batches of concurrent requests. Nothing is stored, so it
// is the floor under any JetStream round trip.
type FloorTarget struct {
	env *Env
	seq atomic.Int64
}

// NewFloorTarget returns the core NATS floor on env.
func NewFloorTarget(env *Env) *FloorTarget { return &FloorTarget{env: env} }

// Name is "core_nats".
func (t *FloorTarget) Name() string { return "core_nats" }

// respond answers a call request as a worker named name would, at once.
func respond(name string, bg *failure) nats.MsgHandler {
	return func(msg *nats.Msg) {
		var req wire.CallRequest
		if err := wire.Decode(msg.Data, msg.Header.Get(hdrContentType), &req); err != nil {
			bg.set(fmt.Errorf("responder %s: decode call: %w", name, err))
			return
		}
		data, err := wire.Encode(replyFor(req, name), wire.ContentTypeMsgpack)
		if err != nil {
			bg.set(fmt.Errorf("responder %s: encode reply: %w", name, err))
			return
		}
		out := &nats.Msg{Data: data, Header: nats.Header{}}
		out.Header.Set(hdrContentType, wire.ContentTypeMsgpack)
		if err := msg.RespondMsg(out); err != nil {
			bg.set(fmt.Errorf("responder %s: respond: %w", name, err))
		}
	}
}

// Run measures one case.
func (t *FloorTarget) Run(ctx context.Context, c Case) (Measurement, error) {
	if err := c.validate(); err != nil {
		return Measurement{}, fmt.Errorf("core nats: %w", err)
	}
	prefix := "f" + strconv.FormatInt(t.seq.Add(1), 10)
	orch, err := t.env.Connect(ctx, "bench-requester")
	if err != nil {
		return Measurement{}, err
	}
	defer orch.Close()
	nc := orch.Conn()

	var bg failure
	for w := range c.Workers {
		name := fmt.Sprintf("bench-responder-%d", w)
		b, err := t.env.Connect(ctx, name)
		if err != nil {
			return Measurement{}, err
		}
		defer b.Close()
		sub, err := b.Conn().QueueSubscribe(floorSubject, "workers", respond(name, &bg))
		if err != nil {
			return Measurement{}, fmt.Errorf("core nats: subscribe: %w", err)
		}
		defer sub.Drain()
		if err := b.Conn().FlushTimeout(10 * time.Second); err != nil {
			return Measurement{}, fmt.Errorf("core nats: flush: %w", err)
		}
	}

	send := func(ctx context.Context, b *batch) error {
		for i, id := range b.calls {
			b.sent[i] = time.Now()
			data, err := wire.Encode(sampleCallRequest(b.run, b.conversation, id), wire.ContentTypeMsgpack)
			if err != nil {
				return err
			}
			msg := &nats.Msg{Subject: floorSubject, Data: data, Header: nats.Header{}}
			msg.Header.Set(hdrContentType, wire.ContentTypeMsgpack)
			msg.Header.Set(hdrRun, b.run)
			msg.Header.Set(hdrCall, id)
			go func() {
				rctx, cancel := context.WithTimeout(ctx, batchTimeout)
				defer cancel()
				resp, err := nc.RequestMsgWithContext(rctx, msg)
				if err != nil {
					bg.set(fmt.Errorf("request %s: %w", id, err))
					return
				}
				at := time.Now()
				var rep wire.CallReply
				if err := wire.Decode(resp.Data, resp.Header.Get(hdrContentType), &rep); err != nil {
					bg.set(fmt.Errorf("decode reply %s: %w", id, err))
					return
				}
				b.arrive(i, at)
			}()
		}
		return nil
	}
	m, err := warmAndMeasure(ctx, c, prefix, send, nil, &bg)
	if err != nil {
		return Measurement{}, fmt.Errorf("core nats %s: %w", c.Name(), err)
	}
	return m, nil
}
