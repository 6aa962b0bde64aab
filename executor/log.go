package executor

// Log field keys, in one place so every line about an operation can be
// found by the same names. Payloads, tokens and keys are never logged.
const (
	LogSubsystem     = "subsystem"
	LogEvent         = "event"
	LogOperationID   = "operationId"
	LogCorrelationID = "correlationId"
	LogResourceType  = "resourceType"
	LogResourceID    = "resourceId"
	LogAction        = "action"
	LogAttempt       = "attempt"
	LogErrorCategory = "errorCategory"
	LogStatus        = "status"
	LogInstallation  = "installationId"
)
