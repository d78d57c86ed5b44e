package bus_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/wire"
)

// A subscription whose context ends stops fetching before it cancels its
// handlers, and what reaches it afterwards is handed back: a call a
// cancelled handler hands back goes at once to the next consumer of the
// durable. Stopped the other way round, the server could send the
// redelivery to a pull of the stopped subscription it still held, and the
// client dropped it: the call waited for AckWait (an hour here). Several
// rounds, since which way the race went varied.
func TestStoppedByItsContextHandsBackAtOnce(t *testing.T) {
	t.Parallel()
	b := bustest.NewBus(t)
	cfg := bus.ConsumeConfig{AckWait: time.Hour, MaxDeliver: -1, Concurrency: 4}
	for i := range 20 {
		id := fmt.Sprintf("c%d", i)
		ctx, cancel := context.WithCancel(ctxT(t))
		started := make(chan struct{}, 1)
		_, err := b.ConsumeCalls(ctx, "weather", cfg, bus.HandlerFunc[wire.CallRequest](
			func(hctx context.Context, d *bus.Delivery[wire.CallRequest]) error {
				select {
				case started <- struct{}{}:
				default:
				}
				<-hctx.Done() // as a worker's call interrupted by its shutdown
				return d.NakWithDelay(0)
			}))
		if err != nil {
			t.Fatal(err)
		}
		publishCall(t, b, bustest.SampleCall("run1", id))
		bustest.Recv(t, started, "the call taken")
		cancel()

		next := make(chan string, 8)
		s := consumeCalls(t, b, "weather", cfg, func(_ context.Context, d *bus.Delivery[wire.CallRequest]) error {
			next <- d.Msg.ToolCallID
			return d.Ack()
		})
		if got := bustest.Recv(t, next, "the call handed back"); got != id {
			t.Errorf("round %d: got %s, want %s", i, got, id)
		}
		ctx, cancelStop := context.WithTimeout(context.Background(), wait)
		if err := s.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		cancelStop()
	}
}
