package coordinator

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// Log field keys and event names, in one place. Values are identifiers,
// durations and reasons; the coordinator has no payloads to log.
// Fencing tokens are not secrets (Check returns them to anyone who may
// read the lease) and are logged to follow a lease's life.
const (
	fieldEvent      = "event"
	fieldSubsystem  = "subsystem"
	fieldLeaseKey   = "leaseKey"
	fieldOwner      = "owner"
	fieldToken      = "fencingToken"
	fieldPrevOwner  = "previousOwner"
	fieldPrevToken  = "previousToken"
	fieldExpiredFor = "expiredFor"
	fieldTTL        = "ttl"
	fieldReason     = "reason"
	fieldRetryIn    = "retryIn"
	fieldReleased   = "released"
	fieldStale      = "stale"

	eventPreempted      = "lease.preempted"
	eventLost           = "lease.lost"
	eventRenewRetry     = "lease.renew_retry"
	eventForceReleased  = "lease.force_released"
	eventStale          = "lease.stale"
	eventReconciled     = "lease.reconciled"
	eventReconcileError = "lease.reconcile_failed"
)

// LogOwner is how a lease owner appears in a log line. Operations and the
// merge queue own leases under identifiers baton makes; an API lease is
// held by "ACTOR/OWNER", two strings a client chose (an actor may be an
// e-mail address, the CLI's default owner is user@host), so it is logged
// as a digest: the fencing token beside it says which grant it was, and
// GET /v1/leases/{key} names the owner to those allowed to see it.
func LogOwner(owner string) string {
	if !strings.Contains(owner, "/") {
		return owner
	}
	sum := sha256.Sum256([]byte(owner))
	return "api-lease:" + hex.EncodeToString(sum[:6])
}
