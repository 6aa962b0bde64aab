package coordinator

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
