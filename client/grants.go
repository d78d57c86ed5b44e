package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"time"
)

// GrantOptions is a standing decision to give (POST /v1/grants): every
// later approval call of Tool its scope covers is decided without asking.
type GrantOptions struct {
	Tool string `json:"tool"`
	// Approved false is a standing denial; the model is told Message.
	Approved bool   `json:"approved"`
	Message  string `json:"message,omitempty"`
	// The scope, each empty one covering all: a conversation, exactly
	// these args (or their digest), runs whose caller object has this id.
	ConversationID string          `json:"conversation_id,omitempty"`
	Args           json.RawMessage `json:"args,omitempty"`
	ArgsDigest     string          `json:"args_digest,omitempty"`
	Caller         string          `json:"caller,omitempty"`
	// ExpiresAt or TTL ("8h") ends it; neither: it stands until revoked.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	TTL       string     `json:"ttl,omitempty"`
}

// Grant is a stored standing decision, as GET /v1/grants lists it.
type Grant struct {
	ID             string    `json:"id"`
	Tool           string    `json:"tool"`
	Approved       bool      `json:"approved"`
	ConversationID string    `json:"conversation_id,omitempty"`
	ArgsDigest     string    `json:"args_digest,omitempty"`
	Caller         string    `json:"caller,omitempty"`
	Message        string    `json:"message,omitempty"`
	GrantedBy      string    `json:"granted_by"`
	GrantedAt      time.Time `json:"granted_at"`
	ExpiresAt      time.Time `json:"expires_at,omitzero"`
	// Source is "api" or "bus"; Ignored says why it does not apply.
	Source  string `json:"source,omitempty"`
	Ignored string `json:"ignored,omitempty"`
}

// GiveGrant stores a standing decision and returns it.
func (c *Client) GiveGrant(ctx context.Context, o GrantOptions) (Grant, error) {
	var g Grant
	err := c.do(ctx, http.MethodPost, "/v1/grants", o, &g)
	return g, err
}

// Grants lists the grants stored.
func (c *Client) Grants(ctx context.Context) ([]Grant, error) {
	var out struct {
		Grants []Grant `json:"grants"`
	}
	err := c.do(ctx, http.MethodGet, "/v1/grants", nil, &out)
	return out.Grants, err
}

// RevokeGrant deletes grant id; none is an *APIError with status 404.
func (c *Client) RevokeGrant(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/v1/grants/"+url.PathEscape(id), nil, nil)
}
