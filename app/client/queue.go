package client

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

// QueueState is a repository's merge queue: its pull requests in order.
type QueueState struct {
	Repository     string       `json:"repository"`
	InstallationID int64        `json:"installationId"`
	ReconciledAt   *time.Time   `json:"reconciledAt,omitempty"`
	Entries        []QueueEntry `json:"entries"`
}

// QueueEntry is one pull request in a merge queue.
type QueueEntry struct {
	// Position is the place in line from 1 (the next to merge); 0 for a
	// bounced entry.
	Position         int        `json:"position"`
	PRNumber         int        `json:"prNumber"`
	PRSHA            string     `json:"prSha"`
	BaseRef          string     `json:"baseRef,omitempty"`
	Status           string     `json:"status"` // queued | evaluating | gate_passed | bounced
	QueuedAt         time.Time  `json:"queuedAt"`
	ReevaluatedAt    *time.Time `json:"reevaluatedAt,omitempty"`
	GateResult       string     `json:"gateResult,omitempty"` // pending | success | failure
	GateDetail       string     `json:"gateDetail,omitempty"`
	GateResultAt     *time.Time `json:"gateResultAt,omitempty"`
	MergeOperationID string     `json:"mergeOperationId,omitempty"`
	BounceReason     string     `json:"bounceReason,omitempty"`
}

// QueueEvent is an event a merge queue acted on, and what it did.
type QueueEvent struct {
	At         time.Time `json:"at"`
	Event      string    `json:"event"`
	Action     string    `json:"action,omitempty"`
	PRNumber   int       `json:"prNumber,omitempty"`
	DeliveryID string    `json:"deliveryId,omitempty"`
	Details    string    `json:"details"`
}

// QueueEvents is a merge queue's event log, oldest first.
type QueueEvents struct {
	Repository string       `json:"repository"`
	Events     []QueueEvent `json:"events"`
}

// QueueAuditEntry is a change of a merge queue: join, leave, reevaluate,
// gate_success, gate_failure, merge or bounce.
type QueueAuditEntry struct {
	At       time.Time `json:"at"`
	Action   string    `json:"action"`
	PRNumber int       `json:"prNumber"`
	SHA      string    `json:"sha,omitempty"`
	Detail   string    `json:"detail,omitempty"`
}

// QueueAudit is a merge queue's audit log, oldest first.
type QueueAudit struct {
	Repository string            `json:"repository"`
	Audit      []QueueAuditEntry `json:"audit"`
}

// QueueReconcileReport is what a reconcile of a merge queue did.
type QueueReconcileReport struct {
	Repository     string `json:"repository"`
	InstallationID int64  `json:"installationId"`
	Skipped        bool   `json:"skipped"`
	SkipReason     string `json:"skipReason,omitempty"`
	StaleLease     *struct {
		Owner             string  `json:"owner"`
		Token             int64   `json:"token"`
		ExpiredForSeconds float64 `json:"expiredForSeconds"`
		Dead              bool    `json:"dead"`
	} `json:"staleLease,omitempty"`
	Joined         []int `json:"joined"`
	Left           []int `json:"left"`
	Merged         []int `json:"merged"`
	Reevaluated    []int `json:"reevaluated"`
	Bounced        []int `json:"bounced"`
	BouncedCleared []int `json:"bouncedCleared"`
	LabelRemovals  []int `json:"labelRemovals"`
	Entries        int   `json:"entries"`
}

// QueuePath is the path of a repository's merge queue:
// /v1/repos/{owner}/{repo}/queue.
func QueuePath(owner, repo string) string {
	return "/v1/repos/" + url.PathEscape(owner) + "/" + url.PathEscape(repo) + "/queue"
}

// Queue returns a repository's merge queue.
func (c *Client) Queue(ctx context.Context, owner, repo string) (QueueState, error) {
	var s QueueState
	_, err := c.do(ctx, http.MethodGet, QueuePath(owner, repo), nil, nil, &s)
	return s, err
}

// QueueEvents returns a merge queue's event log (the last 100 events).
func (c *Client) QueueEvents(ctx context.Context, owner, repo string) (QueueEvents, error) {
	var e QueueEvents
	_, err := c.do(ctx, http.MethodGet, QueuePath(owner, repo)+"/events", nil, nil, &e)
	return e, err
}

// QueueAudit returns a merge queue's audit log (the last 200 changes).
func (c *Client) QueueAudit(ctx context.Context, owner, repo string) (QueueAudit, error) {
	var a QueueAudit
	_, err := c.do(ctx, http.MethodGet, QueuePath(owner, repo)+"/audit", nil, nil, &a)
	return a, err
}

// ReconcileQueue repairs a merge queue from GitHub now. While an event of
// the repository is being handled it is an *Error with code lease_held;
// less than a minute after this token's last reconcile of the repository,
// one with code rate_limited (Details "retryAfter", in seconds).
func (c *Client) ReconcileQueue(ctx context.Context, owner, repo string) (QueueReconcileReport, error) {
	var r QueueReconcileReport
	_, err := c.do(ctx, http.MethodPost, QueuePath(owner, repo)+"/reconcile", nil, nil, &r)
	return r, err
}
