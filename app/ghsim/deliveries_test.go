package ghsim

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/google/go-github/v62/github"
)

// TestDeliveriesRecovery plays what a missed-delivery recovery loop does:
// deliveries fail while the receiver is "down", the App lists them,
// and asks for redeliveries, which arrive with the same GUID.
func TestDeliveriesRecovery(t *testing.T) {
	t.Parallel()
	e := seeded(t, Config{})
	rc := newReceiver(e)
	c := ctx(t)
	if _, err := e.sim.AddComment("octo", "demo", 10, "before", ""); err != nil {
		t.Fatal(err)
	}
	rc.wait(1)
	e.sim.SetWebhookFault(WebhookFault{Count: 5})
	for range 5 {
		if err := e.sim.AddLabel("octo", "demo", 11, "x"+randomHex(2), ""); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.sim.AddComment("octo", "demo", 10, "after", ""); err != nil {
		t.Fatal(err)
	}
	rc.wait(2)
	if err := e.sim.WaitDeliveries(c); err != nil {
		t.Fatal(err)
	}

	app := e.appClient()
	var all []*github.HookDelivery
	opts := &github.ListCursorOptions{PerPage: 3}
	for {
		page, resp, err := app.Apps.ListHookDeliveries(c, opts)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, page...)
		if resp.Cursor == "" {
			break
		}
		opts.Cursor = resp.Cursor
	}
	if len(all) != 7 {
		t.Fatalf("listed %d deliveries, want 7", len(all))
	}
	var failed []*github.HookDelivery
	for i, d := range all {
		if i > 0 && d.GetID() >= all[i-1].GetID() {
			t.Errorf("deliveries not newest first")
		}
		if d.GetStatusCode() != http.StatusOK {
			failed = append(failed, d)
			if d.GetStatusCode() != http.StatusBadGateway || d.GetEvent() != "issues" || d.GetAction() != "labeled" || d.GetInstallationID() != 1 {
				t.Errorf("failed delivery %+v", d)
			}
		}
	}
	if len(failed) != 5 {
		t.Fatalf("%d failed deliveries, want 5", len(failed))
	}
	only, _, err := app.Apps.ListHookDeliveries(c, &github.ListCursorOptions{PerPage: 100})
	if err != nil || len(only) != 7 {
		t.Fatalf("one page = %d, %v", len(only), err)
	}

	full, _, err := app.Apps.GetHookDelivery(c, failed[0].GetID())
	if err != nil || full.GetGUID() != failed[0].GetGUID() || full.Request.Headers["X-Github-Event"] != "issues" {
		t.Fatalf("GET delivery = %+v, %v", full, err)
	}
	for _, d := range failed {
		if _, resp, err := app.Apps.RedeliverHookDelivery(c, d.GetID()); err != nil && resp.StatusCode != http.StatusAccepted {
			t.Fatalf("redeliver: %v", err)
		}
	}
	failedGUIDs := map[string]bool{}
	for _, d := range failed {
		failedGUIDs[d.GetGUID()] = true
	}
	for _, h := range rc.wait(7)[2:] {
		if h.Event != "issues" || !failedGUIDs[h.GUID] {
			t.Errorf("redelivery %s %s is not of a failed delivery", h.Event, h.GUID)
		}
		delete(failedGUIDs, h.GUID)
	}
	if err := e.sim.WaitDeliveries(c); err != nil {
		t.Fatal(err)
	}
	redelivered := 0
	for _, d := range e.sim.Deliveries() {
		if d.Redelivery {
			redelivered++
			if !d.OK() {
				t.Errorf("redelivery failed: %+v", d)
			}
		}
	}
	if redelivered != 5 {
		t.Errorf("%d redeliveries logged, want 5", redelivered)
	}
	_, _, err = app.Apps.GetHookDelivery(c, 1)
	if statusOf(err) != http.StatusNotFound {
		t.Errorf("unknown delivery: %v", err)
	}
}

func TestDeliveriesFailWhenReceiverFails(t *testing.T) {
	t.Parallel()
	e := seeded(t, Config{})
	rc := newReceiver(e)
	rc.status.Store(http.StatusInternalServerError)
	if _, err := e.sim.AddComment("octo", "demo", 10, "x", ""); err != nil {
		t.Fatal(err)
	}
	if err := e.sim.WaitDeliveries(ctx(t)); err != nil {
		t.Fatal(err)
	}
	ds := e.sim.Deliveries()
	if len(ds) != 1 || ds[0].StatusCode != 500 || ds[0].Status != "Invalid HTTP Response: 500" || ds[0].OK() {
		t.Fatalf("deliveries = %+v", ds)
	}
	// A receiver that is gone.
	e.sim.SetWebhook("http://127.0.0.1:1/hook", "")
	if _, err := e.sim.AddComment("octo", "demo", 10, "y", ""); err != nil {
		t.Fatal(err)
	}
	if err := e.sim.WaitDeliveries(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if ds = e.sim.Deliveries(); len(ds) != 2 || ds[1].StatusCode != 0 || ds[1].OK() {
		t.Fatalf("deliveries = %+v", ds[1])
	}
}

// The deliveries log keeps the newest 10,000 attempts (by default), so a
// simulator that runs for long does not keep every payload it ever sent.
func TestDeliveriesLogBounded(t *testing.T) {
	t.Parallel()
	e := seeded(t, Config{})
	e.sim.SetWebhook("http://127.0.0.1:1/never", "")
	e.sim.SetWebhookFault(WebhookFault{}) // logged, not sent
	const n = 10050
	for i := range n {
		if _, err := e.sim.AddComment("octo", "demo", 10, fmt.Sprintf("comment %d", i), "octocat"); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.sim.WaitDeliveries(ctx(t)); err != nil {
		t.Fatal(err)
	}
	ds := e.sim.Deliveries()
	if len(ds) != 10000 {
		t.Fatalf("the log keeps %d deliveries, want 10000", len(ds))
	}
	for i := 1; i < len(ds); i++ {
		if ds[i].ID <= ds[i-1].ID {
			t.Fatalf("log out of order at %d", i)
		}
	}
	var last struct {
		Comment struct{ Body string } `json:"comment"`
	}
	if err := json.Unmarshal(ds[len(ds)-1].Payload, &last); err != nil || last.Comment.Body != fmt.Sprintf("comment %d", n-1) {
		t.Errorf("newest kept: %q, %v", last.Comment.Body, err)
	}
	if err := e.sim.Redeliver(ds[0].ID - 1); !errors.Is(err, ErrNotFound) {
		t.Errorf("redelivery of a forgotten delivery = %v, want ErrNotFound", err)
	}
}
