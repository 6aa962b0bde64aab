package coordinator

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the coordinator's Prometheus collectors. They always exist
// (so the code needs no nil checks); New registers them only when
// Config.Registerer is set.
type metrics struct {
	acquires      *prometheus.CounterVec
	renewals      *prometheus.CounterVec
	releases      *prometheus.CounterVec
	lost          prometheus.Counter
	forceReleased prometheus.Counter
}

// Result label values.
const (
	resultOK        = "ok"
	resultPreempted = "preempted"
	resultHeld      = "held"
	resultLost      = "lost"
	resultInvalid   = "invalid"
	resultError     = "error"
)

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		acquires: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "baton_coordinator_acquires_total",
			Help: "Lease acquisitions by result: ok, preempted (took over an expired lease), held, invalid, error.",
		}, []string{"result"}),
		renewals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "baton_coordinator_renewals_total",
			Help: "Lease renewals by result: ok, lost, invalid, error.",
		}, []string{"result"}),
		releases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "baton_coordinator_releases_total",
			Help: "Lease releases by result: ok, lost, invalid, error.",
		}, []string{"result"}),
		lost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "baton_coordinator_keepalive_lost_total",
			Help: "Leases whose keepalive declared them lost and cancelled their holder.",
		}),
		forceReleased: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "baton_coordinator_force_released_total",
			Help: "Dead leases force-released by Reconcile.",
		}),
	}
	// Every series exists from the start, at 0, so that an alert on the
	// increase of one (lost, error) sees its first event, which a series
	// born at 1 would hide.
	for _, r := range []string{resultOK, resultPreempted, resultHeld, resultInvalid, resultError} {
		m.acquires.WithLabelValues(r)
	}
	for _, r := range []string{resultOK, resultLost, resultInvalid, resultError} {
		m.renewals.WithLabelValues(r)
		m.releases.WithLabelValues(r)
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.acquires, m.renewals, m.releases, m.lost, m.forceReleased} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

// result classifies err for a result label.
func result(err error) string {
	switch {
	case err == nil:
		return resultOK
	case isDefinitive(err):
		return resultLost
	case errors.Is(err, ErrLeaseHeld):
		return resultHeld
	case errors.Is(err, ErrInvalidRequest):
		return resultInvalid
	}
	return resultError
}
