package queue

import (
	"sync/atomic"
	"time"
)

// Stats are the queue's counters since New. The queue does not register
// metrics itself; the wiring exports these (for example as Prometheus
// CounterFunc and GaugeFunc) under the names given with each field.
type Stats struct {
	// Published counts messages stored in StreamOperations, by kind:
	// baton_queue_published_messages_total{kind="dispatch|retry|replay|reconcile"}.
	Dispatched, RetriesPublished, Replayed, Republished uint64
	// DispatchErrors counts failed dispatches (the reconciler covers them):
	// baton_queue_publish_errors_total.
	DispatchErrors uint64
	// Handled counts handler results:
	// baton_queue_handled_messages_total{result="done|retry|failed"}.
	HandledDone, HandledRetry, HandledFailed uint64
	// HandlerTime is the total time spent in the handler:
	// baton_queue_handler_duration_seconds_total (divide by the Handled
	// counts for a mean).
	HandlerTime time.Duration
	// ActiveHandlers is the number of handlers running now:
	// baton_queue_active_handlers.
	ActiveHandlers int64
	// DeadLettered counts operations moved to StreamDeadLetters:
	// baton_queue_dead_lettered_messages_total.
	DeadLettered uint64
	// Reconciled counts the reconciler's candidates by outcome:
	// baton_queue_reconciled_operations_total{outcome="present|dead_lettered|republished|error"}.
	ReconciledPresent, ReconciledDeadLettered, ReconciledRepublished, ReconcileErrors uint64
}

// counters is the live form of Stats.
type counters struct {
	dispatched, retriesPublished, replayed, republished, dispatchErrors atomic.Uint64
	handledDone, handledRetry, handledFailed                            atomic.Uint64
	handlerNanos, active                                                atomic.Int64
	deadLettered                                                        atomic.Uint64
	recPresent, recDeadLettered, recRepublished, recErrors              atomic.Uint64
}

// Stats returns a snapshot of the queue's counters.
func (b *Broker) Stats() Stats {
	c := &b.counters
	return Stats{
		Dispatched:             c.dispatched.Load(),
		RetriesPublished:       c.retriesPublished.Load(),
		Replayed:               c.replayed.Load(),
		Republished:            c.republished.Load(),
		DispatchErrors:         c.dispatchErrors.Load(),
		HandledDone:            c.handledDone.Load(),
		HandledRetry:           c.handledRetry.Load(),
		HandledFailed:          c.handledFailed.Load(),
		HandlerTime:            time.Duration(c.handlerNanos.Load()),
		ActiveHandlers:         c.active.Load(),
		DeadLettered:           c.deadLettered.Load(),
		ReconciledPresent:      c.recPresent.Load(),
		ReconciledDeadLettered: c.recDeadLettered.Load(),
		ReconciledRepublished:  c.recRepublished.Load(),
		ReconcileErrors:        c.recErrors.Load(),
	}
}
