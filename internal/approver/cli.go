package approver

import (
	"cmp"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/client"
	"github.com/toolgate/toolgate/wire"
)

// CLI runs the approver's one-shot commands: list, approve, deny. It reads
// requests (and their args_digest) from TOOLGATE_APPROVALS without a
// durable consumer, and what is still pending from the orchestrator when
// one is configured, else from the conversation events.
type CLI struct {
	// Bus is the connection. Required.
	Bus *bus.Bus
	// ID is the approver_id of decisions. Required for approve and deny.
	ID string
	// Key signs decisions; nil sends them unsigned.
	Key ed25519.PrivateKey
	// Filter narrows the requests seen. Defaults to wire.AllApprovals.
	Filter string
	// Orchestrator, when set, is the authority on what is pending.
	Orchestrator *client.Client
	// Out receives the commands' results.
	Out io.Writer
	// Progress receives progress of long steps (stderr); nil shows none.
	Progress io.Writer
	// Terminal makes Progress a spinner that redraws one line; otherwise
	// each step is a plain line.
	Terminal bool
	// Clock is the clock. Defaults to time.Now.
	Clock func() time.Time
	// OutcomeTimeout bounds the wait for the orchestrator's outcome of a
	// decision. Defaults to 30s.
	OutcomeTimeout time.Duration
}

func (c *CLI) now() time.Time {
	if c.Clock == nil {
		return time.Now()
	}
	return c.Clock()
}

// Pending is an open approval request as the CLI lists it.
type Pending struct {
	Request wire.ApprovalRequest
	Stored  time.Time // when the request was published
}

// ErrAmbiguous is returned when a tool_call_id names calls of several runs;
// give run_id/tool_call_id.
var ErrAmbiguous = errors.New("ambiguous tool call id")

// ErrNoRequest is returned when no open request matches the id.
var ErrNoRequest = errors.New("no such pending approval request")

// Pending lists the open approval requests, oldest first.
func (c *CLI) Pending(ctx context.Context) ([]Pending, error) {
	stop := c.step("reading approval requests")
	reqs, err := ScanApprovals(ctx, c.Bus, c.Filter)
	stop()
	if err != nil {
		return nil, err
	}
	now := c.now()
	var live []StoredRequest
	for _, sr := range latestAttempts(reqs) {
		if r := sr.Request; r.Deadline.IsZero() || now.Before(r.Deadline) {
			live = append(live, sr)
		}
	}
	isOpen, err := c.openFunc(ctx, live)
	if err != nil {
		return nil, err
	}
	var out []Pending
	for _, sr := range live {
		if isOpen(sr.Request) {
			out = append(out, Pending{Request: sr.Request, Stored: sr.Time})
		}
	}
	return out, nil
}

// openFunc answers whether a request is still pending: the word of the
// orchestrators on NATS (which know of deleted conversations too), else
// of the one at --orchestrator, else the events'.
func (c *CLI) openFunc(ctx context.Context, reqs []StoredRequest) (func(wire.ApprovalRequest) bool, error) {
	asked := make([]wire.ApprovalRequest, 0, len(reqs))
	for _, sr := range reqs {
		asked = append(asked, sr.Request)
	}
	stop := c.step("asking the orchestrator what is pending")
	statuses, err := Statuses(ctx, c.Bus, asked)
	stop()
	switch {
	case err == nil:
		return func(r wire.ApprovalRequest) bool { return statuses[Ref(r)].Pending() }, nil
	case !errors.Is(err, ErrNoOrchestrator):
		return nil, err
	}
	if c.Orchestrator != nil {
		c.note("no orchestrator answers on NATS: what is pending comes from --orchestrator")
		stop := c.step("asking the orchestrator what is pending")
		pending, err := c.Orchestrator.Pending(ctx)
		stop()
		if err != nil {
			return nil, err
		}
		open := make(map[[2]string]bool, len(pending))
		for _, p := range pending {
			if p.Kind == "" || p.Kind == "approval" {
				open[[2]string{p.RunID, p.ToolCallID}] = true
			}
		}
		return func(r wire.ApprovalRequest) bool { return open[[2]string{r.RunID, r.ToolCallID}] }, nil
	}
	c.note("no orchestrator answers on NATS: what is pending comes from the conversation events, which a deleted conversation takes with it")
	stop = c.step("reading conversation events")
	evs, err := ScanEvents(ctx, c.Bus, "")
	stop()
	if err != nil {
		return nil, err
	}
	s := NewSettlements()
	for _, se := range evs {
		s.Observe(se.Event)
	}
	return func(r wire.ApprovalRequest) bool {
		_, settled := s.Settled(r)
		return !settled
	}, nil
}

// latestAttempts keeps the newest stored request of each call, in the
// order the calls were first requested.
func latestAttempts(reqs []StoredRequest) []StoredRequest {
	idx := map[[2]string]int{}
	var out []StoredRequest
	for _, sr := range reqs {
		k := [2]string{sr.Request.RunID, sr.Request.ToolCallID}
		if i, ok := idx[k]; ok {
			if sr.Request.Attempt >= out[i].Request.Attempt {
				out[i] = sr
			}
			continue
		}
		idx[k] = len(out)
		out = append(out, sr)
	}
	return out
}

// List writes the open requests as a table.
func (c *CLI) List(ctx context.Context) error {
	ps, err := c.Pending(ctx)
	if err != nil {
		return err
	}
	if len(ps) == 0 {
		_, err := fmt.Fprintln(c.Out, "no pending approval requests")
		return err
	}
	tw := tabwriter.NewWriter(c.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOOL CALL ID\tTOOL\tRUN\tCONVERSATION\tWAITING\tEXPIRES IN\tARGS")
	now := c.now()
	for _, p := range ps {
		r := p.Request
		expires := "-"
		if !r.Deadline.IsZero() {
			expires = r.Deadline.Sub(now).Round(time.Second).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.ToolCallID, r.ToolName, r.RunID, r.ConversationID,
			now.Sub(p.Stored).Round(time.Second), expires, clip(compact(r.Args), 60))
	}
	return tw.Flush()
}

// Find resolves id, a tool_call_id or run_id/tool_call_id, to its open
// request.
func (c *CLI) Find(ctx context.Context, id string) (wire.ApprovalRequest, error) {
	runID, callID := "", id
	if i := strings.LastIndex(id, "/"); i >= 0 {
		runID, callID = id[:i], id[i+1:]
	}
	if callID == "" {
		return wire.ApprovalRequest{}, fmt.Errorf("%q: want TOOL_CALL_ID or RUN_ID/TOOL_CALL_ID", id)
	}
	ps, err := c.Pending(ctx)
	if err != nil {
		return wire.ApprovalRequest{}, err
	}
	var found []wire.ApprovalRequest
	for _, p := range ps {
		if p.Request.ToolCallID == callID && (runID == "" || p.Request.RunID == runID) {
			found = append(found, p.Request)
		}
	}
	switch len(found) {
	case 0:
		return wire.ApprovalRequest{}, fmt.Errorf("%s: %w", id, ErrNoRequest)
	case 1:
		return found[0], nil
	}
	runs := make([]string, 0, len(found))
	for _, r := range found {
		runs = append(runs, r.RunID+"/"+r.ToolCallID)
	}
	slices.Sort(runs)
	return wire.ApprovalRequest{}, fmt.Errorf("%s: %w: give one of %s", id, ErrAmbiguous, strings.Join(runs, ", "))
}

// note tells of a fallback on Progress.
func (c *CLI) note(msg string) {
	if c.Progress != nil {
		fmt.Fprintln(c.Progress, msg)
	}
}

// Decide publishes a decision on the open request id names and waits for
// the orchestrator's outcome: a *RefusedError when it did not apply it
// (a *NotAdmittedError, and nothing sent, when the request says it would
// not: c.ID is not among its approvers, or may not approve it),
// ErrNoOutcome when it did not say in time (OutcomeTimeout). Without an
// orchestrator answering on NATS the decision is only published.
func (c *CLI) Decide(ctx context.Context, id string, ch Choice) (wire.Decision, error) {
	if err := wire.ValidateToken("approver id", c.ID); err != nil {
		return wire.Decision{}, err
	}
	req, err := c.Find(ctx, id)
	if err != nil {
		return wire.Decision{}, err
	}
	// The orchestrator would refuse it: nothing is sent.
	if err := Admit(req, c.ID, ch.Approve); err != nil {
		return wire.Decision{}, err
	}
	d, err := NewDecision(req, c.ID, ch, c.Key, c.now())
	if err != nil {
		return wire.Decision{}, err
	}
	if _, err := Status(ctx, c.Bus, req); errors.Is(err, ErrNoOrchestrator) {
		stop := c.step("publishing the decision")
		_, err = c.Bus.PublishDecision(ctx, d)
		stop()
		if err != nil {
			return wire.Decision{}, err
		}
		c.note("no orchestrator answers on NATS: the decision is published, not confirmed")
		return d, nil
	}
	stop := c.step("publishing the decision and waiting for the orchestrator")
	err = decisionSender{bus: c.Bus, timeout: cmp.Or(c.OutcomeTimeout, 30*time.Second)}.send(ctx, d)
	stop()
	if err != nil {
		return d, err
	}
	return d, nil
}

// Approve approves id, with args replacing the model's when not empty and
// metadata, when not empty, given to the call's tool.
func (c *CLI) Approve(ctx context.Context, id string, args, metadata json.RawMessage) error {
	d, err := c.Decide(ctx, id, Choice{Approve: true, Args: args, Metadata: metadata})
	if err != nil {
		return err
	}
	how := ""
	if len(d.OverrideArgs) != 0 {
		how = " with args " + string(d.OverrideArgs)
	}
	_, err = fmt.Fprintf(c.Out, "approved %s/%s%s%s\n", d.RunID, d.ToolCallID, how, signedNote(d))
	return err
}

// Deny denies id; message is what the model is told.
func (c *CLI) Deny(ctx context.Context, id, message string) error {
	d, err := c.Decide(ctx, id, Choice{Message: message})
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(c.Out, "denied %s/%s: %s%s\n", d.RunID, d.ToolCallID, d.Message, signedNote(d))
	return err
}

func signedNote(d wire.Decision) string {
	if d.Signature != nil {
		return " (signed)"
	}
	return " (unsigned)"
}

func compact(raw json.RawMessage) string {
	if c, err := wire.CanonicalJSON(raw); err == nil {
		return string(c)
	}
	return string(raw)
}

func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// step shows that a long step is under way: a spinner on a terminal, a
// plain line otherwise. The returned func ends it.
func (c *CLI) step(what string) (stop func()) {
	if c.Progress == nil {
		return func() {}
	}
	if !c.Terminal {
		fmt.Fprintf(c.Progress, "%s…\n", what)
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		frames := []string{"⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"}
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for i := 0; ; i++ {
			fmt.Fprintf(c.Progress, "\r%s %s…", frames[i%len(frames)], what)
			select {
			case <-done:
				// Clear the line: results follow on Out.
				fmt.Fprintf(c.Progress, "\r\033[K")
				return
			case <-t.C:
			}
		}
	})
	var once sync.Once
	return func() {
		once.Do(func() {
			close(done)
			wg.Wait()
		})
	}
}
