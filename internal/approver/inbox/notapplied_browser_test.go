package inbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/internal/approver"
	"github.com/toolgate/toolgate/internal/approver/inbox"
	"github.com/toolgate/toolgate/internal/browsertest"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/wire"
)

// statusDesk answers approval status requests (toolgate.status.approvals)
// as an orchestrator would, from states the test sets: pending unless set.
// It never publishes a decision's outcome, as when the replica that read
// the decision handed it over: the inbox learns what became of it only by
// asking.
type statusDesk struct {
	mu     sync.Mutex
	states map[string]wire.ApprovalStatus
}

func newStatusDesk(t *testing.T, b *bus.Bus) *statusDesk {
	t.Helper()
	s := &statusDesk{states: map[string]wire.ApprovalStatus{}}
	sub, err := b.Conn().Subscribe(wire.SubjectApprovalStatus, func(m *nats.Msg) {
		var q wire.ApprovalStatusRequest
		if err := json.Unmarshal(m.Data, &q); err != nil {
			return
		}
		rep := wire.ApprovalStatusReply{Calls: []wire.ApprovalStatus{}}
		s.mu.Lock()
		for _, c := range q.Calls {
			st, ok := s.states[c.RunID+"/"+c.ToolCallID]
			if !ok {
				st = wire.ApprovalStatus{State: wire.StatePending}
			}
			st.RunID, st.ToolCallID = c.RunID, c.ToolCallID
			rep.Calls = append(rep.Calls, st)
		}
		s.mu.Unlock()
		data, _ := json.Marshal(rep)
		_ = m.Respond(data)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := b.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	return s
}

func (s *statusDesk) set(key, state, by string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.states[key] = wire.ApprovalStatus{State: state, By: by}
}

// In headless Chromium: decisions whose outcome does not come leave their
// cards as sent, and the inbox then asks the call's status: one whose call
// still waits long after (the decision was handed over until it was
// dead-lettered) comes back with a note that it was not applied and is
// decided again; one another approver's decision beat is reported as not
// applied; one applied leaves quietly. Before, each stayed "sent".
func TestBrowserInboxDecisionNotApplied(t *testing.T) {
	b := bustest.NewBus(t)
	desk := newStatusDesk(t, b)
	in, _ := startInbox(t, inbox.Config{Bus: b, Key: newKey(t), OutcomeTimeout: 300 * time.Millisecond,
		PollInterval: 200 * time.Millisecond, NotAppliedAfter: 2 * time.Second})
	srv := httptest.NewServer(in.Handler())
	t.Cleanup(srv.Close)

	dl := time.Now().Add(10 * time.Minute)
	lost := request(t, "run-1", "call-1", `{"path":"a.txt"}`, dl)
	beaten := request(t, "run-2", "call-2", `{"path":"b.txt"}`, dl)
	applied := request(t, "run-3", "call-3", `{"path":"c.txt"}`, dl)
	publish(t, b, lost, beaten, applied)
	waitPending(t, in, "run-1/call-1", "run-2/call-2", "run-3/call-3")

	br := browsertest.Start(t, 60*time.Second)
	run, shot := br.Run, br.Shot
	card := func(key string) string { return `article.card[data-key="` + key + `"]` }
	flashHas := func(s string) chromedp.Action[chromedp.Void] {
		return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := chromedp.Poll[chromedp.Void](`document.querySelector('#flash').textContent.includes(`+strconv.Quote(s)+`)`,
				chromedp.WithPollingTimeout(20*time.Second))(ctx, tg)
			return err
		})
	}
	text := func(sel string) string {
		t.Helper()
		v, err := chromedp.Run(br.Ctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return v
	}

	run("approve one whose outcome does not come",
		chromedp.Navigate(srv.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS(`#live[data-state="live"]`)),
		chromedp.WaitVisible(chromedp.CSS(card("run-1/call-1"))),
		chromedp.Click(chromedp.CSS(card("run-1/call-1")+` button[data-action="approve"]`)),
		chromedp.WaitNotPresent(chromedp.CSS(card("run-1/call-1"))),
		flashHas("sent, not applied yet"),
	)
	if d := bustest.LastDecision(t, b, "run-1"); d == nil || !d.Approved {
		t.Fatalf("decision on the bus %+v", d)
	}
	run("it comes back, not applied, and is decided again",
		chromedp.WaitVisible(chromedp.CSS(card("run-1/call-1")+` p.note`)),
		shot("notapplied-01-back"),
	)
	if n := text(card("run-1/call-1") + ` p.note`); !strings.Contains(n, "Your approval sent at") || !strings.Contains(n, "was not applied") {
		t.Errorf("note %q", n)
	}
	run("approve it again",
		chromedp.Click(chromedp.CSS(card("run-1/call-1")+` button[data-action="approve"]`)),
		chromedp.WaitNotPresent(chromedp.CSS(card("run-1/call-1"))),
	)
	if ds := bustest.Decisions(t, b, "run-1"); len(ds) != 2 {
		t.Errorf("decisions for run-1: %d, want the first and the one made again", len(ds))
	}
	desk.set("run-1/call-1", wire.StateDecided, "human")
	waitLetGo(t, in, "run-1", "call-1")

	run("deny one that another approver's decision beats",
		chromedp.Click(chromedp.CSS(card("run-2/call-2")+` button[data-action="deny"]`)),
		chromedp.WaitNotPresent(chromedp.CSS(card("run-2/call-2"))),
		flashHas("sent, not applied yet"),
	)
	desk.set("run-2/call-2", wire.StateDecided, "ann")
	run("the page says it was not applied",
		flashHas("Not applied: your denial of delete_file (call-2) came after ann's decision"),
		shot("notapplied-02-beaten"),
	)

	run("approve one that is applied, late",
		chromedp.Click(chromedp.CSS(card("run-3/call-3")+` button[data-action="approve"]`)),
		chromedp.WaitNotPresent(chromedp.CSS(card("run-3/call-3"))),
		flashHas("sent, not applied yet"),
	)
	desk.set("run-3/call-3", wire.StateDecided, "human")
	waitLetGo(t, in, "run-3", "call-3")
	if f := text(`#flash`); strings.Contains(f, "ot applied:") {
		t.Errorf("flash %q after an applied decision", f)
	}
	if keys := pendingKeys(in); len(keys) != 0 {
		t.Errorf("still shown: %v", keys)
	}
}

// waitLetGo waits until the inbox let the request of run/call go as
// applied: deciding it again is refused as not pending, "applied here".
func waitLetGo(t *testing.T, in *inbox.Inbox, run, call string) {
	t.Helper()
	bustest.Poll(t, bustest.Timeout, "the applied decision's request let go", func() (bool, string) {
		_, err := in.Decide(bustest.Context(t), run, call, approver.Choice{Approve: true})
		return errors.Is(err, inbox.ErrNotPending) && strings.Contains(err.Error(), "applied here"), fmt.Sprint(err)
	})
}
