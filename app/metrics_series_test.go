package app

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/baton-dev/baton/app/mergequeue"
	"github.com/baton-dev/baton/internal/sqlite"
	"github.com/baton-dev/baton/schema"
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

// The merge queue's routes are API routes (in openapi.json): they are
// counted and timed in the API's metrics under their operationId, so an
// alert on the API's 5xx sees theirs too.
func TestMountedRoutesAreCounted(t *testing.T) {
	t.Parallel()
	env := newAPIEnv(t)
	env.api.HandleAuthenticatedRoutes("/v1/repos/", mergequeue.Routes(), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			env.api.WriteAPIError(w, r, errStoreUnavailable)
			return
		}
		env.api.WriteAPIError(w, r, schema.Errorf(schema.CodeNotFound, "no queue"))
	}))
	for _, rq := range []struct {
		method, path string
		want         int
	}{{"GET", "/v1/repos/octo/demo/queue", 404}, {"POST", "/v1/repos/octo/demo/queue/reconcile", 503}} {
		req, err := http.NewRequest(rq.method, env.URL+rq.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+env.alice)
		resp, err := env.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != rq.want {
			t.Fatalf("%s %s: %d, want %d", rq.method, rq.path, resp.StatusCode, rq.want)
		}
	}
	want := `
# HELP baton_api_requests_total API requests answered, by route and status class (2xx, 4xx…).
# TYPE baton_api_requests_total counter
baton_api_requests_total{code="4xx",route="getMergeQueue"} 1
baton_api_requests_total{code="5xx",route="reconcileMergeQueue"} 1
`
	mfs, err := env.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got strings.Builder
	got.WriteString("\n# HELP baton_api_requests_total API requests answered, by route and status class (2xx, 4xx…).\n# TYPE baton_api_requests_total counter\n")
	for _, mf := range mfs {
		if mf.GetName() != "baton_api_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetCounter().GetValue() == 0 {
				continue
			}
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if strings.Contains(labels["route"], "MergeQueue") {
				fmt.Fprintf(&got, "baton_api_requests_total{code=%q,route=%q} %v\n", labels["code"], labels["route"], m.GetCounter().GetValue())
			}
		}
	}
	for _, rt := range mergequeue.Routes() {
		method, pattern, _ := strings.Cut(rt, " ")
		if openAPIOperationID(method, pattern) == "unknown" {
			t.Errorf("%s has no operationId in openapi.json", rt)
		}
	}
	if got.String() != want {
		t.Errorf("merge queue routes in baton_api_requests_total:\n%s\nwant:%s", got.String(), want)
	}
}

// A fresh server's labelled counters have their failure series at 0
// before anything failed, so that rate(x[5m]) > 0 and increase() see the
// first failure, and absent() does not fire on a healthy server.
func TestServerCountersStartAtZero(t *testing.T) {
	t.Parallel()
	srv := startServer(t, Config{Dev: true})
	resp, err := http.Get(srv.URL() + "/metrics")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("metrics: %v %v", resp, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	metrics := string(b)
	for _, series := range []string{
		`baton_executor_attempts_total{action="github.pulls.merge",result="server_error"} 0`,
		`baton_executor_attempts_total{action="github.issues.comment",result="secondary_rate_limit"} 0`,
		`baton_executor_operations_finished_total{action="github.git.update_ref",outcome="failed"} 0`,
		`baton_executor_operation_duration_seconds_count{action="github.repos.create_status"} 0`,
		`baton_executor_operations_submitted_total{created="false"} 0`,
		`baton_coordinator_acquires_total{result="error"} 0`,
		`baton_coordinator_renewals_total{result="lost"} 0`,
		`baton_coordinator_releases_total{result="error"} 0`,
		`baton_mergequeue_changes_total{action="bounce"} 0`,
		`baton_mergequeue_events_total{result="error"} 0`,
		`baton_mergequeue_reconciles_total{result="error"} 0`,
	} {
		if !strings.Contains(metrics, "\n"+series+"\n") {
			t.Errorf("/metrics lacks %s", series)
		}
	}
}
