package mergequeue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-github/v62/github"
	"go.uber.org/zap"

	"github.com/baton-dev/baton/executor"
	"github.com/baton-dev/baton/queue"
	"github.com/baton-dev/baton/schema"
)

// apply carries out what one event asks.
func (r *run) apply(in *intent) error {
	switch in.kind {
	case intentJoin:
		if e := r.find(in.pr); e != nil && e.status == StatusBounced {
			// While the entry is bounced its label is being removed, and a
			// label or reopening may be a late delivery from before the
			// bounce. Joining again would queue the head that bounced it
			// (a push by someone who may not write, say).
			if in.labeled && in.user == "" {
				// Labelled by an App: baton, for a "/baton queue" it
				// joined already, before the bounce. A person adds the
				// label again once it is gone.
				r.note("#%d labelled by an App before it bounced; not queued", in.pr)
				break
			}
			if in.sha != "" {
				// Labelled, or reopened, at a head that is no longer the
				// pull request's: whoever did it vouched for the head it
				// was at, not for the one that bounced it. Labelled again
				// at the current head, it queues.
				pr, err := r.getPull(in.pr)
				if err != nil {
					return err
				}
				if head := pr.GetHead().GetSHA(); pr != nil && head != "" && head != in.sha {
					r.note("#%d %s at %s, before its head moved to %s and it bounced; not queued", in.pr, joinVerb(in), shortSHA(in.sha), shortSHA(head))
					break
				}
			}
		}
		if in.user != "" {
			// Labelled, or reopened carrying the label: whoever did it
			// must be able to queue it (an entry already in line stays).
			if e := r.find(in.pr); e == nil || e.status == StatusBounced {
				ok, perm, err := r.mayWrite(in.user)
				if err != nil {
					return err
				}
				if !ok {
					if err := r.refuseJoin(in.pr, in.user, perm, in.labeled); err != nil {
						return err
					}
					break
				}
			}
		}
		_, err := r.join(in.pr, "label "+r.q.cfg.Label, true)
		if err != nil {
			return err
		}
	case intentLeave:
		if err := r.unlabeled(in.pr, in.labelUnknown); err != nil {
			return err
		}
	case intentCommand:
		if err := r.command(in); err != nil {
			return err
		}
	case intentClosed:
		if err := r.closedEvent(in.pr, in.merged); err != nil {
			return err
		}
	case intentReevaluate:
		if in.labeled && in.user != "" && r.find(in.pr) == nil {
			if err := r.pushedToLabelled(in.pr, in.user); err != nil {
				return err
			}
			break
		}
		if err := r.reevaluate(in.pr, in.user); err != nil {
			return err
		}
	case intentRetarget:
		if err := r.retargetEvent(in.pr); err != nil {
			return err
		}
	case intentGate:
		for _, e := range r.active() {
			if e.sha == in.sha {
				if r.trig.pr == 0 {
					r.trig.pr = e.pr // the event log's pull request
				}
				if err := r.evaluate(e); err != nil {
					return err
				}
			}
		}
	}
	return r.settle()
}

// join puts pull request n at the end of the queue, at its current head,
// and evaluates its gate at once (its checks may have passed already). A
// pull request in the queue stays where it is (already_queued), its gate
// read again if it is not decided: a run that saved the join (checkpoint)
// may have ended before it read the gate. labeled asks that the pull
// request, as GitHub has it now, carry the label: a label or reopened
// delivery may arrive after the label was removed (GitHub does not keep
// deliveries in order, and missed ones are redelivered late). The command
// adds the label itself. It returns the pull request it read, if it
// joined.
func (r *run) join(n int, via string, labeled bool) (*github.PullRequest, error) {
	if e := r.find(n); e != nil && e.status != StatusBounced {
		r.note("#%d already_queued", n)
		return nil, r.evaluate(e)
	}
	pr, err := r.getPull(n)
	if err != nil {
		return nil, err
	}
	if pr == nil {
		r.note("#%d is not a pull request; not queued", n)
		return nil, nil
	}
	if pr.GetState() != "open" {
		r.note("#%d is %s; not queued", n, pr.GetState())
		return nil, nil
	}
	if labeled && !hasLabel(pr, r.q.cfg.Label) {
		r.note("#%d no longer carries the label; not queued", n)
		return nil, nil
	}
	return pr, r.joinPull(pr, via)
}

// joinPull puts an open pull request at the end of the queue.
func (r *run) joinPull(pr *github.PullRequest, via string) error {
	n := pr.GetNumber()
	joined := r.now.Truncate(time.Microsecond) // as the state keeps it
	if e := r.find(n); e != nil {
		r.remove(e) // bounced before; it joins again
		// A join is told from the one before by its time (merges and
		// bounce comments are keyed by it): later, even on a clock that
		// did not move.
		if !joined.After(e.queuedAt) {
			joined = e.queuedAt.Add(time.Microsecond)
		}
	}
	e := r.addEntry(pr, StatusQueued, joined)
	r.audit(AuditJoin, n, e.sha, via)
	r.note("#%d joined at %s", n, shortSHA(e.sha))
	r.logInfo("pull request joined the queue", "mergequeue.joined", n)
	// The join is saved before its gate is read: the merge and the bounce
	// comment that may follow are keyed by its time, which a run handling
	// the trigger again must find rather than make anew.
	if err := r.checkpoint(); err != nil {
		return err
	}
	return r.evaluate(e)
}

// unlabeled takes pull request n out of the queue as its label was
// removed, unless the pull request carries the label again (the delivery
// is a late one) or will: the label a "/baton queue" asked for, after
// the removal, has not been added yet (an issue's operations run in the
// order submitted). When the delivery did not say which label was removed
// (labelUnknown: a label deleted from the repository), only a pull request
// in line, which GitHub says no longer has the label, leaves.
func (r *run) unlabeled(n int, labelUnknown bool) error {
	e := r.find(n)
	if labelUnknown && (e == nil || e.status == StatusBounced) {
		return nil
	}
	if e != nil && e.status != StatusBounced {
		pr, err := r.getPull(n)
		if err != nil {
			return err
		}
		if pr != nil && pr.GetState() == "open" && hasLabel(pr, r.q.cfg.Label) {
			r.note("#%d carries the label again; stays queued", n)
			return nil
		}
		if pr != nil && pr.GetState() == "open" {
			pending, err := r.labelPending(n)
			if err != nil {
				return err
			}
			if pending {
				r.note("#%d stays queued: its label is being added", n)
				return nil
			}
		}
	}
	return r.leave(n, "label "+r.q.cfg.Label+" removed")
}

// closedEvent takes pull request n out of the queue as it was closed,
// unless it was reopened since (the delivery is a late one); one merged
// meanwhile leaves as merged.
func (r *run) closedEvent(n int, merged bool) error {
	if e := r.find(n); e != nil && e.status != StatusBounced && !merged {
		pr, err := r.getPull(n)
		if err != nil {
			return err
		}
		if pr != nil && pr.GetState() == "open" {
			r.note("#%d is open again; stays queued", n)
			return nil
		}
		merged = pr != nil && pr.GetMerged()
	}
	return r.closed(n, merged)
}

// leave takes pull request n out of the queue and replaces its position
// status with "Not in the merge queue"; a pull request not in it is left
// alone (silent success). A bounced entry is cleared. A merge submitted
// for it that has not run is cancelled (cancelMerge); one that merged
// already makes it leave as merged.
func (r *run) leave(n int, why string) error {
	e := r.find(n)
	switch {
	case e == nil:
		r.note("#%d not in the queue", n)
	case e.status == StatusBounced:
		r.remove(e)
		r.note("#%d bounced entry cleared", n)
	default:
		fate, err := r.cancelMerge(e)
		if err != nil {
			return err
		}
		if fate == mergeDone {
			return r.merged(e, "merged by baton before it left the queue ("+why+")")
		}
		r.remove(e)
		why += fate.detail()
		r.audit(AuditLeave, n, e.sha, why)
		r.note("#%d left (%s)", n, why)
		r.logInfo("pull request left the queue", "mergequeue.left", n, fate.logFields(e)...)
		return r.status(&entry{pr: n, sha: e.sha}, "success", "Not in the merge queue", "left")
	}
	return nil
}

// mergeFate is what cancelMerge found of an entry's merge.
type mergeFate int

const (
	mergeNone            mergeFate = iota // none submitted, or it ended without merging
	mergeCancelled                        // it had not run: cancelled, it never will
	mergeCancelRequested                  // running: asked to stop, but a call to GitHub in flight may still merge
	mergeDone                             // it merged the pull request
)

// detail is what the audit log adds about the merge to the change that
// cancelled it.
func (f mergeFate) detail() string { return f.detailAt("") }

// detailAt is detail naming the sha the merge was for, when sha is set
// (the pull request's head has moved on, so the audit row's own sha is
// not the merge's).
func (f mergeFate) detailAt(sha string) string {
	at := ""
	if sha != "" {
		at = " at " + shortSHA(sha)
	}
	switch f {
	case mergeCancelled:
		return "; its merge" + at + " was cancelled"
	case mergeCancelRequested:
		return "; its running merge" + at + " was asked to stop"
	}
	return ""
}

func (f mergeFate) logFields(e *entry) []zap.Field {
	switch f {
	case mergeCancelled:
		return []zap.Field{zap.String(logOperationID, e.mergeOperationID), zap.String("merge", "cancelled")}
	case mergeCancelRequested:
		return []zap.Field{zap.String(logOperationID, e.mergeOperationID), zap.String("merge", "cancellation_requested")}
	}
	return nil
}

// cancelMerge cancels e's merge operation when e leaves the queue or
// moves to a new head before the merge ended: the pull request must not
// be merged at the head it was tested at for a join that is over. Every
// try of the join at that head is looked at, recorded or not (a run that
// submitted one may have ended before it recorded it). A queued merge is
// cancelled at once and never runs; a running one is asked to stop
// (mergeCancelRequested): a call to GitHub in flight is not interrupted,
// and if it merges, OnOperationFinished records the merge (mergedAfterLeaving).
// e.mergeOperationID names the operation cancelMerge acted on.
//
// It is called before the run commits e's removal, never after, and a
// crash between the two is safe: the cancel happened and the state was not
// written, so e is still in the queue with a cancelled merge. The event is
// handed over again (the run did not succeed) and takes e out, or the
// next reconcile does (label gone, pull request closed, head moved); a
// settle meanwhile treats the cancelled merge of a pull request without
// the label as a leave (mergeFailed). The other order could crash with e
// out of the state and its merge alive, and nothing left in the state that
// names the merge for a reconcile to cancel.
func (r *run) cancelMerge(e *entry) (mergeFate, error) {
	if e.status != StatusGatePassed {
		return mergeNone, nil // no merge is submitted before the gate passed
	}
	ids, err := r.mergeOperationIDs(e)
	if err != nil {
		return mergeNone, err
	}
	fate := mergeNone
	for _, id := range ids {
		rec, err := r.q.cfg.Operations.Get(r.ctx, id)
		if errors.Is(err, schema.ErrNotFound) {
			continue
		}
		if err != nil {
			return mergeNone, fmt.Errorf("mergequeue: read merge operation: %w", err)
		}
		live := !rec.Terminal()
		if live {
			rec, err = r.q.cfg.Operations.Cancel(r.ctx, id)
			if errors.Is(err, schema.ErrAlreadyTerminal) { // it ended meanwhile: as it ended
				rec, err = r.q.cfg.Operations.Get(r.ctx, id)
			}
			if err != nil {
				return mergeNone, fmt.Errorf("mergequeue: cancel merge operation: %w", err)
			}
		}
		switch {
		case rec.Status == schema.StatusSucceeded:
			e.mergeOperationID = id
			return mergeDone, nil
		case !rec.Terminal():
			fate, e.mergeOperationID = mergeCancelRequested, id
		case live && rec.Status == schema.StatusCancelled && fate == mergeNone:
			fate, e.mergeOperationID = mergeCancelled, id
		}
	}
	return fate, nil
}

// closed takes a closed pull request out of the queue: merged (audit
// merge) or not (audit leave).
func (r *run) closed(n int, merged bool) error {
	e := r.find(n)
	if e == nil {
		return nil
	}
	if e.status == StatusBounced {
		r.remove(e)
		r.note("#%d bounced entry cleared (closed)", n)
		return nil
	}
	if merged {
		return r.merged(e, "pull request merged")
	}
	fate, err := r.cancelMerge(e)
	if err != nil {
		return err
	}
	if fate == mergeDone {
		return r.merged(e, "merged by baton before it was closed")
	}
	r.remove(e)
	r.audit(AuditLeave, n, e.sha, "pull request closed"+fate.detail())
	r.note("#%d left (closed%s)", n, fate.detail())
	r.logInfo("closed pull request left the queue", "mergequeue.left", n, fate.logFields(e)...)
	return nil
}

// merged takes a merged pull request out of the queue, and turns its
// position status into a success: "Merged by the merge queue", or
// "Merged outside the merge queue" when no merge of the queue's for its
// join at its head has run (someone else merged it).
func (r *run) merged(e *entry, detail string) error {
	byQueue, err := r.mergedByQueue(e)
	if err != nil {
		return err
	}
	r.remove(e)
	r.audit(AuditMerge, e.pr, e.sha, detail)
	r.note("#%d merged at %s", e.pr, shortSHA(e.sha))
	r.logInfo("pull request merged", "mergequeue.merged", e.pr, zap.String(logOperationID, e.mergeOperationID))
	if !byQueue {
		return r.status(e, "success", "Merged outside the merge queue", "merged", "outside")
	}
	return r.status(e, "success", "Merged by the merge queue", "merged")
}

// mergeOperationIDs names every merge operation e's join may have at its
// head: the one recorded, then each try's, recorded or not.
func (r *run) mergeOperationIDs(e *entry) ([]string, error) {
	ids := []string{}
	if e.mergeOperationID != "" {
		ids = append(ids, e.mergeOperationID)
	}
	for i := 1; i <= mergeTries; i++ {
		id, err := r.mergeOperationID(e, i)
		if err != nil {
			return nil, err
		}
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// mergedByQueue reports whether a merge operation of e's join at its head
// succeeded or is running: a pull request found merged while its merge is
// running (GitHub merged it a moment before the executor records the
// outcome; the closed delivery may be handled first) was merged by the
// queue. One whose merge is still queued, failed or was cancelled, or
// that had none (its gate had not passed, or it was not first), was
// merged by someone else.
func (r *run) mergedByQueue(e *entry) (bool, error) {
	if e.status != StatusGatePassed {
		return false, nil // no merge is submitted before the gate passed
	}
	ids, err := r.mergeOperationIDs(e)
	if err != nil {
		return false, err
	}
	for _, id := range ids {
		rec, err := r.q.cfg.Operations.Get(r.ctx, id)
		if errors.Is(err, schema.ErrNotFound) {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("mergequeue: read merge operation: %w", err)
		}
		if rec.Status == schema.StatusSucceeded || rec.Status == schema.StatusRunning {
			return true, nil
		}
	}
	return false, nil
}

// refuseJoin keeps pull request n, labelled (labeled) or reopened carrying
// the label by user, who may not write, out of the queue, and removes the
// label (a reconcile would queue it again from the label), keeping it as
// bounced until the label is gone (keepBounced).
func (r *run) refuseJoin(n int, user, perm string, labeled bool) error {
	how := "labelled"
	if labeled {
		r.note("#%d labelled by @%s (%s permission); not queued", n, user, perm)
		r.logInfo("queue label added by someone without write permission; not queued", "mergequeue.label_refused", n)
	} else {
		how = "reopened with the label"
		r.note("#%d reopened by @%s (%s permission) with the label; not queued", n, user, perm)
		r.logInfo("pull request reopened with the label by someone without write permission; not queued", "mergequeue.reopen_refused", n)
	}
	if _, err := r.submit(schema.ActionRemoveLabel, r.issueResource(n), schema.RemoveLabelPayload{Label: r.q.cfg.Label}, "unlabel", "#"+strconv.Itoa(n)); err != nil {
		return err
	}
	return r.keepBounced(n, fmt.Sprintf("%s by @%s, who has %s permission; the label is being removed", how, user, perm), false)
}

// pushAdvice ends the comment of a pull request that bounced because
// someone without write permission pushed to it, with %s for the label.
const pushAdvice = "Someone with write permission can add the `%s` label again (or comment `/baton queue`) to queue it at its new head."

// reevaluate moves pull request n's entry to its current head after new
// commits pushed by pusher: the gate starts over, the entry keeps its
// place. A pusher without write permission takes it out of the queue
// instead (a bounce): putting a pull request in the queue vouches for
// what it holds then, not for what anyone may push to it afterwards (the
// author of a pull request from a fork, say), which baton would merge
// once its checks pass. An App is asked about like a person (GitHub
// answers that it has no permission, so a push by an App bounces too): a
// fork's own workflow pushes to its branch as github-actions[bot]. An
// empty pusher (a delivery without a sender) is not asked about.
func (r *run) reevaluate(n int, pusher string) error {
	e, pr, err := r.openEntry(n)
	if e == nil || err != nil {
		return err
	}
	if pusher != "" {
		ok, perm, err := r.mayWrite(pusher)
		if err != nil {
			return err
		}
		if !ok {
			return r.pushedByOther(e, pr, pusher, perm)
		}
	}
	// Its edited delivery may be late or lost.
	if done, err := r.baseChanged(e, pr); err != nil || done {
		return err
	}
	return r.moveTo(e, pr)
}

// pushedToLabelled bounces pull request n, not in the queue but carrying
// the label, which pusher pushed to and may not write: the label was added
// at the head before the push (the push's payload carries it), and its
// delivery, handled after this one (GitHub does not keep deliveries in
// order), would queue the pusher's head, as would a reconcile from the
// label. The bounce keeps an entry, as bounced, until the label is gone:
// the late labeled delivery, at the head before, finds it and joins
// nothing.
func (r *run) pushedToLabelled(n int, pusher string) error {
	pr, err := r.getPull(n)
	if err != nil || pr == nil || pr.GetState() != "open" || !hasLabel(pr, r.q.cfg.Label) {
		return err
	}
	ok, perm, err := r.mayWrite(pusher)
	if err != nil || ok {
		return err
	}
	e := r.addEntry(pr, StatusQueued, r.now.Truncate(time.Microsecond))
	r.logInfo("labelled pull request pushed to by someone without write permission", "mergequeue.pushed_by_reader", n)
	return r.bounce(e, fmt.Sprintf("new commits were pushed by @%s, who has %s permission, after it was labelled", pusher, perm), pushAdvice)
}

// retargetEvent applies a change of pull request n's base branch, as
// GitHub has the pull request now (a late delivery whose change was undone
// changes nothing).
func (r *run) retargetEvent(n int) error {
	e, pr, err := r.openEntry(n)
	if e == nil || err != nil {
		return err
	}
	_, err = r.baseChanged(e, pr)
	return err
}

// baseChanged applies a change of e's base branch, as its pull request pr
// has it now, and reports whether it took e out of the queue. A base
// branch renamed is the same branch: GitHub retargets the open pull
// requests of a renamed branch to its new name (with pull_request edited,
// as for a change of base), and e follows it. Another branch: e bounces
// (retargeted).
func (r *run) baseChanged(e *entry, pr *github.PullRequest) (bool, error) {
	base := pr.GetBase().GetRef()
	if base == "" || e.base == "" || base == e.base {
		return false, nil
	}
	renamed, err := r.branchRenamedTo(e.base, base)
	if err != nil {
		return false, err
	}
	if renamed {
		r.logInfo("base branch renamed", "mergequeue.base_renamed", e.pr, zap.String("from", e.base), zap.String("to", base))
		e.base, e.dirty = base, true
		return false, nil
	}
	return true, r.retargeted(e, pr)
}

// maxBranchRedirects bounds the redirects branchRenamedTo follows (a
// branch renamed more than once).
const maxBranchRedirects = 5

// branchRenamedTo reports whether branch old was renamed to base: GitHub
// answers the old name of a renamed branch with a redirect to the new one
// (a branch deleted, as when the one a pull request was stacked on merged,
// is not found; one still there answers as itself).
func (r *run) branchRenamedTo(old, base string) (bool, error) {
	gh, err := r.github()
	if err != nil {
		return false, err
	}
	ctx, cancel := context.WithTimeout(r.ctx, r.q.cfg.GitHubTimeout)
	defer cancel()
	b, resp, err := gh.Repositories.GetBranch(ctx, r.owner, r.name, old, maxBranchRedirects)
	if isNotFound(resp) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read branch %s: %w", old, err)
	}
	return b.GetName() == base, nil
}

// openEntry returns pull request n's entry, unless bounced, with the pull
// request as GitHub has it; e is nil when there is nothing to change: no
// such entry, or the pull request is no longer open (its closed event
// takes it out).
func (r *run) openEntry(n int) (e *entry, pr *github.PullRequest, err error) {
	e = r.find(n)
	if e == nil || e.status == StatusBounced {
		return nil, nil, nil
	}
	if pr, err = r.getPull(n); err != nil || pr == nil || pr.GetState() != "open" {
		return nil, nil, err
	}
	return e, pr, nil
}

// retargeted bounces e, whose pull request pr now targets another base
// branch than the one it joined for (baseChanged found it so): putting a
// pull request in the queue vouches for merging it into that branch, not
// into whichever branch it is moved to afterwards (its author may
// retarget it), and the gate it passed was that branch's. A merge
// submitted meanwhile is cancelled first, as for new commits.
func (r *run) retargeted(e *entry, pr *github.PullRequest) error {
	base := pr.GetBase().GetRef()
	fate, err := r.cancelMerge(e)
	if err != nil {
		return err
	}
	if fate == mergeDone {
		return r.merged(e, "merged by baton before its base branch was changed")
	}
	old := e.base
	if head := pr.GetHead().GetSHA(); head != "" && head != e.sha {
		r.resetHead(e, head, base)
	} else {
		e.base, e.dirty = base, true
	}
	r.logInfo("pull request retargeted to another base branch", "mergequeue.retargeted", e.pr, fate.logFields(e)...)
	return r.bounce(e, fmt.Sprintf("its base branch was changed from %s to %s%s", old, base, fate.detail()), retargetAdvice)
}

// retargetAdvice ends the comment of a pull request that bounced because
// its base branch was changed.
const retargetAdvice = "Someone with write permission can add the `%s` label again (or comment `/baton queue`) to queue it for its new base branch."

// pushedByOther bounces e, whose pull request pr someone without write
// permission pushed to, at pr's current head (checked even when the entry
// is there already: a reconcile may have moved it first). A merge
// submitted at the old head is cancelled first, as moveTo does.
func (r *run) pushedByOther(e *entry, pr *github.PullRequest, pusher, perm string) error {
	fate, err := r.cancelMerge(e)
	if err != nil {
		return err
	}
	if fate == mergeDone {
		return r.merged(e, "merged by baton before its head moved")
	}
	if head := pr.GetHead().GetSHA(); head != "" && head != e.sha {
		r.resetHead(e, head, pr.GetBase().GetRef())
	}
	r.logInfo("pull request pushed to by someone without write permission", "mergequeue.pushed_by_reader", e.pr)
	return r.bounce(e, fmt.Sprintf("new commits were pushed by @%s, who has %s permission", pusher, perm), pushAdvice)
}

func (r *run) moveTo(e *entry, pr *github.PullRequest) error {
	head := pr.GetHead().GetSHA()
	if head == "" || head == e.sha {
		return nil
	}
	// The merge at the old head must not run: GitHub would refuse it (the
	// head is not the sha it names) unless the push raced it.
	fate, err := r.cancelMerge(e)
	if err != nil {
		return err
	}
	if fate == mergeDone {
		return r.merged(e, "merged by baton before its head moved")
	}
	fields := fate.logFields(e)
	old := e.sha
	r.resetHead(e, head, pr.GetBase().GetRef())
	e.status = StatusQueued
	r.audit(AuditReevaluate, e.pr, head, "new head"+fate.detailAt(old))
	r.note("#%d re-evaluated at %s%s", e.pr, shortSHA(head), fate.detail())
	r.logInfo("pull request re-evaluated at its new head", "mergequeue.reevaluated", e.pr, fields...)
	return r.evaluate(e)
}

// resetHead moves e to head on base: what its gate and merge said of the
// old head no longer holds.
func (r *run) resetHead(e *entry, head, base string) {
	e.sha, e.base = head, base
	e.gateResult, e.gateDetail, e.gateResultAt, e.mergeOperationID = "", "", time.Time{}, ""
	e.reevaluatedAt, e.dirty = r.now, true
}

// command runs "/baton queue" or "/baton dequeue" for a commenter with
// write permission; others get a reply saying why nothing happened.
func (r *run) command(in *intent) error {
	verb := "queue"
	if in.dequeue {
		verb = "dequeue"
	}
	if in.commentID > 0 {
		// A comment is acted on once, and never after a newer command of
		// the pull request: a signed delivery replayed under another
		// delivery ID (GitHub does not sign that header) would otherwise
		// queue again a pull request dequeued since, or dequeue one.
		last, err := r.lastCommand(in.pr)
		if err != nil {
			return err
		}
		if in.commentID <= last {
			r.note("#%d /baton %s ignored: comment %d is not newer than comment %d, acted on already", in.pr, verb, in.commentID, last)
			r.logInfo("merge queue command ignored: not newer than the last acted on", "mergequeue.command_stale", in.pr)
			return nil
		}
	}
	ok, perm, err := r.mayWrite(in.user)
	if err != nil {
		return err
	}
	if !ok {
		r.note("#%d /baton %s refused: commenter has %s permission", in.pr, verb, perm)
		r.logInfo("merge queue command refused", "mergequeue.command_refused", in.pr)
		body := fmt.Sprintf("@%s, `/baton %s` needs write permission on this repository; nothing was changed.", in.user, verb)
		// One reply per commenter, pull request and command: anyone may
		// comment on a public repository, and a reply to every comment
		// would let one person spend the installation's budget of
		// comments (which baton's pacing keeps under GitHub's limits) on
		// baton's replies.
		_, err := r.submitKey(refusalKey(r.owner, r.name, in.pr, verb, in.user), schema.ActionComment, r.issueResource(in.pr), schema.CommentPayload{Body: body})
		return err
	}
	if in.commentID > 0 {
		// Written when the run commits.
		r.commands = append(r.commands, commandRow{pr: in.pr, commentID: in.commentID})
	}
	if in.dequeue {
		e := r.find(in.pr)
		inLine := e != nil && e.status != StatusBounced
		if err := r.leave(in.pr, "/baton dequeue by @"+in.user); err != nil {
			return err
		}
		// The label is the queue's mark on GitHub (a reconcile re-derives
		// the queue from it): it goes too.
		if _, err := r.submit(schema.ActionRemoveLabel, r.issueResource(in.pr), schema.RemoveLabelPayload{Label: r.q.cfg.Label}, "unlabel", "#"+strconv.Itoa(in.pr)); err != nil {
			return err
		}
		// Kept as bounced until the label is gone: the removal waits its
		// turn behind the issue's other operations, and a labeled
		// delivery handled meanwhile (baton's own label for the "/baton
		// queue" before, delivered late) would otherwise join it again
		// from the label still there, and merge it. A pull request in
		// line may not carry the label yet: the "/baton queue" that
		// queued it asked for it, and that operation may not have run
		// (it runs before the removal).
		return r.keepBounced(in.pr, "dequeued by @"+in.user+"; its label is being removed", inLine)
	}
	if _, err := r.join(in.pr, "/baton queue by @"+in.user, false); err != nil {
		return err
	}
	if e := r.find(in.pr); e == nil || e.status == StatusBounced {
		// Not queued, or bounced at once (its checks had failed): the
		// bounce asked for the label's removal, and a label added after
		// it would stay on a pull request out of the queue.
		return nil
	}
	// In the queue: joined now, or already (perhaps by this command,
	// handled before by a run that saved the join and ended before it
	// asked for the label). The label is asked for even when the pull request carries it: it
	// may be one whose removal waits its turn (a bounce's, or that of a
	// label added by someone who may not write), whose unlabeled delivery
	// would take the pull request out. The issue's operations run in the
	// order submitted, so the label comes back after the removal; GitHub
	// adds a label already there as a no-op.
	_, err = r.submit(schema.ActionAddLabels, r.issueResource(in.pr), schema.AddLabelsPayload{Labels: []string{r.q.cfg.Label}}, "label", "#"+strconv.Itoa(in.pr))
	return err
}

// keepBounced keeps pull request n, not in the queue and carrying the
// label (or, with evenUnlabelled, without it too), whose removal baton
// asked for, as a bounced entry (for reason) until the label is gone:
// neither a late labeled delivery from an App nor a reconcile queues it
// from the label meanwhile.
func (r *run) keepBounced(n int, reason string, evenUnlabelled bool) error {
	if r.find(n) != nil {
		return nil
	}
	pr, err := r.getPull(n)
	if err != nil || pr == nil || pr.GetState() != "open" || (!evenUnlabelled && !hasLabel(pr, r.q.cfg.Label)) {
		return err
	}
	e := r.addEntry(pr, StatusBounced, r.now.Truncate(time.Microsecond))
	e.bounceReason = truncate(reason, 1000)
	r.note("#%d kept as bounced until its label is gone", n)
	return nil
}

// addEntry puts pull request pr, at its current head and base, at the end
// of the queue's entries with status, joined at queuedAt.
func (r *run) addEntry(pr *github.PullRequest, status string, queuedAt time.Time) *entry {
	e := &entry{pr: pr.GetNumber(), sha: pr.GetHead().GetSHA(), base: pr.GetBase().GetRef(), status: status, queuedAt: queuedAt}
	r.st.entries = append(r.st.entries, e)
	return e
}

// bounce takes e out of the queue for reason: a comment saying why, the
// label removed, a failing status, and the entry kept as bounced until its
// label is gone. advice ends the comment, with %s for the label; empty,
// it asks for a fix first.
func (r *run) bounce(e *entry, reason, advice string) error {
	e.status, e.bounceReason, e.dirty = StatusBounced, truncate(reason, 1000), true
	r.audit(AuditBounce, e.pr, e.sha, reason)
	r.note("#%d bounced: %s", e.pr, reason)
	r.log.Warn("pull request bounced from the queue", zap.String(logEvent, "mergequeue.bounced"), zap.Int(logPR, e.pr),
		zap.String(logReason, truncate(reason, 200)))
	if advice == "" {
		advice = "Fix it, then add the `%s` label again (or comment `/baton queue`) to rejoin at the end of the queue."
	}
	n := "#" + strconv.Itoa(e.pr)
	// The reason names checks, whose names are anyone's who can make a
	// check run on the head (a job's name in the pull request's own
	// workflow): in a code span they mention nobody and link nowhere in
	// the App's comment.
	body := fmt.Sprintf("baton removed this pull request from the merge queue: %s.\n\n"+advice, codeSpan(reason), r.q.cfg.Label)
	// One comment per join and head, whichever trigger bounces it: a run
	// that ended before it recorded the bounce does not comment twice.
	key := bounceKey(r.owner, r.name, e.pr, e.sha, e.queuedAt)
	if _, err := r.submitKey(key, schema.ActionComment, r.issueResource(e.pr), schema.CommentPayload{Body: truncate(body, 60000)}); err != nil {
		return err
	}
	if _, err := r.submit(schema.ActionRemoveLabel, r.issueResource(e.pr), schema.RemoveLabelPayload{Label: r.q.cfg.Label}, "unlabel", n); err != nil {
		return err
	}
	return r.status(e, "failure", "Bounced from the merge queue: "+reason, "bounced")
}

// settle bounces the entries whose gate timed out (expireGates), merges
// the head of the queue once its gate has passed, one pull request at a
// time, and applies the outcome of its merge operation: merged, the next
// head may merge; failed, the head is tried again, bounces or (if its head
// moved meanwhile) is re-evaluated. Then the position statuses follow the
// queue.
func (r *run) settle() error {
	if err := r.expireGates(); err != nil {
		return err
	}
	for range len(r.st.entries) + 2 + mergeTries {
		act := r.active()
		if len(act) == 0 || act[0].status != StatusGatePassed {
			break
		}
		head := act[0]
		rec, try, err := r.mergeOperation(head)
		if err != nil {
			return err
		}
		if !rec.Terminal() {
			break
		}
		if rec.Status == schema.StatusSucceeded {
			if err := r.merged(head, "merged by baton"); err != nil {
				return err
			}
			continue
		}
		if err := r.mergeFailed(head, rec, try); err != nil {
			return err
		}
	}
	return r.positions()
}

// mergeTries bounds the merge operations of one join at one head: a try
// whose attempts ran out on failures GitHub may not repeat (server errors,
// the network, rate limits, a suspended installation) is followed by another, up to mergeTries; then
// the pull request bounces.
const mergeTries = 3

// transientCategories are the error categories of failures that say
// nothing about the pull request: GitHub, or the way to it, failed.
var transientCategories = map[string]bool{
	executor.CategoryNetwork:            true,
	executor.CategoryTimeout:            true,
	executor.CategoryServerError:        true,
	executor.CategoryRateLimited:        true,
	executor.CategorySecondaryRateLimit: true,
	executor.CategoryPrimaryRateLimit:   true,
	executor.CategoryCancelled:          true, // a request cut short (baton stopping), not the operation cancelled
	// The installation was suspended (or GitHub refused its token) when
	// the merge ran. mergeFailed reads the pull request first, which fails
	// while GitHub still refuses the installation: the outcome waits for
	// the installation to answer again, then the merge is tried again.
	executor.CategoryInstallationUnavailable: true,
}

// failureCategory is the error category a failed operation ended on.
func failureCategory(rec schema.Record) string {
	if rec.LastErrorCategory != "" || len(rec.AttemptLog) == 0 {
		return rec.LastErrorCategory
	}
	return rec.AttemptLog[len(rec.AttemptLog)-1].ErrorCategory
}

// transientFailure reports whether a merge operation failed because GitHub
// could not be asked, not because it refused the merge.
func transientFailure(rec schema.Record) bool {
	return rec.Status == schema.StatusFailed && transientCategories[failureCategory(rec)]
}

func (r *run) mergeKey(e *entry, try int) string {
	return MergeKey(r.owner, r.name, e.pr, e.sha, e.queuedAt, try)
}

func (r *run) mergeOperationID(e *entry, try int) (string, error) {
	id, err := executor.OperationID(schema.WebhookActor(r.inst), r.mergeKey(e, try))
	if err != nil {
		return "", fmt.Errorf("mergequeue: merge operation id: %w", err)
	}
	return id, nil
}

// mergeOperation returns the current merge operation of the head, and its
// try (1 to mergeTries), submitting the first try if there is none. The
// keys name the pull request, the join and the head it was tested at,
// whoever asks: the same join at the same head never gets a second merge
// unless the one before failed.
func (r *run) mergeOperation(e *entry) (schema.Record, int, error) {
	if e.mergeOperationID != "" {
		rec, err := r.q.cfg.Operations.Get(r.ctx, e.mergeOperationID)
		if err == nil {
			try, err := r.mergeTry(e, rec.OperationID)
			return rec, try, err
		}
		if !errors.Is(err, schema.ErrNotFound) {
			return rec, 0, fmt.Errorf("mergequeue: read merge operation: %w", err)
		}
	}
	// The newest try there is: a run that submitted it may have ended
	// before it recorded it. Every try is looked at: tries are submitted
	// one after another, but an old finished one may have been pruned
	// (the server's retention) while a later one is still unfinished.
	var last schema.Record
	try := 0
	for i := 1; i <= mergeTries; i++ {
		id, err := r.mergeOperationID(e, i)
		if err != nil {
			return last, 0, err
		}
		rec, err := r.q.cfg.Operations.Get(r.ctx, id)
		if errors.Is(err, schema.ErrNotFound) {
			continue
		}
		if err != nil {
			return last, 0, fmt.Errorf("mergequeue: read merge operation: %w", err)
		}
		last, try = rec, i
	}
	if try == 0 {
		rec, err := r.submitMerge(e, 1)
		return rec, 1, err
	}
	if e.mergeOperationID != last.OperationID {
		e.mergeOperationID, e.dirty = last.OperationID, true
	}
	return last, try, nil
}

// mergeTry returns which try of e's merge operation id is; an operation
// of no try (keyed as an older baton keyed merges) counts as the first.
func (r *run) mergeTry(e *entry, id string) (int, error) {
	for i := 1; i <= mergeTries; i++ {
		want, err := r.mergeOperationID(e, i)
		if err != nil {
			return 0, err
		}
		if want == id {
			return i, nil
		}
	}
	return 1, nil
}

// submitMerge submits try number try of e's merge and makes it e's merge
// operation.
func (r *run) submitMerge(e *entry, try int) (schema.Record, error) {
	payload := schema.MergePayload{SHA: e.sha, Method: r.q.cfg.MergeMethod}
	rec, err := r.submitKey(r.mergeKey(e, try), schema.ActionMerge, r.pullResource(e.pr), payload)
	if err != nil {
		return rec, err
	}
	if e.mergeOperationID != rec.OperationID {
		e.mergeOperationID, e.dirty = rec.OperationID, true
		if try == 1 {
			r.note("#%d merge submitted at %s", e.pr, shortSHA(e.sha))
		} else {
			r.note("#%d merge submitted again at %s (try %d of %d)", e.pr, shortSHA(e.sha), try, mergeTries)
		}
		r.logInfo("merge submitted", "mergequeue.merge_submitted", e.pr, zap.String(logOperationID, rec.OperationID), zap.Int("try", try))
	}
	return rec, nil
}

// mergeFailed applies a merge operation that did not succeed, after
// reading the pull request: merged anyway (by someone else), closed, moved
// to a new head (the merge's sha was stale: re-evaluate), failed on GitHub
// or the way to it (try again, up to mergeTries), or refused as it stands
// (bounce).
func (r *run) mergeFailed(e *entry, rec schema.Record, try int) error {
	pr, err := r.getPull(e.pr)
	if err != nil {
		return err
	}
	switch {
	case pr == nil:
		r.remove(e)
		r.audit(AuditLeave, e.pr, e.sha, "pull request not found")
		return nil
	case pr.GetMerged():
		return r.merged(e, "merged outside the queue")
	case pr.GetState() != "open":
		return r.closed(e.pr, false)
	case pr.GetHead().GetSHA() != e.sha:
		return r.moveTo(e, pr)
	}
	why := rec.LastErrorMessage
	if why == "" {
		why = string(rec.Status)
	}
	switch {
	case rec.Status == schema.StatusCancelled && !hasLabel(pr, r.q.cfg.Label):
		// Cancelled as the pull request left the queue (cancelMerge), by
		// a run that ended before it recorded the leave: it leaves.
		return r.leave(e.pr, "label "+r.q.cfg.Label+" removed; its merge was cancelled")
	case rec.Status == schema.StatusCancelled:
		return r.bounce(e, "its merge operation was cancelled", "")
	case transientFailure(rec) && try < mergeTries:
		r.note("#%d merge failed on GitHub's side (%s): trying again", e.pr, failureCategory(rec))
		r.log.Warn("merge failed on GitHub's side; trying again", zap.String(logEvent, "mergequeue.merge_retried"), zap.Int(logPR, e.pr),
			zap.String(logOperationID, rec.OperationID), zap.String(executor.LogErrorCategory, failureCategory(rec)), zap.Int("try", try))
		_, err := r.submitMerge(e, try+1)
		return err
	case transientFailure(rec):
		return r.bounce(e, fmt.Sprintf("GitHub kept failing to merge it (%d tries; last: %s)", try, why),
			"This is not a problem with the pull request: add the `%s` label again (or comment `/baton queue`) to rejoin at the end of the queue.")
	}
	return r.bounce(e, "GitHub refused the merge: "+why, "")
}

// hasLabel reports whether pr carries label.
func hasLabel(pr *github.PullRequest, label string) bool {
	return slices.ContainsFunc(pr.Labels, func(l *github.Label) bool { return strings.EqualFold(l.GetName(), label) })
}

// positions keeps a pending status on each queued head saying its place:
// "1st in queue", "2nd in queue"…, the head saying it merges, or that its
// merge waits for an operator (dead-lettered).
func (r *run) positions() error {
	for i, e := range r.active() {
		desc, parts := ordinal(i+1)+" in queue", []string{strconv.Itoa(i + 1)}
		if i == 0 && e.status == StatusGatePassed {
			desc, parts = "1st in queue, merging", []string{"1", "merging"}
			if r.mergeDeadLettered(e) {
				desc, parts = deadLetteredStatus, []string{"1", "merging", "dead-lettered"}
			}
		}
		if err := r.status(e, "pending", desc, parts...); err != nil {
			return err
		}
	}
	return nil
}

// joinVerb says what made a join intent: the label added, or the pull
// request reopened carrying it.
func joinVerb(in *intent) string {
	if in.labeled {
		return "labelled"
	}
	return "reopened"
}

// deadLetteredStatus is the status of a head whose merge was dead-lettered.
const deadLetteredStatus = "1st in queue; its merge is dead-lettered: the queue waits until an operator replays or cancels it"

// mergeDeadLettered reports whether e's merge operation, not finished, is
// dead-lettered: it stays unfinished, and the queue waits on it, until an
// operator replays or cancels it. A dead letter that cannot be read is
// taken for none (the status says the head is merging, as it does without
// Config.DeadLetters).
func (r *run) mergeDeadLettered(e *entry) bool {
	if r.q.cfg.DeadLetters == nil || e.mergeOperationID == "" {
		return false
	}
	rec, err := r.q.cfg.Operations.Get(r.ctx, e.mergeOperationID)
	if err != nil || rec.Terminal() {
		return false
	}
	_, err = r.q.cfg.DeadLetters.DeadLetterOf(r.ctx, e.mergeOperationID)
	if err != nil && !errors.Is(err, queue.ErrDeadLetterNotFound) {
		r.log.Debug("reading the dead letter of a merge failed", zap.String(logEvent, "mergequeue.dead_letter_unread"),
			zap.Int(logPR, e.pr), zap.String(logOperationID, e.mergeOperationID), zap.Error(err))
	}
	return err == nil
}
