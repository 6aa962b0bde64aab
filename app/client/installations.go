package client

import (
	"context"
	"net/http"
	"time"
)

// Installation is one installation of the App, as GET /v1/installations
// lists it.
type Installation struct {
	ID                  int64             `json:"id"`
	Account             string            `json:"account"`
	AccountType         string            `json:"accountType"`
	RepositorySelection string            `json:"repositorySelection,omitempty"`
	Repositories        []string          `json:"repositories"`
	Permissions         map[string]string `json:"permissions"`
	Events              []string          `json:"events"`
	Suspended           bool              `json:"suspended"`
	UpdatedAt           time.Time         `json:"updatedAt"`
}

// Installations lists the installations baton knows that the token may
// act on (all of them for an admin token).
func (c *Client) Installations(ctx context.Context) ([]Installation, error) {
	var out struct {
		Installations []Installation `json:"installations"`
	}
	_, err := c.do(ctx, http.MethodGet, "/v1/installations", nil, nil, &out)
	return out.Installations, err
}
