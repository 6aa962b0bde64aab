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
