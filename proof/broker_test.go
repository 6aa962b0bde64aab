package proof

import (
	"testing"
	"time"
)

// TestBrokerFaults: the crash test's workload (600 operations) with baton on
// an external nats-server, which is killed with SIGKILL and restarted
// twice: once while the clients submit, once while the operations run
// (neither may come when there is nothing to do), each time away for
// longer than baton's publish timeout. Submissions made while it is away
// are accepted (some must be) and published once it is back, the
// reconciler publishing operations again; nothing accepted is lost,
// nothing applied twice. -short: 200 operations.
func TestBrokerFaults(t *testing.T) {
	sc := scenario{
		name: "broker faults", target: "nats",
		ops: 600, clients: 16, disruptions: 2, whileSubmitting: 1,
		submitTimeout: 3 * time.Minute, settleTimeout: 3 * time.Minute,
	}
	if testing.Short() {
		sc.name = "broker faults (-short)"
		sc.ops = 200
		sc.submitTimeout, sc.settleTimeout = 2*time.Minute, 2*time.Minute
	}
	runScenario(t, sc)
}
