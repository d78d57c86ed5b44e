package client

import (
	"context"
	"net/http"
	"net/url"
)

// Cancel asks the orchestrator to cancel a conversation
// (POST /v1/conversations/{id}/cancel, answered 202): its pending calls
// are settled and no further run starts.
func (c *Client) Cancel(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodPost, "/v1/conversations/"+url.PathEscape(id)+"/cancel", nil, nil)
}
