package conversation

import (
	"fmt"
	"time"
)

// SetAgent records the agent, and the digest of its config, that the
// conversation's runs go on with; the replica taking a run sets it, which
// also clears what WaitForAgent noted.
func (c *State) SetAgent(name, digest string) {
	c.Agent, c.AgentDigest = name, digest
	c.Unserved, c.UnservedSince = "", time.Time{}
}

// WaitForAgent notes, for a conversation that needs a run (running or
// resuming, lease expired), that no replica runs its agent: the first call
// records reason and the time (noted), a call wait after that fails the
// conversation with the reason (failed, with the run it failed). Anything
// else changes nothing.
func (c *State) WaitForAgent(reason string, now time.Time, wait time.Duration) (noted, failed bool, runID string) {
	if (c.Status != StatusRunning && c.Status != StatusResuming) || c.LeaseLive(now) {
		return false, false, ""
	}
	if c.Unserved == "" {
		c.Unserved, c.UnservedSince, c.UpdatedAt = reason, now, now
		return true, false, ""
	}
	if now.Sub(c.UnservedSince) < wait {
		return false, false, ""
	}
	switch {
	case c.Status == StatusResuming && c.Batch != nil && c.Batch.FollowUpRunID != "":
		runID = c.Batch.FollowUpRunID
	case c.Lease != nil:
		runID = c.Lease.RunID
	}
	msg := fmt.Sprintf("%s (waited %s for one)", c.Unserved, wait)
	c.Status, c.Error, c.Lease, c.Batch, c.UpdatedAt = StatusFailed, msg, nil, nil, now
	if rec := c.runToChange(runID); rec != nil {
		rec.Status, rec.Error, rec.EndedAt = StatusFailed, msg, now
	}
	return false, true, runID
}

// shortDigest is a config digest cut to the length logs show.
func shortDigest(d string) string {
	if len(d) > 12 {
		return d[:12]
	}
	return d
}
