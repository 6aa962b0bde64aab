package proof

import (
	"testing"
	"time"
)

// TestCrash: 16 clients submit 2,000 operations over 50 resources to a real
// `baton serve`, retrying while it is unreachable, against a GitHub that
// drops connections after applying requests and answers 500 and 429; the
// server is killed with SIGKILL five times, during submission and while it
// carries the operations out, and restarted on the same data directory.
// Nothing accepted is lost, nothing is applied twice, no two calls on one
// resource overlap, no lease stays held, nothing is dead-lettered.
// -short: 300 operations, two kills.
func TestCrash(t *testing.T) {
	sc := scenario{
		name: "crash test", target: "baton",
		ops: 2000, clients: 16, disruptions: 5, whileSubmitting: 3,
		submitTimeout: 4 * time.Minute, settleTimeout: 3 * time.Minute,
	}
	if testing.Short() {
		sc.name = "crash test (-short)"
		sc.ops, sc.disruptions, sc.whileSubmitting = 300, 2, 1
		sc.submitTimeout, sc.settleTimeout = 2*time.Minute, 2*time.Minute
	}
	runScenario(t, sc)
}
