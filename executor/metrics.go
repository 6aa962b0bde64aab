package executor

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/baton-dev/baton/schema"
)

// metrics are the executor's Prometheus metrics.
type metrics struct {
	finishedOps *prometheus.CounterVec
	durations   *prometheus.HistogramVec
	submitted   *prometheus.CounterVec
	attempts    *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		finishedOps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "baton_executor_operations_finished_total",
			Help: "Operations that reached a terminal status, by action and outcome.",
		}, []string{"action", "outcome"}),
		durations: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "baton_executor_operation_duration_seconds",
			Help:    "Time from an operation's creation to its terminal status, by action.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 16),
		}, []string{"action"}),
		submitted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "baton_executor_operations_submitted_total",
			Help: "Submissions, by whether they created a new operation.",
		}, []string{"created"}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "baton_executor_attempts_total",
			Help: "Calls to GitHub that operations made (probes not counted), by action and result: ok, or the error category (server_error, rate_limited, conflict, ...).",
		}, []string{"action", "result"}),
	}
	// Every series exists from the start, at 0, so that an alert on the
	// increase of one (a failed outcome, an error category) sees its
	// first event, which a series born at 1 would hide.
	for action := range schema.Actions {
		for _, o := range []schema.Outcome{schema.OutcomeSucceeded, schema.OutcomeFailed, schema.OutcomeCancelled} {
			m.finishedOps.WithLabelValues(action, string(o))
		}
		m.durations.WithLabelValues(action)
		for _, r := range attemptResults {
			m.attempts.WithLabelValues(action, r)
		}
	}
	m.submitted.WithLabelValues("true")
	m.submitted.WithLabelValues("false")
	if reg != nil {
		for _, c := range []prometheus.Collector{m.finishedOps, m.durations, m.submitted, m.attempts} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

// attemptResults are the result labels of baton_executor_attempts_total:
// ok, or the error category of the failed call.
var attemptResults = []string{"ok",
	CategoryNetwork, CategoryTimeout, CategoryServerError, CategoryRateLimited, CategorySecondaryRateLimit,
	CategoryPrimaryRateLimit, CategoryValidation, CategoryNotFound, CategoryUnauthorized, CategoryForbidden,
	CategoryConflict, CategoryInstallationUnavailable, CategoryCancelled, CategoryInternal}

func (m *metrics) finished(rec *schema.Record) {
	m.finishedOps.WithLabelValues(rec.Action, string(rec.Outcome)).Inc()
	if rec.CompletedAt != nil {
		m.durations.WithLabelValues(rec.Action).Observe(rec.CompletedAt.Sub(rec.CreatedAt).Seconds())
	}
}
