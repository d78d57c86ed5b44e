package orchestrator

import (
	"encoding/json"
	"time"

	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/deferred"
)

// grantSet is the grants in force when a run pauses, to be judged, for
// each call, by the policy of its conversation's agent (roster.judge).
type grantSet struct {
	grants []StoredGrant
	roster *roster
}

// applyGrants decides the approval calls of c's batch, just paused (or
// held by an inline wait), that a grant covers: a standing denial over an
// approval when both cover a call. A call so approved is dispatched to its
// workers at once (Dispatch) and goes out with the batch's calls; one of
// an in-process tool runs in the follow-up, as any approved call. Each is
// recorded as decided by the grant (DecisionRecord.GrantID). A grant that
// the policy of c's agent refuses for a call (grantRefusal) does not
// decide it; it is returned with why, to be audited. When this replica
// may not judge c's decisions, no grant decides any of its calls.
func applyGrants(c *conversation.State, gs grantSet, now time.Time) []conversation.GrantUse {
	b := c.Batch
	if b == nil || len(gs.grants) == 0 {
		return nil
	}
	ag := gs.roster.judge(c)
	if ag == nil {
		return nil
	}
	caller := callerID(c.Caller)
	var uses, ignored []conversation.GrantUse
	for _, pc := range b.Calls {
		if pc.Kind != deferred.KindApproval || pc.Reply != nil {
			continue
		}
		tc := ag.cfg.tool(pc.ToolName)
		var found *Grant
		for i := range gs.grants {
			g := &gs.grants[i].Grant
			if !g.Covers(pc.ToolName, pc.ArgsDigest, c.ID, caller) {
				continue
			}
			if err := ag.policy.grantRefusal(c, pc, tc, gs.grants[i]); err != nil {
				ignored = append(ignored, useOf(pc, g, err.Error()))
				continue
			}
			if found == nil || found.Approved && !g.Approved {
				found = g
			}
		}
		if found == nil {
			continue
		}
		r := &conversation.Reply{Outcome: conversation.OutcomeApproved, By: GrantedByPrefix + found.ID, At: now}
		if !found.Approved {
			r.Outcome, r.Message = conversation.OutcomeDenied, found.Message
			if r.Message == "" {
				r.Message = deferred.DefaultDenyMessage
			}
		}
		pc.Reply = r
		// Decided before it was ever published: nothing asks anyone.
		pc.Published = true
		c.Decisions = append(c.Decisions, conversation.DecisionRecord{
			RunID: b.RunID, ToolCallID: pc.ToolCallID, ToolName: pc.ToolName, Approved: found.Approved,
			Message: r.Message, ApproverID: r.By, GrantID: found.ID, At: now,
		})
		uses = append(uses, useOf(pc, found, ""))
	}
	for _, u := range uses {
		if u.Approved {
			c.Dispatch(u.CallID, now)
		}
	}
	if len(uses) > 0 {
		c.UpdatedAt = now
	}
	return append(uses, ignored...)
}

// useOf is the use of grant g for call pc, ignored for that reason when
// not "".
func useOf(pc *conversation.PendingCall, g *Grant, ignored string) conversation.GrantUse {
	return conversation.GrantUse{CallID: pc.ToolCallID, Tool: pc.ToolName, ArgsDigest: pc.ArgsDigest, GrantID: g.ID,
		Approved: g.Approved, Signed: len(g.Signature) > 0, Message: g.Message, Ignored: ignored}
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
