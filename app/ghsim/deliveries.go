package ghsim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Delivery is one webhook delivery attempt, as GitHub's deliveries log
// keeps it. A redelivery is a new Delivery with the same GUID.
type Delivery struct {
	ID             int64     `json:"id"`
	GUID           string    `json:"guid"`
	DeliveredAt    time.Time `json:"deliveredAt"`
	Redelivery     bool      `json:"redelivery"`
	Duration       float64   `json:"duration"` // seconds
	Status         string    `json:"status"`   // "OK", "Invalid HTTP Response: 502", …
	StatusCode     int       `json:"statusCode"`
	Event          string    `json:"event"`
	Action         string    `json:"action,omitempty"`
	InstallationID int64     `json:"installationId,omitempty"`
	RepositoryID   int64     `json:"repositoryId,omitempty"`
	AppID          int64     `json:"appId"`
	URL            string    `json:"url"`

	RequestHeaders  map[string]string `json:"requestHeaders"`
	Payload         json.RawMessage   `json:"payload"`
	ResponseHeaders map[string]string `json:"responseHeaders"`
	ResponseBody    string            `json:"responseBody"`
}

// OK reports whether the receiver answered 2xx.
func (d Delivery) OK() bool { return d.StatusCode >= 200 && d.StatusCode < 300 }

// Deliveries returns the deliveries log (every App's), oldest first.
func (s *Sim) Deliveries() []Delivery {
	s.hooks.mu.Lock()
	defer s.hooks.mu.Unlock()
	out := make([]Delivery, 0, len(s.hooks.deliveries))
	for _, d := range s.hooks.deliveries {
		out = append(out, *d)
	}
	return out
}

// Redeliver queues a new attempt of delivery id (same GUID and payload,
// Redelivery set), as POST /app/hook/deliveries/{id}/attempts does.
func (s *Sim) Redeliver(id int64) error {
	s.hooks.mu.Lock()
	d := s.hooks.findLocked(id)
	s.hooks.mu.Unlock()
	if d == nil {
		return fmt.Errorf("ghsim: delivery %d: %w", id, ErrNotFound)
	}
	key := "installation:" + strconv.FormatInt(d.InstallationID, 10)
	if d.RepositoryID != 0 {
		key = "repo:" + strconv.FormatInt(d.RepositoryID, 10)
	}
	s.hooks.enqueue(&outgoing{
		id: s.newID(), guid: d.GUID, appID: d.AppID, key: key, event: d.Event, action: d.Action,
		instID: d.InstallationID, repoID: d.RepositoryID, body: d.Payload, redelivery: true,
	})
	return nil
}

func (d *dispatcher) findLocked(id int64) *Delivery {
	for i := len(d.deliveries) - 1; i >= 0; i-- {
		if d.deliveries[i].ID == id {
			return d.deliveries[i]
		}
	}
	return nil
}

func (s *Sim) deliveryRoutes() []*route {
	return []*route{
		{method: "GET", pattern: "/app/hook/deliveries", auth: authApp, handle: s.listDeliveries},
		{method: "GET", pattern: "/app/hook/deliveries/{delivery_id}", auth: authApp, handle: s.getDelivery},
		{method: "POST", pattern: "/app/hook/deliveries/{delivery_id}/attempts", auth: authApp, handle: s.redeliver},
	}
}

// listDeliveries pages through the App's deliveries, newest first, with a
// cursor as GitHub does.
func (s *Sim) listDeliveries(c *call) response {
	q := c.r.URL.Query()
	perPage, err := strconv.Atoi(q.Get("per_page"))
	if err != nil || perPage <= 0 {
		perPage = 30
	}
	perPage = min(perPage, 100)
	before := int64(-1)
	if cur := q.Get("cursor"); cur != "" {
		n, err := strconv.ParseInt(strings.TrimPrefix(cur, "v1_"), 10, 64)
		if err != nil {
			return validationFailed("HookDelivery", "cursor", "invalid", "")
		}
		before = n
	}
	want := q.Get("status")
	if want != "" && want != "success" && want != "failure" {
		return validationFailed("HookDelivery", "status", "invalid", "")
	}
	s.hooks.mu.Lock()
	var page []*Delivery
	more := false
	for i := len(s.hooks.deliveries) - 1; i >= 0; i-- {
		d := s.hooks.deliveries[i]
		if d.AppID != c.app.id || (before >= 0 && d.ID >= before) ||
			(want == "success" && !d.OK()) || (want == "failure" && d.OK()) {
			continue
		}
		if len(page) == perPage {
			more = true
			break
		}
		page = append(page, d)
	}
	items := make([]any, 0, len(page))
	for _, d := range page {
		items = append(items, s.renderDeliveryItem(d))
	}
	s.hooks.mu.Unlock()
	resp := response{status: http.StatusOK, body: items}
	if more {
		u := c.selfURL()
		v := u.Query()
		v.Set("cursor", "v1_"+strconv.FormatInt(page[len(page)-1].ID, 10))
		v.Set("per_page", strconv.Itoa(perPage))
		u.RawQuery = v.Encode()
		resp.header = http.Header{"Link": {fmt.Sprintf("<%s>; rel=\"next\"", u.String())}}
	}
	return resp
}

func (s *Sim) renderDeliveryItem(d *Delivery) map[string]any {
	var action, inst, repo any
	if d.Action != "" {
		action = d.Action
	}
	if d.InstallationID != 0 {
		inst = d.InstallationID
	}
	if d.RepositoryID != 0 {
		repo = d.RepositoryID
	}
	return map[string]any{
		"id": d.ID, "guid": d.GUID, "delivered_at": formatTime(d.DeliveredAt), "redelivery": d.Redelivery,
		"duration": d.Duration, "status": d.Status, "status_code": d.StatusCode, "event": d.Event,
		"action": action, "installation_id": inst, "repository_id": repo, "throttled_at": nil,
	}
}

func (s *Sim) getDelivery(c *call) response {
	id, err := strconv.ParseInt(c.r.PathValue("delivery_id"), 10, 64)
	if err != nil {
		return notFound()
	}
	s.hooks.mu.Lock()
	defer s.hooks.mu.Unlock()
	d := s.hooks.findLocked(id)
	if d == nil || d.AppID != c.app.id {
		return notFound()
	}
	m := s.renderDeliveryItem(d)
	m["url"] = d.URL
	var payload any
	_ = json.Unmarshal(d.Payload, &payload)
	m["request"] = map[string]any{"headers": d.RequestHeaders, "payload": payload}
	m["response"] = map[string]any{"headers": d.ResponseHeaders, "payload": nilIfEmpty(d.ResponseBody)}
	return response{status: http.StatusOK, body: m}
}

func (s *Sim) redeliver(c *call) response {
	id, err := strconv.ParseInt(c.r.PathValue("delivery_id"), 10, 64)
	if err != nil {
		return notFound()
	}
	s.hooks.mu.Lock()
	d := s.hooks.findLocked(id)
	s.hooks.mu.Unlock()
	if d == nil || d.AppID != c.app.id {
		return notFound()
	}
	if err := s.Redeliver(id); err != nil {
		return notFound()
	}
	return response{status: http.StatusAccepted, body: map[string]any{}}
}
