// Package app is baton's GitHub App surface and its wiring: the HTTP API,
// API tokens, the webhook receiver, the installations registry, the missed
// delivery recovery, the setup flow, and the code that puts the store, the
// coordinator, the queue and the executor together into one server.
//
// # The server
//
// [NewServer] and [Server.Start] open everything `baton serve` runs, in
// dependency order, and [Server.Stop] closes it gracefully: no new requests,
// running operations finish or go back to the queue (releasing their
// leases) within the deadline. With Config.Dev the server runs a GitHub
// simulator (package app/ghsim) in-process as its GitHub.
//
// # The API
//
// [NewAPI] serves the HTTP API (api.go; the description is openapi.json,
// served at /v1/openapi.json). Errors are {"error": {"code", "message",
// "details"}}, mapped from codes to statuses in one table. API tokens
// (tokens.go) are stored as their SHA-256 only and cached for 5 s.
//
// # Webhooks
//
// The [WebhookReceiver] checks X-Hub-Signature-256 with the current or the
// previous secret, then records and deduplicates the delivery before the
// 2xx. The [EventDispatcher] hands each repository's deliveries to the
// subscribed handlers in order, with retries, RetryAfter, and resumption
// after a crash; [DeliveryKey] makes each handler's work idempotent.
// [Recovery] asks GitHub to redeliver what failed in the last three days.
//
// # Installations
//
// The [Installations] registry follows installation, installation_repositories,
// installation_target and repository events (on an installation,
// installation_repositories or installation_target event it reads the
// installation's current state from GitHub rather than trusting the
// event), and resyncs from GitHub hourly. InstallationOf
// returns forbidden for repositories baton is not installed on, or whose
// installation is suspended; a renamed repository's former names resolve
// to its installation (GitHub redirects them) until another repository
// takes them, except for the merge queue (Installations.CurrentNames).
//
// # Setup
//
// [Setup] runs the App manifest flow: it stores the credentials (mode 0600)
// in the data directory; the server runs as the App after a restart.
package app
