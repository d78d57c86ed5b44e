package conversation

import (
	"errors"
	"fmt"
)

// ConflictError says a conversation cannot take a new prompt, a cancel or
// a delete now (Op says which; "" is a prompt).
type ConflictError struct {
	ConversationID string
	Status         Status
	Op             string
}

// Operations a ConflictError may refuse besides a prompt.
const (
	OpCancel        = "cancel"
	OpDelete        = "delete"
	OpDeleteCorrupt = "delete corrupt"
	OpSecondPrompt  = "second prompt"
	OpCreate        = "create"
)

func (e *ConflictError) Error() string {
	switch e.Op {
	case OpCreate:
		return fmt.Sprintf("conversation %s already exists: choose another new_conversation_id, or continue it with conversation_id", e.ConversationID)
	case OpCancel:
		return fmt.Sprintf("conversation %s is already %s: only a conversation under way can be cancelled", e.ConversationID, e.Status)
	case OpSecondPrompt:
		return fmt.Sprintf("conversation %s is paused and already has a prompt for its follow-up run; another is accepted once it is finished", e.ConversationID)
	case OpDeleteCorrupt:
		return fmt.Sprintf("conversation %s can be read (%s): only one that cannot be read is deleted as corrupt; delete it without corrupt=true", e.ConversationID, e.Status)
	case OpDelete:
		return fmt.Sprintf("conversation %s is %s: only a finished conversation (completed, failed or cancelled) can be deleted; cancel it first", e.ConversationID, e.Status)
	}
	if e.Status == StatusResuming {
		return fmt.Sprintf("conversation %s is %s: a new prompt is accepted once it is finished", e.ConversationID, e.Status)
	}
	return fmt.Sprintf("conversation %s is %s: a new prompt is accepted once it is finished, or while it is paused (then it goes into the follow-up run)", e.ConversationID, e.Status)
}

// ErrUnchanged, returned by an update function, ends the update without a
// write.
var ErrUnchanged = errors.New("unchanged")

// ErrLeaseLost ends a run whose lease another replica took over.
var ErrLeaseLost = errors.New("lease lost")

// ErrOtherPrompt refuses a prompt for a follow-up run already queued with
// another prompt.
var ErrOtherPrompt = errors.New("run queued with another prompt")
