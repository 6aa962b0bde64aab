package mergequeue

import (
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"
)

// gateTimeoutAdvice ends the comment of a pull request whose gate timed
// out, with %s for the label.
const gateTimeoutAdvice = "A required check that never reports holds the queue (GitHub keeps a required workflow skipped by a paths filter \"Pending\"): " +
	"make it report on this head, then add the `%s` label again (or comment `/baton queue`) to rejoin at the end of the queue."

// gatePendingSince is when e's gate started waiting: when it joined, or
// when it last moved to a new head.
func gatePendingSince(e *entry) time.Time {
	if e.reevaluatedAt.After(e.queuedAt) {
		return e.reevaluatedAt
	}
	return e.queuedAt
}

// gateExpired reports whether e's gate is still undecided (queued or
// evaluating) Config.GateTimeout after it started waiting.
func (r *run) gateExpired(e *entry) bool {
	if e.status != StatusQueued && e.status != StatusEvaluating {
		return false
	}
	return !r.now.Before(gatePendingSince(e).Add(r.q.cfg.GateTimeout))
}

// expireGates bounces every entry of the queue, the head or not, whose
// gate has been pending for Config.GateTimeout: a check that never
// reports must not hold the queue, and the pull requests behind it, for
// good. The gate is read once more first, so a check that reported in a
// delivery this run did not get counts; an entry that is still pending
// then bounces through the usual path (one comment per join and head, the
// label removed, a failing status), its reason naming the checks it waits
// for and the timeout. Every run calls it (settle), so an event, a merge's
// outcome or the periodic reconcile, whichever comes first after the
// timeout, bounces the entry.
func (r *run) expireGates() error {
	for _, e := range r.active() {
		if !r.gateExpired(e) {
			continue
		}
		if err := r.evaluate(e); err != nil {
			return err
		}
		if !r.gateExpired(e) {
			continue // decided at last: passed, or failed and bounced
		}
		waited := r.now.Sub(gatePendingSince(e))
		r.logInfo("gate timed out", "mergequeue.gate_timed_out", e.pr,
			zap.Duration("gateTimeout", r.q.cfg.GateTimeout), zap.Duration("waited", waited))
		if err := r.bounce(e, gateTimeoutReason(e, r.q.cfg.GateTimeout), gateTimeoutAdvice); err != nil {
			return err
		}
	}
	return nil
}

// gateTimeoutReason is the bounce reason of an entry whose gate timed
// out: the head, the timeout and what the gate still waits for ("waiting
// for: ci (not reported)").
func gateTimeoutReason(e *entry, timeout time.Duration) string {
	detail := e.gateDetail
	if detail == "" {
		detail = "its checks were not read"
	}
	return fmt.Sprintf("the checks on %s did not pass within the gate timeout (%s); %s", shortSHA(e.sha), formatDuration(timeout), detail)
}

// formatDuration writes d without zero trailing units: 1h, 1h30m, 90s.
func formatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
