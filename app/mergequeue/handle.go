package mergequeue

import (
	"context"
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/baton-dev/baton/schema"
)

// HandleEvent acts on one webhook delivery of the events Events lists.
// It returns nil once the delivery is handled (including every delivery
// the queue has nothing to do with, and every one whose installation is
// not the one Config.Installations says has the repository), a *RetryError when it must be handed
// over again later (the repository's lease is held; never drop it), an
// error wrapping ErrInvalidEvent for a payload it cannot use, and other
// errors for failures worth retrying with backoff (GitHub or the database
// unavailable).
//
// The delivery is handled under the repository's lease, and everything it
// changes is committed in one transaction fenced by that lease. Handling
// the same delivery again finds the operations it submitted the first
// time: their idempotency keys contain the delivery ID.
func (q *Queue) HandleEvent(ctx context.Context, ev Event) (err error) {
	result := "handled"
	defer func() {
		var re *RetryError
		switch {
		case errors.Is(err, ErrInvalidEvent):
			result = "invalid"
		case errors.As(err, &re):
			result = "retry"
		case err != nil:
			result = "error"
		}
		q.metrics.events.WithLabelValues(result).Inc()
	}()
	in, err := q.parse(ev)
	if err != nil {
		return err
	}
	if in == nil {
		result = "ignored"
		return nil
	}
	owner, name, inst, err := eventRepo(ev)
	if err != nil {
		return err
	}
	if ev.DeliveryID == "" {
		return fmt.Errorf("%w: %s without a delivery ID", ErrInvalidEvent, ev.Name)
	}
	concerns, err := q.concerns(ctx, owner, name, in)
	if err != nil {
		return err
	}
	if !concerns {
		result = "ignored"
		return nil
	}
	if q.cfg.Installations != nil {
		// The payload's installation is its word only (GitHub signs the
		// body, not the delivery ID: a body can come again, late): the
		// queue works as the installation that has the repository now.
		// An event whose installation is another, or about a repository
		// none in force has, is left to the next reconcile, which reads
		// GitHub's state.
		have, err := q.cfg.Installations.InstallationOf(ctx, owner, name)
		if err != nil && schema.ErrorCode(err) != schema.CodeForbidden && schema.ErrorCode(err) != schema.CodeNotFound {
			return fmt.Errorf("mergequeue: the installation of %s/%s: %w", owner, name, err)
		}
		if err != nil || have != inst {
			result = "ignored"
			q.log.Warn("event whose installation does not have the repository ignored", zap.String(logEvent, "mergequeue.event_ignored"),
				zap.String(logRepository, owner+"/"+name), zap.Int64(logInstallation, inst), zap.Int64("repositoryInstallation", have),
				zap.String(logDeliveryID, ev.DeliveryID), zap.String(logGitHubEvent, ev.Name), zap.String(logAction, ev.Action), zap.NamedError("refused", err))
			return nil
		}
	}
	pr := in.pr
	err = q.withRepo(ctx, inst, owner, name, deliveryTrigger(ev, pr), func(r *run) error { return r.apply(in) })
	if err != nil {
		q.log.Debug("event not handled yet", zap.String(logEvent, "mergequeue.event_deferred"), zap.String(logRepository, owner+"/"+name),
			zap.String(logDeliveryID, ev.DeliveryID), zap.String(logGitHubEvent, ev.Name), zap.String(logAction, ev.Action),
			zap.Int(logPR, pr), zap.Error(err))
	}
	return err
}

// concerns tells, from the state as it stands (a read, without the
// lease), whether an event about pull requests or commits the queue may
// hold can change anything: a check completing on a commit no pull request
// waiting for its gate is at, or a pull request outside the queue being
// closed, unlabeled or pushed to without the label, cannot, and is not
// worth taking the lease (CI reports many checks). Whoever later puts such a pull request or commit in the
// queue reads GitHub's current state then, so nothing is missed; but
// whoever holds the lease (a reconcile, a merge's outcome) may be putting
// it in from what it read before the event, and such an event waits for
// the lease then (a *RetryError). Joins and commands always take the
// lease.
func (q *Queue) concerns(ctx context.Context, owner, name string, in *intent) (bool, error) {
	switch in.kind {
	case intentJoin, intentCommand:
		return true, nil
	case intentReevaluate:
		if in.labeled {
			// Pushed to while carrying the label: its labeled delivery
			// may not have been handled yet (see reevaluate).
			return true, nil
		}
	}
	// Whoever holds the repository's lease may be changing the state from
	// what it read of GitHub before the event: a reconcile joins the pull
	// requests it found labelled when it listed them, one after another
	// (a label since removed, a pull request since closed), and a
	// reconcile or a merge's outcome moves an entry to a head whose checks
	// it read before they completed, saving it once it is done with the
	// others. An event the state as saved does not concern, handled
	// meanwhile, waits for the lease, to be applied to what the holder
	// saves. The lease is read before the state: a holder that takes it
	// after this read reads GitHub after the event's change.
	lease, err := q.cfg.Leases.Check(ctx, LeaseKey(owner, name))
	if err != nil {
		return false, fmt.Errorf("mergequeue: read the lease of %s/%s: %w", owner, name, err)
	}
	st, err := loadRepo(ctx, q.cfg.DB, nameKey(owner, name))
	if err != nil {
		return false, err
	}
	for _, e := range st.entries {
		switch in.kind {
		case intentGate:
			// A gate decided (passed, or failed and bounced) is not read
			// again until the head moves.
			if e.sha == in.sha && (e.status == StatusQueued || e.status == StatusEvaluating) {
				return true, nil
			}
		case intentReevaluate, intentRetarget:
			if e.pr == in.pr && e.status != StatusBounced {
				return true, nil
			}
		default: // leave, closed: a bounced entry is cleared too
			if e.pr == in.pr {
				return true, nil
			}
		}
	}
	if lease.Locked {
		return false, &RetryError{After: q.cfg.BusyDelay, Err: fmt.Errorf("the lease of %s/%s is held by %s, who may be changing the queue", owner, name, lease.Owner)}
	}
	return false, nil
}
