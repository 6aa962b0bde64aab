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
	if reg != nil {
		for _, c := range []prometheus.Collector{m.finishedOps, m.durations, m.submitted, m.attempts} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

func (m *metrics) finished(rec *schema.Record) {
	m.finishedOps.WithLabelValues(rec.Action, string(rec.Outcome)).Inc()
	if rec.CompletedAt != nil {
		m.durations.WithLabelValues(rec.Action).Observe(rec.CompletedAt.Sub(rec.CreatedAt).Seconds())
	}
}
