package approver

import (
	"fmt"
	"slices"
	"strings"

	"github.com/toolgate/toolgate/wire"
)

// NotAdmittedError says the orchestrator would refuse an approver's
// decision on a request, as the request itself tells (its approvers and
// may_not_approve, which the orchestrator worked out from the agent
// config): the decision is not sent, and the request is left to the
// approvers it names.
type NotAdmittedError struct {
	RunID, ToolCallID string
	Reason            string
}

func (e *NotAdmittedError) Error() string {
	return fmt.Sprintf("decision on %s/%s refused: %s", e.RunID, e.ToolCallID, e.Reason)
}

// Admit reports whether approver id may decide req: nil when the
// orchestrator would take its decision, one that approves the call when
// approve is set, else a denial; a *NotAdmittedError when it would refuse
// it. The orchestrator checks the same (besides the signature) when the
// decision comes; this lets an inbox or a bot show and decide only the
// calls it may, rather than learn of a refusal after it sent one.
func Admit(req wire.ApprovalRequest, id string, approve bool) error {
	if len(req.Approvers) > 0 && !slices.Contains(req.Approvers, id) {
		return &NotAdmittedError{RunID: req.RunID, ToolCallID: req.ToolCallID,
			Reason: fmt.Sprintf("approver %q may not decide tool %s (approvers: %s)", id, req.ToolName, strings.Join(req.Approvers, ", "))}
	}
	if approve && slices.Contains(req.MayNotApprove, id) {
		return &NotAdmittedError{RunID: req.RunID, ToolCallID: req.ToolCallID,
			Reason: fmt.Sprintf("approver %q is the run's caller: it may not approve its own call", id)}
	}
	return nil
}
