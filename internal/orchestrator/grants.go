package orchestrator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/deferred"
	"github.com/toolgate/toolgate/wire"
)

// GrantRequest is a grant given over the HTTP API, on behalf of a caller
// the API authenticated.
type GrantRequest struct {
	// By is who gives it, as the API authenticated them; Identified says
	// By is a user of the API's user list (see Answer).
	By         string
	Identified bool
	// The grant's decision and scope (see wire.Grant).
	Tool           string
	Approved       bool
	ConversationID string
	ArgsDigest     string
	Caller         string
	Message        string
	ExpiresAt      time.Time
}

// ErrGrantForbidden refuses a grant over HTTP from a caller the API does
// not name while an agent of the replica trusts approver keys.
var ErrGrantForbidden = errors.New("grant forbidden")

// Grant stores a standing decision given over the HTTP API and returns it.
// Where an agent of this replica trusts approver keys (its config's trust:
// or --trust-approver), only callers the API names (Identified) may give
// one, as for a decision over HTTP: the grant is not tied to one agent.
func (o *Orchestrator) Grant(ctx context.Context, r GrantRequest) (Grant, error) {
	if o.roster.anySigned() && !r.Identified {
		return Grant{}, fmt.Errorf("%w: approver keys are trusted: a grant over HTTP needs a caller named by the API's users", ErrGrantForbidden)
	}
	g := Grant{ID: newGrantID(), Tool: r.Tool, Approved: r.Approved, ConversationID: r.ConversationID,
		ArgsDigest: r.ArgsDigest, Caller: r.Caller, Message: r.Message, GrantedBy: r.By,
		GrantedAt: o.clock().UTC(), ExpiresAt: r.ExpiresAt}
	if !g.ExpiresAt.IsZero() {
		g.ExpiresAt = g.ExpiresAt.UTC()
	}
	if err := g.Validate(); err != nil {
		return Grant{}, &BadRequestError{err.Error()}
	}
	if err := o.bus.PutGrant(ctx, wire.GrantKeyAPI, g); err != nil {
		return Grant{}, err
	}
	if raw, err := json.Marshal(g); err == nil {
		o.grantCache.set(wire.GrantKeyAPI+"."+g.ID, raw)
	}
	o.log.InfoContext(ctx, "grant given", slog.String("grant_id", g.ID), slog.String("tool", g.Tool),
		slog.Bool("approved", g.Approved), slog.String("by", g.GrantedBy))
	return g, nil
}

// Grants lists the grants stored, expired and ignored ones included (each
// saying why), in the order they were given.
func (o *Orchestrator) Grants(ctx context.Context) ([]StoredGrant, error) {
	gs, err := o.core.grants(ctx)
	for i := range gs {
		if gs[i].Ignored == "" {
			gs[i].Ignored = o.roster.refusedByAll(gs[i])
		}
	}
	return gs, err
}

// RevokeGrant deletes the grant id: calls made after it are asked about
// again. ErrNotFound when there is none.
func (o *Orchestrator) RevokeGrant(ctx context.Context, id string) error {
	err := o.bus.DeleteGrant(ctx, id, wire.GrantKeyAPI, wire.GrantKeyBus)
	if errors.Is(err, bus.ErrGrantNotFound) {
		return fmt.Errorf("grant %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return err
	}
	o.grantCache.set(wire.GrantKeyAPI+"."+id, nil)
	o.grantCache.set(wire.GrantKeyBus+"."+id, nil)
	o.log.InfoContext(ctx, "grant revoked", slog.String("grant_id", id))
	return nil
}

func (co *core) grants(ctx context.Context) ([]StoredGrant, error) {
	kv, err := co.bus.Grants(ctx)
	if err != nil {
		return nil, err
	}
	entries, err := kv.List(ctx, "", true)
	if err != nil {
		return nil, err
	}
	now := co.clock()
	out := make([]StoredGrant, 0, len(entries))
	for _, e := range entries {
		if e.Op == bus.OpPut {
			out = append(out, co.storedGrant(e.Key, e.Value, now))
		}
	}
	slices.SortFunc(out, func(a, b StoredGrant) int { return a.GrantedAt.Compare(b.GrantedAt) })
	return out, nil
}

// storedGrant decodes the grant stored under key and says whether it
// applies at now.
func (co *core) storedGrant(key string, value []byte, now time.Time) StoredGrant {
	source, id, _ := strings.Cut(key, ".")
	var g Grant
	if err := json.Unmarshal(value, &g); err != nil {
		return StoredGrant{Grant: Grant{ID: id}, Source: source, Ignored: "does not decode: " + err.Error()}
	}
	return StoredGrant{Grant: g, Source: source, Ignored: co.grantIgnored(key, source, g, now)}
}

// grantsLoop keeps grantCache for as long as the orchestrator runs,
// watching again a second after a watch ends.
func (co *core) grantsLoop() {
	ctx := co.loopCtx
	for ctx.Err() == nil {
		kv, err := co.bus.Grants(ctx)
		if err == nil {
			for e, werr := range kv.Watch(ctx, "") {
				if werr != nil {
					err = werr
					break
				}
				switch e.Op {
				case bus.OpCaughtUp:
					co.grantCache.reset(true)
				case bus.OpPut:
					co.grantCache.set(e.Key, e.Value)
				default:
					co.grantCache.set(e.Key, nil)
				}
			}
		}
		co.grantCache.reset(false)
		if err != nil && ctx.Err() == nil {
			co.log.WarnContext(ctx, "grants not watched: each pause reads them", slog.String("error", err.Error()))
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// grantIgnored says why grant g, stored under key, is not applied at now
// by any agent; "" when it may be (whether it is, for a call, is the
// call's agent's: agentPolicy.grantRefusal).
func (co *core) grantIgnored(key, source string, g Grant, now time.Time) string {
	if err := g.Validate(); err != nil {
		return err.Error()
	}
	if key != source+"."+g.ID {
		return fmt.Sprintf("stored under %s, not its id", key)
	}
	if !g.Live(now) {
		return "expired at " + g.ExpiresAt.UTC().Format(time.RFC3339)
	}
	if source != wire.GrantKeyAPI && source != wire.GrantKeyBus {
		return fmt.Sprintf("unknown key prefix %q", source)
	}
	return ""
}

// refusedByAll says why no agent of this replica applies grant sg to any
// call: each refuses its signature, or its giver for the tool by name;
// "" when one may. A reason depending on the call (the run's caller, an
// approvers rule) is known only when a call is paused.
func (r *roster) refusedByAll(sg StoredGrant) string {
	var why []string
	var last error
	for _, name := range r.names {
		ag := r.agents[name]
		tc := ag.cfg.tool(sg.Tool)
		if tc != nil && tc.Approvers.Rule != "" {
			tc = nil
		}
		if last = ag.policy.grantRefusal(&conversation.State{}, nil, tc, sg); last == nil {
			return ""
		}
		why = append(why, fmt.Sprintf("agent %s: %v", name, last))
	}
	if len(why) == 1 {
		return last.Error()
	}
	return strings.Join(why, "; ")
}

// anySigned reports whether an agent of this replica takes only signed
// decisions.
func (r *roster) anySigned() bool {
	for _, ag := range r.agents {
		if ag.policy.signed() {
			return true
		}
	}
	return false
}

// liveGrants are the grants in force now, judged by the agents r knows. A
// failure to read them is logged and leaves none: the calls are then asked
// about, which is safe.
func (co *core) liveGrants(ctx context.Context, r *roster, req *deferred.Requests) grantSet {
	if req == nil || len(req.Approvals) == 0 {
		return grantSet{}
	}
	var all []StoredGrant
	if values, ok := co.grantCache.snapshot(); ok {
		now := co.clock()
		for key, v := range values {
			all = append(all, co.storedGrant(key, v, now))
		}
		slices.SortFunc(all, func(a, b StoredGrant) int { return a.GrantedAt.Compare(b.GrantedAt) })
	} else {
		var err error
		if all, err = co.grants(ctx); err != nil {
			co.log.WarnContext(ctx, "grants not read: asking about every call", slog.String("error", err.Error()))
			return grantSet{}
		}
	}
	gs := grantSet{roster: r}
	for _, g := range all {
		if g.Ignored == "" {
			gs.grants = append(gs.grants, g)
		}
	}
	return gs
}

// auditGrants records each call a grant decided on the audit stream, as
// a decision applied, naming the grant; and each grant ignored for a call
// as a decision refused, with why.
func (co *core) auditGrants(ctx context.Context, convID, runID string, uses []conversation.GrantUse) {
	for _, u := range uses {
		approved := u.Approved
		v, msgID := conversation.VerdictApplied, "audit/grant/"+runID+"/"+u.CallID
		if u.Ignored != "" {
			v, msgID = conversation.VerdictRefused, msgID+"/ignored/"+u.GrantID
			co.log.InfoContext(ctx, "grant ignored", slog.String("run_id", runID), slog.String("tool_call_id", u.CallID),
				slog.String("grant_id", u.GrantID), slog.String("reason", u.Ignored))
		}
		rec := AuditRecord{
			Kind: string(deferred.KindApproval), Verdict: v.String(), Reason: u.Ignored,
			ConversationID: convID, RunID: runID, ToolCallID: u.CallID, ToolName: u.Tool,
			ApproverID: GrantedByPrefix + u.GrantID, Approved: &approved, Signed: u.Signed,
			ArgsDigest: u.ArgsDigest, Message: u.Message, Grant: u.GrantID, Time: co.clock().UTC(),
		}
		hdr := nats.Header{}
		hdr.Set(wire.HeaderConversation, convID)
		hdr.Set(wire.HeaderCall, u.CallID)
		if _, err := co.bus.PublishAudit(ctx, runID, msgID, rec, hdr); err != nil {
			co.log.WarnContext(ctx, "audit record of a grant's use not published", slog.String("run_id", runID),
				slog.String("tool_call_id", u.CallID), slog.String("grant_id", u.GrantID), slog.String("error", err.Error()))
		}
	}
}

func newGrantID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "g" + hex.EncodeToString(b[:])
}
