package bus

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/toolgate/toolgate/wire"
)

// FromConn wraps a connection the caller opened (and closes): the public
// SDK takes a *nats.Conn so that its users keep their own options, auth and
// reconnect policy. cfg.URL, User, Password, CredsFile and Role are
// ignored (they are the connection's); a permission violation reported on
// nc still fails the request it concerns at once, and nc's own error
// handler is still called. Close on the result leaves nc open.
func FromConn(nc *nats.Conn, cfg ConnConfig) (*Bus, error) {
	if nc == nil {
		return nil, errors.New("connection is nil")
	}
	cfg = cfg.withDefaults()
	if _, err := wire.NormalizeContentType(cfg.ContentType); err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	logger := cfg.Logger.With(slog.String("component", "bus"), slog.String("client", cfg.Name))
	deny := watchConn(nc)
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("connect %s: jetstream: %w", cfg.Name, err)
	}
	return &Bus{nc: nc, js: js, logger: logger, cfg: cfg, deny: deny, borrowed: true}, nil
}

// borrowedConns holds the deny watch of each connection FromConn wrapped:
// the handler is installed once per connection, however many buses share
// it.
var borrowedConns = struct {
	sync.Mutex
	watch map[*nats.Conn]*denyWatch
}{watch: map[*nats.Conn]*denyWatch{}}

func watchConn(nc *nats.Conn) *denyWatch {
	borrowedConns.Lock()
	defer borrowedConns.Unlock()
	if w, ok := borrowedConns.watch[nc]; ok {
		return w
	}
	w := &denyWatch{}
	prev := nc.Opts.AsyncErrorCB
	nc.SetErrorHandler(func(c *nats.Conn, sub *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrPermissionViolation) {
			w.violation(err)
		}
		if prev != nil {
			prev(c, sub, err)
		}
	})
	borrowedConns.watch[nc] = w
	// Forget it once the connection is closed for good.
	nc.SetClosedHandler(chainClosed(nc.Opts.ClosedCB, func() {
		borrowedConns.Lock()
		delete(borrowedConns.watch, nc)
		borrowedConns.Unlock()
	}))
	return w
}

func chainClosed(prev nats.ConnHandler, f func()) nats.ConnHandler {
	return func(c *nats.Conn) {
		f()
		if prev != nil {
			prev(c)
		}
	}
}
