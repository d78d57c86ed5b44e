package bus

import (
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/wire"
)

// Notices (wire.PrefixCancel, wire.PrefixNudge) are core NATS messages.
const (
	subjectCancel = wire.PrefixCancel
	subjectNudge  = wire.PrefixNudge
	AllCancels    = wire.AllCancels
)

// PublishCancel announces that run runID's conversation was cancelled.
func (b *Bus) PublishCancel(runID string) error {
	subj, err := wire.CancelSubject(runID)
	if err != nil {
		return err
	}
	if err := b.nc.Publish(subj, nil); err != nil {
		return fmt.Errorf("publish %s: %w", subj, err)
	}
	return nil
}

// SubscribeCancels calls fn with the run id of every cancel notice until the
// subscription is unsubscribed. fn runs on the subscription's goroutine and
// must not block.
func (b *Bus) SubscribeCancels(fn func(runID string)) (*nats.Subscription, error) {
	sub, err := b.nc.Subscribe(AllCancels, func(m *nats.Msg) {
		fn(strings.TrimPrefix(m.Subject, subjectCancel+"."))
	})
	if err != nil {
		return nil, fmt.Errorf("subscribe %s: %w", AllCancels, err)
	}
	return sub, nil
}

// PublishNudge asks the replicas that run agent to look at conversation
// convID now.
func (b *Bus) PublishNudge(agent, convID string) error {
	subj, err := wire.NudgeSubject(agent)
	if err != nil {
		return err
	}
	if err := b.nc.Publish(subj, []byte(convID)); err != nil {
		return fmt.Errorf("publish %s: %w", subj, err)
	}
	return nil
}

// SubscribeNudges calls fn with the conversation id of every nudge for
// agent; fn runs on the subscription's goroutine and must not block.
func (b *Bus) SubscribeNudges(agent string, fn func(convID string)) (*nats.Subscription, error) {
	subj, err := wire.NudgeSubject(agent)
	if err != nil {
		return nil, err
	}
	sub, err := b.nc.Subscribe(subj, func(m *nats.Msg) { fn(string(m.Data)) })
	if err != nil {
		return nil, fmt.Errorf("subscribe %s: %w", subj, err)
	}
	return sub, nil
}
