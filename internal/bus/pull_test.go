package bus_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
)

// A loop that pulls one call at a time asks the server for a heartbeat a
// second, so that a pull nats.go failed to send again is noticed within
// two seconds instead of two halves of the pull's expiry (10 s for calls);
// loops that prefetch keep nats.go's default.
func TestSingleMessagePullsHeartbeatEverySecond(t *testing.T) {
	t.Parallel()
	b := bustest.NewBus(t)
	pulls := make(chan []byte, 16)
	sub, err := b.Conn().Subscribe("$JS.API.CONSUMER.MSG.NEXT."+bus.StreamCalls+".>", func(m *nats.Msg) {
		select {
		case pulls <- m.Data:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	consumeCalls(t, b, "weather", bus.ConsumeConfig{}, func(context.Context, *bus.Delivery[bus.CallRequest]) error { return nil })
	var req struct {
		Batch     int           `json:"batch"`
		Expires   time.Duration `json:"expires"`
		Heartbeat time.Duration `json:"idle_heartbeat"`
	}
	if err := json.Unmarshal(bustest.Recv(t, pulls, "the call consumer's pull request"), &req); err != nil {
		t.Fatal(err)
	}
	if req.Batch != 1 || req.Expires != 10*time.Second || req.Heartbeat != time.Second {
		t.Errorf("pull request: batch %d, expires %v, idle heartbeat %v; want 1, 10s, 1s", req.Batch, req.Expires, req.Heartbeat)
	}
}
