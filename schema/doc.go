// Package schema holds baton's domain: the operation record, its states and
// the transitions between them, validation, the public status view, error
// codes, canonical JSON, and the SQL migrations of baton's database.
//
// # The operation record
//
// An operation is one mutation someone asked baton to make on GitHub. Its
// [Record] carries who asked (the actor), what (the action, the resource and
// a JSON payload), and what became of it (status, attempts, outcome, result).
// A record moves queued → running → succeeded | failed | cancelled, or
// queued → cancelled directly; [CanTransition] is the one table of allowed
// moves. A terminal record always has CompletedAt and Outcome, and
// [Record.Validate] refuses one without them.
//
// # Validation
//
// [Submission.Validate] checks what a client sends before anything is
// stored: the idempotency key (1–255 printable characters), the action (one
// of [Actions]), the resource (type and id well-formed for that action), the
// payload (a JSON object of at most [MaxPayloadBytes], with no NUL
// character, \u0000, in any of its texts), the correlation id
// (at most 128 characters) and maxAttempts (1–10). Every failure is an
// *[Error] with code invalid_request and a message naming the field.
//
// JSON from outside (API request bodies, payloads) is decoded by
// [DecodeStrict]: field names match exactly, case included; no name appears
// twice in an object at any depth; strings are valid UTF-8; unknown fields
// are refused. encoding/json would fold case, keep the last of two equal
// names and replace invalid UTF-8, so two requests a client thinks
// different could be one, or a field could pass validation and be stored
// under another spelling.
//
// # Resources
//
// GitHub's owner and repository names are case-insensitive, so a resource
// has one canonical form ([CanonicalResource]): owner and repository in
// lower case, ref names as given (git refs are case-sensitive). Records are
// hashed and stored, and leases taken, on the canonical form only, so
// "issue:Octo/Demo#11" and "issue:octo/demo#11" are one resource with one
// lease.
//
// # Errors
//
// Errors a user can act on carry a [Code]. [ErrorCode] finds it on any error
// chain, including errors of other packages that implement
// `ErrorCode() string` (the coordinator's lease errors do), so the HTTP layer
// maps codes to statuses in one table without importing every package.
//
// # Canonical JSON
//
// [Canonical] writes JSON as RFC 8785 (JCS) specifies: keys sorted
// recursively, no insignificant white space, numbers and strings as JCS
// writes them. Operation identities are hashes of canonical JSON, so the
// same request hashes the same whatever its key order or spacing.
//
// # Migrations
//
// [Migrations] lists the versioned SQL files embedded from migrations/.
// They are applied in order when a database is opened and never edited once
// released; a change to the schema is a new file.
package schema
