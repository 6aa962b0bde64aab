// Package client is the Go client of baton's HTTP API: submit operations,
// follow and cancel them, take leases on resources, and manage dead
// letters. The baton CLI is built on it; other programs may import it.
//
// # Use
//
//	c, err := client.New("http://127.0.0.1:8080", client.WithToken(os.Getenv("BATON_TOKEN")))
//	op, created, err := c.Submit(ctx, client.SubmitRequest{
//		IdempotencyKey: "release-42-comment",
//		Action:         "github.issues.comment",
//		Resource:       client.Resource{Type: "issue", ID: "octo/app#42"},
//		Payload:        json.RawMessage(`{"body":"Released in v1.2"}`),
//	})
//	op, err = c.Wait(ctx, op.OperationID, 0) // until it is terminal
//
// # Errors
//
// An answer of the API other than 2xx is an *Error carrying the HTTP
// status and the API's error code, message and details (for example the
// existing operationId of an idempotency_conflict). Branch on it with
// errors.As, or with CodeOf:
//
//	if client.CodeOf(err) == client.CodeLeaseHeld { ... }
//
// Errors of the transport (connection refused, a context that ended) are
// returned as they are.
//
// # Retries
//
// Reads and Submit are sent again after a passing failure — a lost
// connection, a timeout, or an answer 429, 502, 503 or 504 — up to
// DefaultRetries times, 250 ms · 2^n apart with jitter or after the
// answer's Retry-After (WithRetries changes the count). Submit sends the
// same idempotency key each time, so a repeat that follows a lost answer
// returns the operation the first request created (created is false).
// Cancel, the lease routes, dead-letter replay and merge-queue reconcile
// are sent once: repeating them is not harmless. A server certificate the
// client does not trust is reported at once: trying again cannot mend it.
//
// # Base URL
//
// The server's URL may carry a path prefix (a reverse proxy that serves
// baton under /baton/, say): the routes' paths are appended to it.
package client
