// Package mail is a tool that needs approval: the agent's config marks
// send_mail "approval: always", so a call reaches this worker only once an
// approver has let it through, perhaps with other args.
package mail

import (
	"context"
	"sync"

	"github.com/toolgate/toolgate/worker"
)

// Args are what the model passes.
type Args struct {
	To      string `json:"to"`
	Subject string `json:"subject"`
}

// Outbox records what was sent, in order; a real tool would call a mail
// service.
type Outbox struct {
	mu   sync.Mutex
	sent []Args
}

// Sent lists the mails sent so far.
func (o *Outbox) Sent() []Args {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]Args(nil), o.sent...)
}

// Register adds the send_mail tool to w, sending into o.
func (o *Outbox) Register(w *worker.Worker) error {
	return worker.Register(w, "send_mail", "Send an email.", func(_ context.Context, _ worker.Call, a Args) (string, error) {
		o.mu.Lock()
		o.sent = append(o.sent, a)
		o.mu.Unlock()
		return "sent to " + a.To, nil
	})
}
