package app

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/baton-dev/baton/internal/sqlite"
)

// The series an operator alerts on exist at 0 before the first event: a
// counter whose series is born at 1 hides that first event from
// increase() and rate(), so the first failed delivery would never alert.
func TestAlertedCountersStartAtZero(t *testing.T) {
	db := openHookDB(t, sqlite.Options{Synchronous: "NORMAL"})
	l, err := NewDeliveryLedger(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	if _, err := NewEventDispatcher(EventDispatcherConfig{Ledger: l, Registerer: reg}); err != nil {
		t.Fatal(err)
	}
	if _, err := NewWebhookReceiver(WebhookConfig{Ledger: l, Secret: "s3cret", Registerer: reg}); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP baton_webhook_deliveries_handled_total Webhook deliveries the event dispatcher finished, by final state (handled or failed).
# TYPE baton_webhook_deliveries_handled_total counter
baton_webhook_deliveries_handled_total{state="failed"} 0
baton_webhook_deliveries_handled_total{state="handled"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "baton_webhook_deliveries_handled_total"); err != nil {
		t.Error(err)
	}
	n, err := testutil.GatherAndCount(reg, "baton_webhook_requests_total")
	if err != nil {
		t.Fatal(err)
	}
	if n != 8 {
		t.Errorf("baton_webhook_requests_total has %d series before any request, want 8 (one per outcome)", n)
	}
}

// A ?wait= request's time is the wait its client asked for: it is counted
// but kept out of the duration histogram, whose quantiles would otherwise
// say that baton takes a whole wait to answer a status.
func TestAPIWaitIsNotTimed(t *testing.T) {
	t.Parallel()
	env := newAPIEnv(t)
	v := env.submit(env.alice, "timed-1", 10)
	path := "/v1/operations/" + v.OperationID
	if r := env.do("GET", path, env.alice, nil); r.status != 200 {
		t.Fatalf("get: %d %s", r.status, r.body)
	}
	if r := env.do("GET", path+"?wait=300ms", env.alice, nil); r.status != 200 {
		t.Fatalf("wait: %d %s", r.status, r.body)
	}
	mfs, err := env.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var count uint64
	var sum, requests float64
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			route := ""
			for _, l := range m.GetLabel() {
				if l.GetName() == "route" {
					route = l.GetValue()
				}
			}
			if route != "getOperation" {
				continue
			}
			switch mf.GetName() {
			case "baton_api_request_duration_seconds":
				count, sum = m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
			case "baton_api_requests_total":
				requests += m.GetCounter().GetValue()
			}
		}
	}
	if requests != 2 {
		t.Errorf("getOperation requests counted: %v, want 2", requests)
	}
	if count != 1 || sum >= 0.3 {
		t.Errorf("getOperation durations: %d observed, %.3fs in all; want the plain GET's alone", count, sum)
	}
}
