package mergequeue

// Log field keys, in one place. Payloads, comment bodies, tokens and
// e-mail addresses are never logged.
const (
	logSubsystem    = "subsystem"
	logEvent        = "event" // what happened: "mergequeue.joined", …
	logRepository   = "repository"
	logPR           = "pr"
	logDeliveryID   = "deliveryId"
	logGitHubEvent  = "githubEvent"
	logAction       = "action"
	logInstallation = "installationId"
	logOperationID  = "operationId"
	logTrigger      = "trigger"
	logReason       = "reason"
	logLeaseOwner   = "leaseOwner"
)
