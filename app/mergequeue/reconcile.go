package mergequeue

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/go-github/v62/github"
	"go.uber.org/zap"

	"github.com/baton-dev/baton/coordinator"
	"github.com/baton-dev/baton/executor"
	"github.com/baton-dev/baton/schema"
)

// Report is what one Reconcile did to a repository's queue.
type Report struct {
	Repository     string `json:"repository"`
	InstallationID int64  `json:"installationId"`
	// Skipped is true when the repository's lease was held (an event
	// being handled, another reconcile): nothing was done.
	Skipped    bool   `json:"skipped"`
	SkipReason string `json:"skipReason,omitempty"`
	// LeaseOwner and LeaseExpiresInSeconds describe the holder of a lease
	// that made the reconcile skip.
	LeaseOwner            string  `json:"leaseOwner,omitempty"`
	LeaseExpiresInSeconds float64 `json:"leaseExpiresInSeconds,omitempty"`
	// StaleLease is the expired lease the reconcile took over, if any (its
	// holder crashed or hung mid-event).
	StaleLease *StaleLease `json:"staleLease,omitempty"`
	// The pull requests the reconcile put in the queue, took out, found
	// merged, moved to a new head, or bounced, by number.
	Joined      []int `json:"joined"`
	Left        []int `json:"left"`
	Merged      []int `json:"merged"`
	Reevaluated []int `json:"reevaluated"`
	Bounced     []int `json:"bounced"`
	// BouncedCleared are bounced entries removed (their label is gone,
	// or the pull request closed).
	BouncedCleared []int `json:"bouncedCleared"`
	// LabelRemovals are bounced pull requests still carrying the label,
	// whose label removal was asked for again.
	LabelRemovals []int `json:"labelRemovals"`
	// Archived is true when the repository is archived: GitHub refuses
	// every change to it, and the reconcile changed nothing.
	Archived bool `json:"archived,omitempty"`
	// Entries is the length of the queue afterwards.
	Entries int `json:"entries"`
}

// StaleLease is an expired repository lease a reconcile took over.
type StaleLease struct {
	Owner             string  `json:"owner"`
	Token             int64   `json:"token"`
	ExpiredForSeconds float64 `json:"expiredForSeconds"`
	// Dead is true when it had been expired for more than
	// Config.StaleLeaseAfter: its holder is gone.
	Dead bool `json:"dead"`
}

// Reconcile repairs one repository's queue from GitHub, under the
// repository's lease: it takes over an expired lease (a holder that
// crashed mid-event), clears bounced entries whose label is gone, takes
// out pull requests that were closed, merged or unlabeled, moves entries
// to their pull request's current head, puts labeled open pull requests
// that are missing in the queue, re-reads every pending gate (bouncing
// those pending for Config.GateTimeout), applies the outcome of the head's
// merge, and rewrites the position statuses. A lease
// held by a live holder makes it skip (Report.Skipped, with the holder);
// webhook processing and reconciles never run on a repository at once.
func (q *Queue) Reconcile(ctx context.Context, installationID int64, owner, repo string) (Report, error) {
	return q.reconcile(ctx, installationID, owner, repo, false)
}

func (q *Queue) reconcile(ctx context.Context, inst int64, owner, repo string, canonical bool) (rep Report, err error) {
	defer func() {
		result := "done"
		switch {
		case err != nil:
			result = "error"
		case rep.Skipped:
			result = "skipped"
		}
		q.metrics.reconciles.WithLabelValues(result).Inc()
	}()
	rep = Report{Repository: owner + "/" + repo, InstallationID: inst, Joined: []int{}, Left: []int{}, Merged: []int{},
		Reevaluated: []int{}, Bounced: []int{}, BouncedCleared: []int{}, LabelRemovals: []int{}}
	if !schema.ValidRepository(owner, repo) {
		return rep, schema.Invalidf("%q is not a repository name", owner+"/"+repo)
	}
	if inst <= 0 {
		return rep, schema.Invalidf("installation ID %d", inst)
	}
	log := q.log.With(zap.String(logRepository, owner+"/"+repo), zap.Int64(logInstallation, inst))
	skip := func(holder string, left time.Duration) (Report, error) {
		rep.Skipped, rep.LeaseOwner, rep.LeaseExpiresInSeconds = true, holder, left.Seconds()
		rep.SkipReason = fmt.Sprintf("the repository lease is held by %s (%s left)", holder, left.Round(time.Millisecond))
		log.Info("reconcile skipped: the repository lease is held", zap.String(logEvent, "mergequeue.reconcile_skipped"),
			zap.String(logLeaseOwner, coordinator.LogOwner(holder)), zap.Duration("expiresIn", left))
		return rep, nil
	}
	st, err := q.cfg.Leases.Check(ctx, LeaseKey(owner, repo))
	if err != nil {
		return rep, fmt.Errorf("mergequeue: read the lease of %s/%s: %w", owner, repo, err)
	}
	if st.Locked {
		return skip(st.Owner, st.ExpiresIn)
	}
	id := randomID()
	trig := trigger{key: "mergequeue-reconcile:" + id, owner: leaseOwner("reconcile:" + id), event: "reconcile", canonical: canonical}
	err = q.withRepo(ctx, inst, owner, repo, trig, func(r *run) error {
		rep.Repository = r.fullName()
		return r.reconcile(&rep)
	})
	var held *coordinator.LeaseHeldError
	if errors.As(err, &held) {
		return skip(held.Owner, held.ExpiresIn)
	}
	if err != nil {
		log.Warn("reconcile failed", zap.String(logEvent, "mergequeue.reconcile_failed"), zap.Error(err))
		return rep, err
	}
	log.Info("queue reconciled", zap.String(logEvent, "mergequeue.reconciled"), zap.Int("entries", rep.Entries),
		zap.Ints("joined", rep.Joined), zap.Ints("left", rep.Left), zap.Ints("merged", rep.Merged),
		zap.Ints("reevaluated", rep.Reevaluated), zap.Ints("bounced", rep.Bounced), zap.Ints("bouncedCleared", rep.BouncedCleared))
	return rep, nil
}

func randomID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// reconcile is Reconcile's work under the lease.
func (r *run) reconcile(rep *Report) error {
	if p := r.lease.Preempted; p != nil {
		rep.StaleLease = &StaleLease{Owner: p.Owner, Token: p.Token, ExpiredForSeconds: p.ExpiredFor.Seconds(),
			Dead: p.ExpiredFor > r.q.cfg.StaleLeaseAfter}
		if rep.StaleLease.Dead {
			r.log.Warn("dead repository lease force-released", zap.String(logEvent, "mergequeue.stale_lease_released"),
				zap.String(logLeaseOwner, coordinator.LogOwner(p.Owner)), zap.Duration("expiredFor", p.ExpiredFor))
		}
		r.note("took over the lease of %s, expired for %s", p.Owner, p.ExpiredFor.Round(time.Second))
	}
	if r.st.id == 0 && !r.trig.canonical {
		if err := r.canonicalName(); err != nil {
			return err
		}
	}
	open, err := r.openPulls()
	if err != nil {
		return err
	}
	for _, pr := range open {
		if pr.GetBase().GetRepo().GetArchived() {
			// GitHub refuses every change to an archived repository: the
			// queue is left as it is until it is unarchived, rather than
			// submit, on every pass, operations GitHub refuses.
			rep.Archived, rep.Entries = true, len(r.active())
			r.log.Debug("reconcile: the repository is archived; nothing changed", zap.String(logEvent, "mergequeue.archived"))
			return nil
		}
	}
	labeled := func(pr *github.PullRequest) bool { return hasLabel(pr, r.q.cfg.Label) }
	for _, e := range slices.Clone(r.st.entries) {
		pr := open[e.pr]
		var cur *github.PullRequest // the pull request as read alone, when not listed
		if pr == nil {
			// Not on the pages listed: closed, or listed on none of them
			// (one closed while the pages were read shifts the pages
			// after it by one). GitHub's word on the pull request itself
			// decides: one still open is not taken for closed.
			var err error
			if cur, err = r.getPull(e.pr); err != nil {
				return err
			}
			if cur != nil && cur.GetState() == "open" {
				pr = cur
			}
		}
		if e.status == StatusBounced {
			if pr == nil || !labeled(pr) {
				r.remove(e)
				rep.BouncedCleared = append(rep.BouncedCleared, e.pr)
				continue
			}
			// The label removal asked for at the bounce has not happened
			// (or failed): ask again, or the label keeps saying "queued".
			// So even when the head moved since: the label is still the
			// one put there before the bounce (it cannot be added again
			// while it is there), and queueing the new head from it would
			// queue commits nobody who may write vouched for (a reader
			// pushing again).
			if _, err := r.submit(schema.ActionRemoveLabel, r.issueResource(e.pr), schema.RemoveLabelPayload{Label: r.q.cfg.Label},
				"unlabel", "#"+strconv.Itoa(e.pr)); err != nil {
				return err
			}
			rep.LabelRemovals = append(rep.LabelRemovals, e.pr)
			continue
		}
		inLine := pr != nil && labeled(pr)
		if pr != nil && !inLine {
			// The label a "/baton queue" asked for may not be there yet:
			// its addition waits its turn behind the issue's other
			// operations. The pull request keeps its place until it is
			// done; a label removed after it was added takes it out.
			var err error
			if inLine, err = r.labelPending(e.pr); err != nil {
				return err
			}
			if inLine {
				r.note("#%d stays queued: its label is being added", e.pr)
			}
		}
		if inLine {
			// Retargeted, its edited delivery missed (bounces), or its
			// base branch renamed (follows it).
			if done, err := r.baseChanged(e, pr); err != nil {
				return err
			} else if done {
				continue
			}
		}
		switch {
		case pr == nil:
			if cur != nil && cur.GetMerged() {
				if err := r.merged(e, "merged (found by reconcile)"); err != nil {
					return err
				}
				continue
			}
			fate, err := r.cancelMerge(e)
			if err != nil {
				return err
			}
			if fate == mergeDone {
				if err := r.merged(e, "merged by baton before it was closed (found by reconcile)"); err != nil {
					return err
				}
				continue
			}
			r.remove(e)
			r.audit(AuditLeave, e.pr, e.sha, "closed (found by reconcile)"+fate.detail())
		case !inLine:
			if err := r.leave(e.pr, "label "+r.q.cfg.Label+" missing (found by reconcile)"); err != nil {
				return err
			}
		case pr.GetHead().GetSHA() != e.sha:
			if err := r.moveTo(e, pr); err != nil {
				return err
			}
		default:
			if b := pr.GetBase().GetRef(); b != "" && b != e.base {
				e.base, e.dirty = b, true
			}
			if err := r.evaluate(e); err != nil {
				return err
			}
		}
	}
	numbers := make([]int, 0, len(open))
	for n := range open {
		numbers = append(numbers, n)
	}
	slices.Sort(numbers)
	for _, n := range numbers {
		if pr := open[n]; labeled(pr) && r.find(n) == nil {
			if err := r.joinPull(pr, "label "+r.q.cfg.Label+" (found by reconcile)"); err != nil {
				return err
			}
		}
	}
	if err := r.settle(); err != nil {
		return err
	}
	for _, a := range r.audits {
		switch a.action {
		case AuditJoin:
			rep.Joined = append(rep.Joined, a.pr)
		case AuditLeave:
			rep.Left = append(rep.Left, a.pr)
		case AuditMerge:
			rep.Merged = append(rep.Merged, a.pr)
		case AuditReevaluate:
			rep.Reevaluated = append(rep.Reevaluated, a.pr)
		case AuditBounce:
			rep.Bounced = append(rep.Bounced, a.pr)
		}
	}
	rep.Entries = len(r.active())
	r.reconciled = true
	if len(r.audits) > 0 || len(rep.BouncedCleared) > 0 || len(rep.LabelRemovals) > 0 {
		r.note("reconciled: %d joined, %d left, %d merged, %d re-evaluated, %d bounced, %d bounced entries cleared",
			len(rep.Joined), len(rep.Left), len(rep.Merged), len(rep.Reevaluated), len(rep.Bounced), len(rep.BouncedCleared))
	}
	return nil
}

// labelPending reports whether an addition of the queue's label to pull
// request n that baton asked for (a "/baton queue") has not finished: still
// queued (waiting its turn, or dead-lettered until an operator replays or
// cancels it) or running.
func (r *run) labelPending(n int) (bool, error) {
	for _, st := range []schema.Status{schema.StatusQueued, schema.StatusRunning} {
		f := executor.ListFilter{Status: st, Action: schema.ActionAddLabels, ResourceType: schema.ResourceIssue,
			ResourceID: r.issueResource(n).ID, Actor: schema.WebhookActor(r.inst), Limit: 500}
		for {
			recs, next, err := r.q.cfg.Operations.List(r.ctx, f)
			if err != nil {
				return false, fmt.Errorf("mergequeue: list label operations: %w", err)
			}
			for _, rec := range recs {
				var p schema.AddLabelsPayload
				if json.Unmarshal(rec.Payload, &p) == nil && slices.ContainsFunc(p.Labels, func(l string) bool { return strings.EqualFold(l, r.q.cfg.Label) }) {
					return true, nil
				}
			}
			if next == "" {
				break
			}
			f.Cursor = next
		}
	}
	return false, nil
}

// canonicalName replaces the repository's name, as a caller spelled it,
// with GitHub's spelling.
func (r *run) canonicalName() error {
	gh, err := r.github()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.ctx, r.q.cfg.GitHubTimeout)
	defer cancel()
	repo, resp, err := gh.Repositories.Get(ctx, r.owner, r.name)
	if isNotFound(resp) {
		return schema.Errorf(schema.CodeNotFound, "repository %s not found", r.fullName())
	}
	if err != nil {
		return fmt.Errorf("read repository: %w", err)
	}
	if o, n, ok := splitFullName(repo.GetFullName()); ok && nameKey(o, n) == r.key {
		r.owner, r.name = o, n
	}
	return nil
}

// openPulls lists the repository's open pull requests, by number.
func (r *run) openPulls() (map[int]*github.PullRequest, error) {
	gh, err := r.github()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(r.ctx, r.q.cfg.GitHubTimeout)
	defer cancel()
	out := map[int]*github.PullRequest{}
	opts := &github.PullRequestListOptions{State: "open", ListOptions: github.ListOptions{PerPage: 100}}
	for {
		prs, resp, err := gh.PullRequests.List(ctx, r.owner, r.name, opts)
		if err != nil {
			return nil, fmt.Errorf("list open pull requests: %w", err)
		}
		for _, pr := range prs {
			out[pr.GetNumber()] = pr
		}
		if resp.NextPage == 0 {
			return out, nil
		}
		opts.Page = resp.NextPage
	}
}

// ReconcileAll reconciles every repository the queue has state for, and
// those Config.Repositories lists (a repository without state and without
// labeled pull requests is left without state), a few at a time; a
// repository listed is reconciled as the installation listed with it, one
// known from the state only as the one Config.Installations names, and
// not at all when that says none in force has it (uninstalled, removed,
// transferred away, suspended: GitHub would refuse). A
// repository whose lease is held is skipped (its report says so). It
// returns the reports, sorted by repository, and the errors joined.
func (q *Queue) ReconcileAll(ctx context.Context) ([]Report, error) {
	state, err := knownRepos(ctx, q.cfg.DB)
	if err != nil {
		return nil, err
	}
	// The installations' repositories come first: a repository is
	// reconciled as the installation that has it now, not the one the
	// state names, which GitHub may no longer know (the App uninstalled
	// and installed again, the repository transferred).
	var known []Repository
	if q.cfg.Repositories != nil {
		more, err := q.cfg.Repositories(ctx)
		if err != nil {
			q.log.Warn("listing the repositories to reconcile failed; reconciling those with state", zap.String(logEvent, "mergequeue.list_failed"), zap.Error(err))
		}
		known = more
	}
	listed := len(known)
	known = append(known, state...)
	seen := map[string]bool{}
	var (
		mu      sync.Mutex
		reports []Report
		errs    []error
		wg      sync.WaitGroup
		sem     = make(chan struct{}, q.cfg.ReconcileConcurrency)
	)
	for i, repo := range known {
		owner, name, ok := splitFullName(repo.FullName)
		if !ok || repo.InstallationID <= 0 || seen[nameKey(owner, name)] {
			continue
		}
		seen[nameKey(owner, name)] = true
		if i >= listed && q.cfg.Installations != nil {
			// Known from the state only: ask which installation has it
			// now. None (the App uninstalled, the repository removed from
			// it or transferred away) or a suspended one: GitHub would
			// refuse every call, on every pass, so the queue is left as it
			// is until an installation has the repository again.
			inst, err := q.cfg.Installations.InstallationOf(ctx, owner, name)
			switch {
			case err == nil:
				repo.InstallationID = inst
			case schema.ErrorCode(err) == schema.CodeForbidden || schema.ErrorCode(err) == schema.CodeNotFound:
				q.log.Debug("reconcile skipped: no installation in force has the repository", zap.String(logEvent, "mergequeue.reconcile_skipped"),
					zap.String(logRepository, repo.FullName), zap.Int64(logInstallation, repo.InstallationID), zap.Error(err))
				continue
			}
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return reports, ctx.Err()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			// Names from the state and from GitHub are spelled as GitHub
			// spells them.
			rep, err := q.reconcile(ctx, repo.InstallationID, owner, name, true)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", repo.FullName, err))
				return
			}
			reports = append(reports, rep)
		}()
	}
	wg.Wait()
	slices.SortFunc(reports, func(a, b Report) int {
		return cmp.Compare(strings.ToLower(a.Repository), strings.ToLower(b.Repository))
	})
	return reports, errors.Join(errs...)
}

// reconcileLoop runs ReconcileAll at once, then every ReconcileInterval,
// each pass scheduled after the previous one finished (the second one
// interval after Start, or a lease's TTL after it when the pass at once
// found a repository's lease held). The pass at once is for a restart: what changed on
// GitHub while baton was down and whose delivery GitHub gave up on (or
// that the recovery of missed deliveries is yet to get back, or cannot:
// a downtime longer than GitHub keeps deliveries) would otherwise be shown
// and acted on as it was, for up to an interval.
func (q *Queue) reconcileLoop(ctx context.Context) {
	t := q.cfg.Clock.NewTimer(q.cfg.ReconcileInterval)
	defer t.Stop()
	first := true
	for {
		if !first {
			select {
			case <-ctx.Done():
				return
			case <-t.C():
			}
		}
		reports, err := q.ReconcileAll(ctx)
		if err != nil && ctx.Err() == nil {
			q.log.Error("reconcile pass failed for some repositories", zap.String(logEvent, "mergequeue.reconcile_failed"), zap.Error(err))
		}
		skipped := 0
		for _, r := range reports {
			if r.Skipped {
				skipped++
			}
		}
		q.log.Debug("reconcile pass done", zap.String(logEvent, "mergequeue.reconcile_pass"),
			zap.Int("repositories", len(reports)), zap.Int("skipped", skipped), zap.Bool("atStart", first))
		switch {
		case first && skipped > 0:
			// A lease live at start is, as often as not, the one of a
			// handler of the process before (a crash): the repository
			// is tried again once such a lease has expired.
			t.Reset(q.cfg.LeaseTTL + time.Second)
		case !first:
			t.Reset(q.cfg.ReconcileInterval)
		}
		first = false
	}
}
