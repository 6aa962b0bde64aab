// Package app is baton's GitHub App surface and its wiring: the HTTP API,
// API tokens, the webhook receiver, the installations registry, the missed
// delivery recovery, the setup flow, and the code that puts the store, the
// coordinator, the queue and the executor together into one server.
package app
