package orchestrator

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/deferred"
	"github.com/toolgate/toolgate/wire"
)

// Grant is a standing decision (package wire): every later approval call
// its scope covers is decided by it when its run pauses, before anyone is
// asked.
type Grant = wire.Grant

// GrantedByPrefix starts the approver id of a decision a grant made
// ("grant:<id>"), in the call's reply and the conversation's decisions.
const GrantedByPrefix = "grant:"

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
// not name while approver keys are trusted.
var ErrGrantForbidden = errors.New("grant forbidden")

// Grant stores a standing decision given over the HTTP API and returns it.
// Where approver keys are trusted, only callers the API names (Identified)
// may give one, as for a decision over HTTP.
func (o *Orchestrator) Grant(ctx context.Context, r GrantRequest) (Grant, error) {
	if len(o.cfg.TrustedApprovers) > 0 && !r.Identified {
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

// StoredGrant is a grant as the bucket holds it, with what the
// orchestrator makes of it.
type StoredGrant struct {
	Grant
	// Source is where it was given: wire.GrantKeyAPI or wire.GrantKeyBus.
	Source string `json:"source"`
	// Ignored says why the orchestrator does not apply it ("" when it
	// does): expired, unsigned or signed by a key it does not trust.
	Ignored string `json:"ignored,omitempty"`
}

// Grants lists the grants stored, expired and ignored ones included (each
// saying why), in the order they were given.
func (o *Orchestrator) Grants(ctx context.Context) ([]StoredGrant, error) {
	return o.core.grants(ctx)
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

// grantCache is the grants bucket as the orchestrator's watch of it sees
// it, so that a pause reads no bucket: its values by key, once the watch
// has caught up. Grants given or revoked through this replica are put in
// at once; those of other replicas and of approvers come with the watch.
type grantCache struct {
	mu       sync.RWMutex
	caughtUp bool
	values   map[string][]byte
}

func (gc *grantCache) set(key string, value []byte) {
	gc.mu.Lock()
	defer gc.mu.Unlock()
	if gc.values == nil {
		gc.values = map[string][]byte{}
	}
	if value == nil {
		delete(gc.values, key)
		return
	}
	gc.values[key] = value
}

func (gc *grantCache) reset(caughtUp bool) {
	gc.mu.Lock()
	defer gc.mu.Unlock()
	gc.caughtUp = caughtUp
	if !caughtUp {
		gc.values = nil
	}
}

// snapshot is the cached values; ok is false until the watch caught up.
func (gc *grantCache) snapshot() (map[string][]byte, bool) {
	gc.mu.RLock()
	defer gc.mu.RUnlock()
	return maps.Clone(gc.values), gc.caughtUp
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

// grantIgnored says why grant g, stored under key, is not applied at now;
// "" when it is.
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
	switch source {
	case wire.GrantKeyAPI:
		// Written by an orchestrator, for a caller its API authenticated.
		return ""
	case wire.GrantKeyBus:
		if len(co.cfg.TrustedApprovers) == 0 {
			return ""
		}
		key, ok := co.cfg.TrustedApprovers[g.GrantedBy]
		if !ok {
			return fmt.Sprintf("approver %q is not trusted", g.GrantedBy)
		}
		if len(g.Signature) == 0 {
			return fmt.Sprintf("grant from %s is not signed", g.GrantedBy)
		}
		if err := g.Verify(ed25519.PublicKey(key)); err != nil {
			return fmt.Sprintf("grant from %s: %v", g.GrantedBy, err)
		}
		return ""
	}
	return fmt.Sprintf("unknown key prefix %q", source)
}

// liveGrants are the grants that apply now. A failure to read them is
// logged and leaves none: the calls are then asked about, which is safe.
func (co *core) liveGrants(ctx context.Context, req *deferred.Requests) []Grant {
	if req == nil || len(req.Approvals) == 0 {
		return nil
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
			return nil
		}
	}
	var live []Grant
	for _, g := range all {
		if g.Ignored == "" {
			live = append(live, g.Grant)
		}
	}
	return live
}

// grantUse is a call a grant decided.
type grantUse struct {
	callID, tool, digest string
	grant                Grant
}

// applyGrants decides the approval calls of c's batch, just paused (or
// held by an inline wait), that a grant covers: a standing denial over an
// approval when both cover a call. A call so approved is dispatched to its
// workers at once (Dispatch) and goes out with the batch's calls; one of
// an in-process tool runs in the follow-up, as any approved call. Each is
// recorded as decided by the grant (DecisionRecord.GrantID).
func (c *Conversation) applyGrants(grants []Grant, now time.Time) []grantUse {
	b := c.Batch
	if b == nil || len(grants) == 0 {
		return nil
	}
	caller := callerID(c.Caller)
	var uses []grantUse
	for _, pc := range b.Calls {
		if pc.Kind != deferred.KindApproval || pc.Reply != nil {
			continue
		}
		var found *Grant
		for i := range grants {
			g := &grants[i]
			if !g.Covers(pc.ToolName, pc.ArgsDigest, c.ID, caller) {
				continue
			}
			if found == nil || found.Approved && !g.Approved {
				found = g
			}
		}
		if found == nil {
			continue
		}
		r := &Reply{Outcome: OutcomeApproved, By: GrantedByPrefix + found.ID, At: now}
		if !found.Approved {
			r.Outcome, r.Message = OutcomeDenied, found.Message
			if r.Message == "" {
				r.Message = deferred.DefaultDenyMessage
			}
		}
		pc.Reply = r
		// Decided before it was ever published: nothing asks anyone.
		pc.Published = true
		c.Decisions = append(c.Decisions, DecisionRecord{
			RunID: b.RunID, ToolCallID: pc.ToolCallID, ToolName: pc.ToolName, Approved: found.Approved,
			Message: r.Message, ApproverID: r.By, GrantID: found.ID, At: now,
		})
		uses = append(uses, grantUse{callID: pc.ToolCallID, tool: pc.ToolName, digest: pc.ArgsDigest, grant: *found})
	}
	if len(uses) == 0 {
		return nil
	}
	for _, u := range uses {
		if u.grant.Approved {
			c.Dispatch(u.callID, now)
		}
	}
	c.UpdatedAt = now
	return uses
}

// callerID is the "id" of a run's caller object; "" when it has none.
func callerID(caller json.RawMessage) string {
	var v struct {
		ID string `json:"id"`
	}
	if len(caller) == 0 || json.Unmarshal(caller, &v) != nil {
		return ""
	}
	return v.ID
}

// auditGrants records each call a grant decided on the audit stream, as
// a decision applied, naming the grant.
func (co *core) auditGrants(ctx context.Context, convID, runID string, uses []grantUse) {
	for _, u := range uses {
		approved := u.grant.Approved
		rec := AuditRecord{
			Kind: string(deferred.KindApproval), Verdict: verdictApplied.String(),
			ConversationID: convID, RunID: runID, ToolCallID: u.callID, ToolName: u.tool,
			ApproverID: GrantedByPrefix + u.grant.ID, Approved: &approved, Signed: len(u.grant.Signature) > 0,
			ArgsDigest: u.digest, Message: u.grant.Message, Grant: u.grant.ID, Time: co.clock().UTC(),
		}
		hdr := nats.Header{}
		hdr.Set(wire.HeaderConversation, convID)
		hdr.Set(wire.HeaderCall, u.callID)
		if _, err := co.bus.PublishAudit(ctx, runID, "audit/grant/"+runID+"/"+u.callID, rec, hdr); err != nil {
			co.log.WarnContext(ctx, "audit record of a grant's use not published", slog.String("run_id", runID),
				slog.String("tool_call_id", u.callID), slog.String("grant_id", u.grant.ID), slog.String("error", err.Error()))
		}
	}
}

func newGrantID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "g" + hex.EncodeToString(b[:])
}
