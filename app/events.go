package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/baton-dev/baton/schema"
)

// Log field keys of the webhook, delivery, installation and setup code.
// Payloads, secrets, keys and e-mail addresses are never logged.
const (
	logKeySubsystem    = "subsystem"
	logKeyEvent        = "event"       // what happened: "webhook.accepted", …
	logKeyGitHubEvent  = "githubEvent" // X-GitHub-Event
	logKeyAction       = "action"
	logKeyDeliveryID   = "deliveryId"
	logKeyInstallation = "installationId"
	logKeyRepository   = "repository"
	logKeyHandler      = "handler"
	logKeyAttempt      = "attempt"
)

// Delivery is one webhook delivery as handlers see it: what GitHub sent,
// taken from the deliveries ledger. A delivery is handed to handlers until
// every one of them has handled it, so a handler may see the same delivery
// more than once (after a failure of its own or of another handler, or a
// crash); the work it derives must be idempotent, which DeliveryKey makes
// easy.
type Delivery struct {
	// ID is GitHub's delivery GUID (X-GitHub-Delivery), the same on every
	// redelivery.
	ID string `json:"deliveryId"`
	// Event is X-GitHub-Event: "pull_request", "installation", …
	Event string `json:"event"`
	// Action is the payload's action ("opened", "created", …), "" for
	// events without one (push, status, ping).
	Action string `json:"action,omitempty"`
	// InstallationID is the payload's installation.id, 0 when absent.
	InstallationID int64 `json:"installationId,omitempty"`
	// Repository is the payload's repository.full_name ("owner/name"),
	// "" when absent.
	Repository string `json:"repository,omitempty"`
	// ReceivedAt is when baton first recorded the delivery.
	ReceivedAt time.Time `json:"receivedAt"`
	// Attempt is 1 on the first run of the handlers on this delivery and
	// grows by one after each failed run ("retry after" runs do not count).
	Attempt int `json:"attempt"`
	// Payload is the body GitHub signed, unchanged.
	Payload []byte `json:"-"`
}

// EventHandler is what a feature implements to act on webhooks. Subscribe
// it to an EventDispatcher under a stable name.
//
// HandleEvent is called for each delivery of the events it lists, one
// delivery at a time per repository, in the order baton received them. It
// returns nil when the delivery is handled (it is not given to this handler
// again); RetryAfter(d, why) when it cannot act yet (a lease is held): the
// delivery waits, not counted as a failure, and the repository's later
// deliveries wait behind it; Permanent(err) when retrying cannot help; any
// other error is a failure, retried with backoff until the dispatcher gives
// up. The context ends when the handler's time is up or baton stops.
type EventHandler interface {
	// Events lists the X-GitHub-Event names the handler wants; "*" is
	// every event.
	Events() []string
	// HandleEvent acts on one delivery.
	HandleEvent(ctx context.Context, d Delivery) error
}

// EventHandlerFunc adapts a function and a list of events to EventHandler.
type EventHandlerFunc struct {
	// On lists the events, as EventHandler.Events.
	On []string
	// Func handles one delivery, as EventHandler.HandleEvent.
	Func func(ctx context.Context, d Delivery) error
}

// Events implements EventHandler.
func (f EventHandlerFunc) Events() []string { return f.On }

// HandleEvent implements EventHandler.
func (f EventHandlerFunc) HandleEvent(ctx context.Context, d Delivery) error { return f.Func(ctx, d) }

// RetryAfterError asks the dispatcher to hand the delivery to the handler
// again after After, without counting a failure.
type RetryAfterError struct {
	After time.Duration
	Err   error
}

func (e *RetryAfterError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("retry after %s", e.After)
	}
	return fmt.Sprintf("retry after %s: %v", e.After, e.Err)
}

func (e *RetryAfterError) Unwrap() error { return e.Err }

// RetryAfter returns the error a handler gives when it cannot act yet (a
// repository lease is held, for example): the delivery is handed to it
// again after d (at least 10ms), and the attempt is not a failure. The
// delivery stays pending in the ledger until the handler succeeds.
func RetryAfter(d time.Duration, why error) error {
	return &RetryAfterError{After: max(d, 10*time.Millisecond), Err: why}
}

// permanentError marks a handler error that retrying cannot fix.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent wraps err to say that retrying cannot help (a payload the
// handler cannot use): the handler is not given the delivery again and the
// delivery ends failed. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err was marked with Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

// DeliveryKey derives an idempotency key for work a handler does for one
// delivery: "delivery:<guid>:<part>:<part>…" (schema.DerivedKey with the
// delivery as the trigger). The delivery ID is in every key, so running a
// handler twice on the same delivery (after a retry or a crash) resolves
// to the operations it already created, while another delivery gets new
// ones. Parts name the handler and the piece of work ("mergequeue",
// "comment", "octo/app#42"). Keys that would be longer than an idempotency
// key may be (255 characters) end with the SHA-256 of their parts instead.
func DeliveryKey(d Delivery, parts ...string) string {
	return schema.DerivedKey("delivery:"+d.ID, parts...)
}

// WebhookActor is the actor of operations born from webhooks of an
// installation: "github:<installation>" (schema.WebhookActor).
func WebhookActor(installationID int64) string { return schema.WebhookActor(installationID) }
