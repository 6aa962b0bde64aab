package mergequeue

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/baton-dev/baton/schema"
)

// OnOperationFinished is the executor's OnFinished hook: it learns that an
// operation became terminal. The queue acts on its own merges (the
// github.pulls.merge operations keyed "merge:…" of webhook actors): merged,
// the pull request leaves the queue and the next head may merge; refused,
// the pull request bounces. It returns at once; the work happens on the
// queue's goroutines, one per repository, under the repository's lease.
// Outcomes the queue does not get to apply (it was stopped, baton
// crashed) are applied by the next event on the repository or the next
// reconcile, which read the operation's record.
func (q *Queue) OnOperationFinished(rec schema.Record) {
	if rec.Action != schema.ActionMerge || !strings.HasPrefix(rec.IdempotencyKey, "merge:") ||
		rec.InstallationID == 0 || rec.Actor != schema.WebhookActor(rec.InstallationID) {
		return
	}
	t, err := schema.ParseResource(rec.Resource)
	if err != nil {
		return
	}
	var p schema.MergePayload
	_ = json.Unmarshal(rec.Payload, &p) // no sha: nothing is recorded for a pull request that left
	q.fin.add(finished{inst: rec.InstallationID, owner: t.Owner, name: t.Repo, pr: t.Number,
		operationID: rec.OperationID, status: rec.Status, sha: p.SHA})
}

type finished struct {
	inst        int64
	owner, name string
	pr          int
	operationID string
	status      schema.Status
	sha         string // the head the merge named
}

// finisher applies finished operations, per repository: one goroutine for
// each repository with outcomes waiting, which ends when none are left.
type finisher struct {
	q       *Queue
	mu      sync.Mutex
	pending map[string][]finished // by repository key
	running map[string]bool
	ready   bool // the queue started: goroutines may be spawned
}

func newFinisher(q *Queue) *finisher {
	return &finisher{q: q, pending: map[string][]finished{}, running: map[string]bool{}}
}

func (f *finisher) add(op finished) {
	key := nameKey(op.owner, op.name)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pending[key] = append(f.pending[key], op)
	f.spawnLocked(key)
}

// start spawns the goroutines of outcomes that arrived before Start.
func (f *finisher) start() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ready = true
	for key := range f.pending {
		f.spawnLocked(key)
	}
}

func (f *finisher) spawnLocked(key string) {
	if !f.ready || f.running[key] {
		return
	}
	if f.q.goBackground(func(ctx context.Context) { f.work(ctx, key) }) {
		f.running[key] = true
	}
}

// work applies the outcomes of one repository until none are left.
func (f *finisher) work(ctx context.Context, key string) {
	defer func() {
		f.mu.Lock()
		delete(f.running, key)
		if len(f.pending[key]) > 0 && ctx.Err() == nil {
			f.spawnLocked(key) // arrived while this goroutine was ending
		}
		f.mu.Unlock()
	}()
	for ctx.Err() == nil {
		f.mu.Lock()
		ops := f.pending[key]
		delete(f.pending, key)
		f.mu.Unlock()
		if len(ops) == 0 {
			return
		}
		for len(ops) > 0 && ctx.Err() == nil {
			op := ops[0]
			wait, done := f.apply(ctx, op)
			if done {
				ops = ops[1:]
				continue
			}
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
			case <-t.C:
			}
		}
	}
}

// apply applies one outcome; it reports false (and the wait) when the
// repository's lease is held or was lost.
func (f *finisher) apply(ctx context.Context, op finished) (time.Duration, bool) {
	q := f.q
	trig := trigger{key: "mergequeue-operation:" + op.operationID, owner: leaseOwner("operation:" + op.operationID),
		event: "operation", action: "merge_" + string(op.status), pr: op.pr, canonical: true}
	err := q.withRepo(ctx, op.inst, op.owner, op.name, trig, func(r *run) error {
		if err := r.mergedAfterLeaving(op); err != nil {
			return err
		}
		return r.settle()
	})
	var re *RetryError
	switch {
	case err == nil:
		return 0, true
	case errors.As(err, &re):
		return re.After, false
	case ctx.Err() != nil:
		return 0, true
	}
	q.log.Error("applying a merge's outcome failed; the next event or reconcile applies it",
		zap.String(logEvent, "mergequeue.outcome_failed"), zap.String(logRepository, op.owner+"/"+op.name),
		zap.Int(logPR, op.pr), zap.String(logOperationID, op.operationID), zap.Error(err))
	return 0, true
}

// mergedAfterLeaving records the merge of a pull request that left the
// queue while its merge was running: cancelMerge asked the merge to stop,
// but a call to GitHub in flight is not interrupted, and GitHub merged it.
// The audit log's newest row of the pull request is then the leave at the
// merged head; once the merge is recorded it no longer is, so an outcome
// applied twice records it once. A pull request still in the queue is
// settle's.
func (r *run) mergedAfterLeaving(op finished) error {
	if op.status != schema.StatusSucceeded || op.sha == "" || r.st.id == 0 || r.find(op.pr) != nil {
		return nil
	}
	last, ok, err := lastAudit(r.ctx, r.q.cfg.DB, r.st.id, op.pr)
	if err != nil || !ok || last.action != AuditLeave || last.sha != op.sha {
		return err
	}
	e := &entry{pr: op.pr, sha: op.sha, mergeOperationID: op.operationID}
	r.audit(AuditMerge, e.pr, e.sha, "merged by baton: its merge was already running when it left the queue")
	r.note("#%d merged at %s after it left the queue (its merge was running)", e.pr, shortSHA(e.sha))
	r.logInfo("pull request merged after it left the queue", "mergequeue.merged", e.pr, zap.String(logOperationID, op.operationID))
	return r.status(e, "success", "Merged by the merge queue", "merged")
}
