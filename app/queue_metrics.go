package app

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/baton-dev/baton/queue"
)

// queueCollector exports the queue's counters (queue.Stats) as Prometheus
// metrics, read when /metrics is scraped.
type queueCollector struct {
	b *queue.Broker
	// deadLetterCount is the last count of the dead letters read, plus
	// one (0: never read).
	deadLetterCount atomic.Uint64

	published, publishErrors, handled, handlerSeconds, active, deadLettered, deadLetters, reconciled *prometheus.Desc
}

// deadLetterCountTimeout bounds the stream read a scrape makes to count
// the dead letters waiting; a scrape that cannot read them (NATS
// unreachable) shows the last count read rather than wait, and leaves the
// gauge out only if none was ever read.
const deadLetterCountTimeout = 2 * time.Second

func newQueueCollector(b *queue.Broker) *queueCollector {
	return &queueCollector{
		b: b,
		published: prometheus.NewDesc("baton_queue_published_messages_total",
			"Messages stored in the OPERATIONS stream, by kind.", []string{"kind"}, nil),
		publishErrors: prometheus.NewDesc("baton_queue_publish_errors_total",
			"Dispatches that failed (the reconciler publishes those operations later).", nil, nil),
		handled: prometheus.NewDesc("baton_queue_handled_messages_total",
			"Handler results, by result.", []string{"result"}, nil),
		handlerSeconds: prometheus.NewDesc("baton_queue_handler_duration_seconds_total",
			"Total time spent in the handler.", nil, nil),
		active: prometheus.NewDesc("baton_queue_active_handlers",
			"Handlers running now.", nil, nil),
		deadLettered: prometheus.NewDesc("baton_queue_dead_lettered_messages_total",
			"Operations moved to the OPERATIONS_DLQ stream.", nil, nil),
		deadLetters: prometheus.NewDesc("baton_queue_dead_letters",
			"Dead letters waiting in the OPERATIONS_DLQ stream (neither replayed nor purged): each holds its resource's later operations.", nil, nil),
		reconciled: prometheus.NewDesc("baton_queue_reconciled_operations_total",
			"The reconciler's candidates, by outcome.", []string{"outcome"}, nil),
	}
}

func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.published, c.publishErrors, c.handled, c.handlerSeconds, c.active, c.deadLettered, c.deadLetters, c.reconciled} {
		ch <- d
	}
}

func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.b.Stats()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	counter(c.published, s.Dispatched, "dispatch")
	counter(c.published, s.RetriesPublished, "retry")
	counter(c.published, s.Replayed, "replay")
	counter(c.published, s.Republished, "reconcile")
	counter(c.publishErrors, s.DispatchErrors)
	counter(c.handled, s.HandledDone, "done")
	counter(c.handled, s.HandledRetry, "retry")
	counter(c.handled, s.HandledFailed, "failed")
	ch <- prometheus.MustNewConstMetric(c.handlerSeconds, prometheus.CounterValue, s.HandlerTime.Seconds())
	ch <- prometheus.MustNewConstMetric(c.active, prometheus.GaugeValue, float64(s.ActiveHandlers))
	counter(c.deadLettered, s.DeadLettered)
	ctx, cancel := context.WithTimeout(context.Background(), deadLetterCountTimeout)
	defer cancel()
	if n, err := c.b.DeadLetterCount(ctx); err == nil {
		c.deadLetterCount.Store(n + 1)
	}
	// A count that cannot be read now (NATS unreachable) is shown as last
	// read: an alert on dead letters waiting must not resolve, nor an
	// absent() fire, for want of a read.
	if n := c.deadLetterCount.Load(); n > 0 {
		ch <- prometheus.MustNewConstMetric(c.deadLetters, prometheus.GaugeValue, float64(n-1))
	}
	counter(c.reconciled, s.ReconciledPresent, "present")
	counter(c.reconciled, s.ReconciledDeadLettered, "dead_lettered")
	counter(c.reconciled, s.ReconciledRepublished, "republished")
	counter(c.reconciled, s.ReconcileErrors, "error")
}
