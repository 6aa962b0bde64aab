package mergequeue

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the queue's Prometheus metrics.
type metrics struct {
	changes    *prometheus.CounterVec
	events     *prometheus.CounterVec
	reconciles *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "baton_mergequeue_changes_total",
			Help: "Changes of merge queues, by audit action (join, leave, reevaluate, gate_success, gate_failure, merge, bounce).",
		}, []string{"action"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "baton_mergequeue_events_total",
			Help: "Webhook deliveries given to the merge queue, by result (handled, ignored, retry, invalid, error).",
		}, []string{"result"}),
		reconciles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "baton_mergequeue_reconciles_total",
			Help: "Reconciles of a repository's merge queue, by result (done, skipped, error).",
		}, []string{"result"}),
	}
	// Every series exists from the start, at 0, so that an alert on the
	// increase of one (an error, a bounce) sees its first event, which a
	// series born at 1 would hide.
	for _, a := range []string{AuditJoin, AuditLeave, AuditReevaluate, AuditGateSuccess, AuditGateFailure, AuditMerge, AuditBounce} {
		m.changes.WithLabelValues(a)
	}
	for _, r := range []string{"handled", "ignored", "retry", "invalid", "error"} {
		m.events.WithLabelValues(r)
	}
	for _, r := range []string{"done", "skipped", "error"} {
		m.reconciles.WithLabelValues(r)
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.changes, m.events, m.reconciles} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("mergequeue: register metrics: %w", err)
			}
		}
	}
	return m, nil
}
