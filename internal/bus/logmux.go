package bus

import (
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go"
)

// logMux takes the answers to this connection's batched direct gets
// (ReadLog) on one subscription, a wildcard under an inbox of its own, and
// hands each to the read waiting for it by the last token of its subject.
// A subscription per read, made and removed around each request, made the
// reads of conversations not cached (a resume past the state cache's size)
// 25 to 30 times slower than the direct gets themselves: each SUB and
// UNSUB changes the server's subscription list, whose match cache every
// publish of every client then misses (4,000 logs read 64 at a time: 760
// a second with a subscription each, 21,000 with the client's shared
// request inbox).
type logMux struct {
	once   sync.Once
	err    error
	prefix string
	sub    *nats.Subscription
	next   atomic.Uint64

	mu    sync.Mutex
	reads map[string]chan *nats.Msg
}

// open subscribes once; later calls return the first's error.
func (m *logMux) open(nc *nats.Conn) error {
	m.once.Do(func() {
		m.prefix = nc.NewInbox() + "."
		m.reads = map[string]chan *nats.Msg{}
		sub, err := nc.Subscribe(m.prefix+"*", m.deliver)
		m.mu.Lock()
		m.sub, m.err = sub, err
		m.mu.Unlock()
	})
	return m.err
}

// deliver hands msg to its read. A read gone (ended, timed out) leaves
// its late answers to be dropped; a read's channel holds a whole batch and
// its end marker, so a send never waits.
func (m *logMux) deliver(msg *nats.Msg) {
	token := msg.Subject[len(m.prefix):]
	m.mu.Lock()
	ch := m.reads[token]
	m.mu.Unlock()
	if ch == nil {
		return
	}
	select {
	case ch <- msg:
	default:
	}
}

// read registers a read: the inbox its request names, the channel its
// answers come on, and the function that ends it.
func (m *logMux) read(size int) (string, chan *nats.Msg, func()) {
	token := strconv.FormatUint(m.next.Add(1), 36)
	ch := make(chan *nats.Msg, size)
	m.mu.Lock()
	m.reads[token] = ch
	m.mu.Unlock()
	return m.prefix + token, ch, func() {
		m.mu.Lock()
		delete(m.reads, token)
		m.mu.Unlock()
	}
}

// close removes the subscription, if any.
func (m *logMux) close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.sub != nil {
		_ = m.sub.Unsubscribe()
	}
}
