package agent

import "github.com/toolgate/toolgate/deferred"

// Handler resolves deferred calls inline, without ending the run (D13–D17).
// It is offered what is still unresolved and returns Results for any subset
// of it: decisions for req.Approvals, results for req.Calls. Returning nil (or
// Results without approvals and calls) declines. An answer for an id that is
// not offered, or in the wrong category, fails the run (D16). Metadata in the
// Results is applied as in a resume: an approved call gets it as
// RunContext.ToolCallMetadata, a denied call's tool-return part keeps it. An
// approved call may defer again; it then joins the run's batch with the args
// it was approved with (D17). A handler may
// block, for instance until a human answers; it should return when
// ctx.Context() is done.
type Handler interface {
	HandleDeferred(ctx *RunContext, req *deferred.Requests) (*deferred.Results, error)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx *RunContext, req *deferred.Requests) (*deferred.Results, error)

// HandleDeferred calls f.
func (f HandlerFunc) HandleDeferred(ctx *RunContext, req *deferred.Requests) (*deferred.Results, error) {
	return f(ctx, req)
}
