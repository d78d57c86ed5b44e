// Package conversation is the model of a conversation: its stored state
// (State, with its runs, its batch of deferred calls and their replies),
// the records its log is made of (Record, Diff, State.Fold), and every
// change to it as a pure transition that returns the effects its write
// asks for (Transition, Effect). It does no I/O: the orchestrator stores
// the state under optimistic concurrency and carries out the effects of
// the write that won, once.
//
// # The state machine
//
// Every change of a conversation goes through one of State's transitions
// (machine.go): they take what they need (the time, the replica that acts,
// what the agent produced) as arguments, change only the State and do no
// I/O, so that the store applies one to the state it read, writes what it
// produced, and applies it again to a fresher state on a conflict.
//
//	                New / Start
//	                    │
//	                    ▼
//	                 running ──Complete──► completed
//	                    │  └─────Fail────► failed
//	                  Pause
//	                    ▼
//	                 paused ◄──┐ Apply / Expire while the
//	                    │  └───┘ batch is incomplete
//	                  Claim (batch complete)
//	                    ▼
//	                 resuming ──Complete / Fail / Pause, as running
//
//	running, resuming ──TakeOver (lease expired)──► the same, leased to the taker
//	running, resuming ──WaitForAgent (lease expired, no replica runs its
//	                     agent: noted, then after AgentWait)──► failed
//	running, paused, resuming ──Cancel──► cancelled
//	completed, failed, cancelled ──Start (a new prompt)──► running
//	completed, failed, cancelled ──Delete──► deleted (the tombstone; then purged)
//
// A run's lease says which replica executes it: Pause, Complete, Fail, Renew
// and BeginInline are refused with ErrLeaseLost unless the acting replica
// holds it (HoldsLease, the one lease check), which is how a run that
// another replica took over, or whose conversation was cancelled, learns
// that its result no longer counts.
//
// A conversation records its agent and the digest of that agent's config
// (SetAgent); a replica takes a run only of a conversation whose agent it
// runs with that digest, and claims a batch of another's with the lease
// expired at once (a Claimer whose TTL is zero), nudging that agent's
// replicas.
//
// # Effects
//
// The transitions the orchestrator applies as they are (CancelTransition,
// ExpireTransition, ClaimTransition, TakeOverTransition, AbortTransition,
// WaitForAgentTransition, RenewTransition, ReleaseTransition,
// MarkPublishedTransition, DeleteTransition) and the effect lists of the
// writes it builds itself (StartedEffects, InlineEffects, RepliedEffects,
// EndedEffects, SettledEffects, PurgeEffects) say what follows a write as a list of Effect, whose kinds
// EffectKind lists with who asks for each.
package conversation
