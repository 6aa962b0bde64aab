package mergequeue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-github/v62/github"
	"go.uber.org/zap"

	"github.com/baton-dev/baton/coordinator"
	"github.com/baton-dev/baton/executor"
	"github.com/baton-dev/baton/schema"
)

// trigger is what a run works for: a webhook delivery, a finished
// operation or a reconcile.
type trigger struct {
	// key prefixes the idempotency keys of the operations submitted for
	// the trigger ("delivery:<guid>", as app.DeliveryKey has it).
	key string
	// owner is the lease owner.
	owner string
	// event, action, deliveryID and pr are the event log's columns.
	event      string
	action     string
	deliveryID string
	pr         int
	// canonical: the repository's name is spelled as GitHub spells it
	// (it came from GitHub), and replaces the one in the state.
	canonical bool
}

func deliveryTrigger(ev Event, pr int) trigger {
	return trigger{
		key: "delivery:" + ev.DeliveryID, owner: leaseOwner("delivery:" + ev.DeliveryID),
		event: ev.Name, action: ev.Action, deliveryID: ev.DeliveryID, pr: pr, canonical: true,
	}
}

func leaseOwner(s string) string { return truncate("mergequeue:"+s, coordinator.MaxOwnerBytes) }

// run is the work of one trigger on one repository, under its lease: it
// loads the queue, changes it in memory while it reads GitHub and submits
// operations, and commits every change in one transaction fenced by the
// lease.
type run struct {
	q     *Queue
	ctx   context.Context // ends if the lease is lost
	log   *zap.Logger
	lease *coordinator.Lease
	trig  trigger
	owner string
	name  string
	inst  int64
	key   string
	now   time.Time
	st    repoState

	deleted     []int64
	notes       []string
	audits      []auditRow
	savedAudits int          // r.audits[:savedAudits] are written (checkpoint)
	commands    []commandRow // comment commands acted on, written by commit
	reconciled  bool
	changed     bool // the repository row must be written

	gh       *github.Client
	required map[string][]requiredCheck
}

// withRepo runs fn under the repository's lease and commits what it
// changed. A lease held by another is a *RetryError; the lease is
// released when withRepo returns, whatever happened.
func (q *Queue) withRepo(ctx context.Context, inst int64, owner, name string, trig trigger, fn func(*run) error) error {
	key := LeaseKey(owner, name)
	lease, err := q.cfg.Leases.Acquire(ctx, key, trig.owner, q.cfg.LeaseTTL)
	if err != nil {
		if errors.Is(err, coordinator.ErrLeaseHeld) {
			return &RetryError{After: q.cfg.BusyDelay, Err: err}
		}
		return fmt.Errorf("mergequeue: take the lease of %s/%s: %w", owner, name, err)
	}
	defer q.release(ctx, lease)
	if p := lease.Preempted; p != nil {
		q.log.Warn("expired repository lease taken over", zap.String(logEvent, "mergequeue.lease_taken_over"),
			zap.String(logRepository, owner+"/"+name), zap.String(logLeaseOwner, coordinator.LogOwner(p.Owner)), zap.Duration("expiredFor", p.ExpiredFor))
	}
	work, stop := q.cfg.Leases.KeepAlive(ctx, lease)
	defer stop()

	r := &run{
		q: q, ctx: work, lease: lease, trig: trig, owner: owner, name: name, inst: inst,
		key: nameKey(owner, name), now: q.cfg.Clock.Now().UTC(), required: map[string][]requiredCheck{},
	}
	r.log = q.log.With(zap.String(logRepository, owner+"/"+name), zap.Int64(logInstallation, inst), zap.String(logTrigger, trig.key))
	if trig.deliveryID != "" {
		r.log = r.log.With(zap.String(logDeliveryID, trig.deliveryID))
	}
	if r.st, err = loadRepo(work, q.cfg.DB, r.key); err != nil {
		return r.retryable(ctx, err)
	}
	switch {
	case r.st.id == 0:
		// No state yet: the repository's row is written with the first
		// change, if there is one.
	case !trig.canonical:
		// The state has the name as GitHub spells it; a reconcile asked
		// for with other letter case uses that.
		if o, n, ok := splitFullName(r.st.fullName); ok {
			r.owner, r.name = o, n
		}
	}
	if r.st.id != 0 && (r.st.inst != inst || r.st.fullName != r.fullName()) {
		r.changed = true
	}
	if err := fn(r); err != nil {
		return r.retryable(ctx, err)
	}
	return r.retryable(ctx, r.commit())
}

// release gives the lease back, even when ctx has ended.
func (q *Queue) release(ctx context.Context, l *coordinator.Lease) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := q.cfg.Leases.Release(rctx, l); err != nil && !errors.Is(err, coordinator.ErrLeaseLost) {
		q.log.Warn("releasing a repository lease failed; it expires on its own", zap.String(logEvent, "mergequeue.release_failed"),
			zap.String("leaseKey", l.Key), zap.Error(err))
	}
}

// retryable turns what can only be waited out into a *RetryError: a lease
// lost while working (the work is redone from the start under a new
// lease), and a wait GitHub imposed.
func (r *run) retryable(parent context.Context, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, coordinator.ErrLeaseLost) || (r.ctx.Err() != nil && parent.Err() == nil) {
		r.log.Warn("repository lease lost while working; retrying", zap.String(logEvent, "mergequeue.lease_lost"), zap.Error(err))
		return &RetryError{After: r.q.cfg.BusyDelay, Err: err}
	}
	if c := executor.Classify(err, time.Now()); c.PauseInstallation && c.Wait > 0 {
		return &RetryError{After: c.Wait, Err: err}
	}
	return err
}

func (r *run) fullName() string { return r.owner + "/" + r.name }

// commit writes what the run changed, in one transaction fenced by the
// lease. A run that changed nothing writes nothing.
func (r *run) commit() error { return r.write(true) }

// checkpoint writes what the run changed so far, under the same fence as
// commit, but for the event log's row (commit writes it, with every note)
// and the reconcile's time (commit writes it, once the reconcile is done).
// joinPull calls it before anything keyed by the join (its merge, its
// bounce comment, both keyed by its time) is submitted: a run that ends
// after it (killed, its lease lost, an error) leaves the join saved, and
// the trigger handled again finds it, and the operations keyed by it,
// instead of joining again at another time with other keys. What it wrote
// commit does not write again.
func (r *run) checkpoint() error { return r.write(false) }

func (r *run) write(final bool) error {
	c := &change{key: r.key, fullName: r.fullName(), inst: r.inst, now: r.now, reconciled: final && r.reconciled,
		deleted: r.deleted, entries: r.st.entries, audits: r.audits[r.savedAudits:]}
	if final {
		// Only once the command's work is done: a run that ends after a
		// checkpoint leaves the comment to be acted on again, which
		// finishes it (the operations it asked for are keyed).
		c.commands = r.commands
	}
	if final && len(r.notes) > 0 {
		c.events = []logRow{{at: r.now, event: r.trig.event, action: r.trig.action, pr: r.trig.pr,
			deliveryID: r.trig.deliveryID, details: truncate(strings.Join(r.notes, "; "), 2000)}}
	}
	dirty := r.changed || (c.reconciled && r.st.id != 0) || len(c.deleted) > 0 || len(c.events) > 0 || len(c.audits) > 0 || len(c.commands) > 0 ||
		slices.ContainsFunc(c.entries, func(e *entry) bool { return e.seq == 0 || e.dirty })
	if !dirty {
		return nil
	}
	if err := r.q.cfg.Leases.Fenced(r.ctx, r.lease, c.save); err != nil {
		return fmt.Errorf("mergequeue: save the queue of %s: %w", r.fullName(), err)
	}
	for _, a := range c.audits {
		r.q.metrics.changes.WithLabelValues(a.action).Inc()
	}
	// Written: a later write of the run leaves it alone. The audit rows
	// stay in r.audits, which a reconcile reports from.
	r.st.id, r.savedAudits, r.deleted, r.changed = c.repoID, len(r.audits), nil, false
	if final {
		r.commands = nil
	}
	for _, e := range r.st.entries {
		e.dirty = false
	}
	return nil
}

// note adds to the details of the trigger's row in the event log; a run
// without notes leaves no row.
func (r *run) note(format string, args ...any) {
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
}

func (r *run) audit(action string, pr int, sha, detail string) {
	r.audits = append(r.audits, auditRow{at: r.now, action: action, pr: pr, sha: sha, detail: truncate(detail, 1000)})
}

func (r *run) logInfo(msg, event string, pr int, fields ...zap.Field) {
	r.log.Info(msg, append([]zap.Field{zap.String(logEvent, event), zap.Int(logPR, pr)}, fields...)...)
}

// find returns the entry of pull request n, bounced or not.
func (r *run) find(n int) *entry {
	for _, e := range r.st.entries {
		if e.pr == n {
			return e
		}
	}
	return nil
}

// active returns the entries in the queue proper (not bounced), in order.
func (r *run) active() []*entry {
	var out []*entry
	for _, e := range r.st.entries {
		if e.status != StatusBounced {
			out = append(out, e)
		}
	}
	return out
}

func (r *run) remove(e *entry) {
	r.st.entries = slices.DeleteFunc(r.st.entries, func(x *entry) bool { return x == e })
	if e.seq != 0 {
		r.deleted = append(r.deleted, e.seq)
	}
}

func (r *run) github() (*github.Client, error) {
	if r.gh == nil {
		gh, err := r.q.cfg.GitHub(r.inst)
		if err != nil {
			return nil, fmt.Errorf("mergequeue: GitHub client of installation %d: %w", r.inst, err)
		}
		r.gh = gh
	}
	return r.gh, nil
}

func isNotFound(resp *github.Response) bool {
	return resp != nil && resp.StatusCode == http.StatusNotFound
}

// getPull reads pull request n; nil (and no error) if there is none.
func (r *run) getPull(n int) (*github.PullRequest, error) {
	gh, err := r.github()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(r.ctx, r.q.cfg.GitHubTimeout)
	defer cancel()
	pr, resp, err := gh.PullRequests.Get(ctx, r.owner, r.name, n)
	if isNotFound(resp) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read pull request #%d: %w", n, err)
	}
	return pr, nil
}

// mayWrite reports whether user may command the queue: write, maintain or
// admin on the repository.
func (r *run) mayWrite(user string) (bool, string, error) {
	if user == "" {
		return false, "unknown user", nil
	}
	gh, err := r.github()
	if err != nil {
		return false, "", err
	}
	ctx, cancel := context.WithTimeout(r.ctx, r.q.cfg.GitHubTimeout)
	defer cancel()
	lvl, resp, err := gh.Repositories.GetPermissionLevel(ctx, r.owner, r.name, user)
	if isNotFound(resp) {
		return false, "none", nil
	}
	if err != nil {
		return false, "", fmt.Errorf("read the permission of a commenter: %w", err)
	}
	p := lvl.GetPermission() // admin | write | read | none; maintain reads as write
	return p == "admin" || p == "write", p, nil
}

// submit submits one operation for the trigger, keyed by the trigger and
// parts. The same trigger and parts always name the same operation.
func (r *run) submit(action string, res schema.Resource, payload any, parts ...string) (schema.Record, error) {
	return r.submitKey(opKey(r.trig.key, parts...), action, res, payload)
}

func (r *run) submitKey(key, action string, res schema.Resource, payload any) (schema.Record, error) {
	body, err := json.Marshal(payload)
	if err != nil {
		return schema.Record{}, fmt.Errorf("mergequeue: encode payload: %w", err)
	}
	sub := schema.Submission{IdempotencyKey: key, Action: action, Resource: res, Payload: body,
		InstallationID: r.inst, CorrelationID: truncate(r.trig.key, schema.MaxCorrelationIDChars)}
	rec, _, err := r.q.cfg.Operations.Submit(r.ctx, schema.WebhookActor(r.inst), sub)
	if errors.Is(err, schema.ErrIdempotencyConflict) {
		// The key was used with another payload (the merge method was
		// changed, say): the operation it names is the one that counts.
		if id, ok := schema.ErrorDetails(err)["operationId"].(string); ok {
			rec, err = r.q.cfg.Operations.Get(r.ctx, id)
		}
	}
	if err != nil {
		return schema.Record{}, fmt.Errorf("mergequeue: submit %s on %s: %w", action, res.Key(), err)
	}
	return rec, nil
}

func (r *run) pullResource(n int) schema.Resource {
	return schema.Resource{Type: schema.ResourcePullRequest, ID: r.fullName() + "#" + strconv.Itoa(n)}
}

func (r *run) issueResource(n int) schema.Resource {
	return schema.Resource{Type: schema.ResourceIssue, ID: r.fullName() + "#" + strconv.Itoa(n)}
}

func (r *run) commitResource(sha string) schema.Resource {
	return schema.Resource{Type: schema.ResourceCommit, ID: r.fullName() + "@" + sha}
}

// status asks for the queue's commit status on sha.
func (r *run) status(e *entry, state, desc string, parts ...string) error {
	desc = truncate(desc, 140)
	if e.postedSHA == e.sha && e.postedStatus == desc {
		return nil
	}
	if !schema.ValidSHA(e.sha) {
		return nil // nothing GitHub could put a status on
	}
	payload := schema.CreateStatusPayload{State: state, Context: r.q.cfg.StatusContext, Description: desc}
	if _, err := r.submit(schema.ActionCreateStatus, r.commitResource(e.sha), payload,
		append([]string{"status", "#" + strconv.Itoa(e.pr) + "@" + e.sha}, parts...)...); err != nil {
		return err
	}
	e.postedSHA, e.postedStatus, e.dirty = e.sha, desc, true
	return nil
}
