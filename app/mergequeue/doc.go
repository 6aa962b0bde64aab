// Package mergequeue is baton's merge queue: per repository, pull requests
// join a queue, each is tested at its own head, and baton merges them one
// at a time, in queue order, each at the head its checks passed on. It is
// built on baton's operations (every change on GitHub is an idempotent
// operation the executor carries out) and leases (every change to a
// repository's queue is made under the repository's lease).
//
// # What it owns
//
// The queue's state in baton's database (migration 0005_mergequeue.sql):
// per repository, the entries {prNumber, prSha, queuedAt, status,
// reevaluatedAt, gateResult, gateResultAt, …}, an event log (the last
// MaxEventLog events it acted on) and an audit log (the last MaxAuditLog
// changes: join, leave, reevaluate, gate_success, gate_failure, merge,
// bounce). It owns the rules that turn webhooks into changes of that state
// and into operations, the reconcile that repairs the state from GitHub,
// the HTTP routes that show it (NewHandler) and nothing else: the webhook
// receiver and ledger, the executor and the coordinator are other
// packages', reached through small interfaces (Operations, Leases).
//
// # The state machine
//
// A pull request joins when the label (Config.Label, "baton:queue") is
// added by someone with write permission (or by an App: baton adds it
// for a command), when it is reopened carrying it by someone with write
// permission, or on a "/baton queue" comment by someone with write
// permission (baton then adds the label, unless it bounced at once: the
// label is the queue's mark on GitHub, which a reconcile re-derives the
// queue from).
// A delivery is applied to the pull request as GitHub has it when the
// delivery is handled, not as the delivery says: GitHub does not keep
// deliveries in order and redelivers missed ones late, so a label (or
// reopened) delivery whose label is gone queues nothing, and a label
// removal or a close undone since (the label back, the pull request
// reopened) takes nothing out, nor does one handled while the label a
// "/baton queue" asked for is still being added (the pull request keeps
// its place). Joining a queue one is in changes nothing
// (already_queued) but reading its gate again if it is not decided. An
// entry moves:
//
//	queued ──gate read──▶ evaluating ──required checks passed──▶ gate_passed ──first in queue──▶ merge operation
//	   ▲                      │                                                                    │
//	   └── new commits ◀──────┴── (any state but bounced: re-evaluated at the new head, same place)│
//	                          ├── new commits by someone who may not write ──▶ bounced             │
//	                          └── a required check failed ──▶ bounced ◀── merge refused ───────────┤
//	                                                                                merged ──▶ leaves (audit merge)
//
// The gate is read from GitHub's current state, not from the event: the
// required checks (Config.RequiredChecks, or the base branch's protection;
// without either, every check reported on the head, at least one) must all
// have succeeded on the head (check runs: success, neutral or skipped;
// statuses: success; a name reported both as a check run and as a status
// needs both, and a check required from one App counts only that App's
// runs); one failure fails it. A gate still pending
// (queued or evaluating) Config.GateTimeout (60m, as GitHub's own merge
// queue's status check timeout; 1m to 24h, never off) after the entry
// joined or moved to a new head bounces, the head of the queue or not,
// its reason naming the timeout and the checks it waits for ("waiting
// for: ci (not reported)"): a required check that never reports (GitHub
// keeps a required workflow skipped by a paths filter "Pending") would
// otherwise hold every pull request behind it. Every run checks it
// (settle: an event, a merge's outcome, a reconcile), reading the gate
// once more first, so with no events the periodic reconcile, which visits
// every repository with state, bounces it within ReconcileInterval of the
// timeout. New commits pushed by someone without write permission on the
// repository (Apps included) bounce the entry instead of moving
// it: a join vouches for what the pull request holds then, not for what
// the author of a pull request from a fork may push to it afterwards
// (also when the pull request carried the label at the push but its
// labeled delivery was not handled yet: it bounces, and the late label,
// added at the head before, joins nothing);
// for the same reason a pull request reopened carrying the label by
// someone without write permission does not join (its label is removed,
// or a reconcile would queue it from the label, and it is kept as bounced
// until the label is gone). A label removed, "/baton
// dequeue" or the pull request closed takes it out (absent: nothing
// happens; a label deleted from the repository, whose unlabeled
// deliveries do not say which label went, takes out a pull request in
// line that GitHub says no longer has the label); "/baton dequeue" keeps it as bounced until its label is
// gone (also when the label its "/baton queue" asked for is not on it
// yet: baton's label, added later, does not queue it again). A pull request whose base branch is changed (pull_request
// edited with changes.base, or found by a reconcile) bounces: it was
// queued, and its gate read, for the branch it targeted then, and its
// author may retarget it; a base branch renamed is the same branch
// (GitHub retargets its pull requests, with the same event, and answers
// its old name with a redirect to the new one): the entry follows it. A
// pull request that leaves, or whose head moves, while its
// merge operation is submitted but not finished has that operation
// cancelled (Operations.Cancel) in the same run, before the change is
// committed, so that a crash leaves at worst the entry in the queue with
// its merge cancelled, which the redelivered event or the next reconcile
// takes out: a merge that had not started never runs; one already running
// is asked to stop, and if GitHub merged anyway the merge is recorded
// (audit merge) when its outcome arrives. The audit row of the leave (or
// re-evaluation) says the merge was cancelled. A bounce posts a comment with the reason, removes the label,
// sets a failing status, and leaves the entry as bounced until its label is
// gone.
//
// Only the first entry of the queue merges, once its gate passed: a
// github.pulls.merge operation at prSha, keyed MergeKey
// ("merge:<owner>/<repo>#<n>@<sha>:<queuedAt>", queuedAt in Unix
// microseconds), actor "github:<installation>": one join at one head is
// one merge, and a pull request that joins again after a bounce gets a new
// one. The merge's outcome comes back through OnOperationFinished (and the
// pull_request closed webhook): merged, the entry leaves and the next head
// may merge; failed because GitHub, or the way to it, failed (server
// errors, the network, rate limits, an installation suspended while the
// merge ran: its outcome is applied once GitHub answers for the
// installation again), a new try is submitted (key suffix
// ":<try>"), up to three, before the pull request bounces saying GitHub
// kept failing; refused, the pull request bounces; cancelled, it bounces
// unless its label is gone (it leaves). Either way not if its head moved
// (it is re-evaluated) or it was merged or closed meanwhile.
// The bounce comment is keyed by the pull request, head and join, so one
// bounce is one comment whichever trigger makes it. Every queued head
// carries a pending commit status (Config.StatusContext, "baton/queue")
// saying its place: "1st in queue", "2nd in queue"…; one that merged
// gets a success, "Merged by the merge queue", or "Merged outside the
// merge queue" when no merge of the queue's ran (someone else merged it).
// A head whose merge operation was dead-lettered stays first, and the
// queue waits on it, until an operator replays the dead letter or cancels
// the operation (then it bounces): with Config.DeadLetters its status says
// so ("1st in queue; its merge is dead-lettered: …") from the next run on
// the repository, the next reconcile at the latest.
//
// # Guarantees
//
//   - Every change to a repository's queue is made under the lease
//     "repo:<owner>/<name>" (lower-cased; TTL Config.LeaseTTL, kept alive
//     while working, released when done, even on error), and all the
//     changes one event makes are written in one transaction that the
//     coordinator fences with that lease: a holder that lost its lease
//     writes nothing. A join is the exception: it is saved first, in a
//     transaction fenced the same way, before its gate is read, so that
//     the merge and the bounce comment keyed by its time are found, not
//     made again under a new time, when a run that ended early (killed,
//     its lease lost, an error) is followed by the event handled again. An event that finds the lease held returns a
//     *RetryError; it is handed over again later, never dropped.
//     Repositories never wait on each other's leases.
//     Events that cannot change anything (a check completing on a commit
//     no waiting pull request is at, a pull request outside the queue
//     closed, or pushed to without the label) are told apart by a read of the state and
//     dropped without taking the lease, unless the lease is held: its
//     holder (a reconcile) may be changing the state from what it read
//     before the event, so the event waits for it (a *RetryError).
//   - Every GitHub mutation is an operation with an idempotency key: the
//     merge's names the pull request, the tested head and the join (and
//     the try); the bounce comment's the pull request, head and join; the
//     reply refusing a command to a commenter without write permission
//     names the pull request, the command and the commenter (one reply
//     however often they comment); the others' contain the trigger (the delivery ID of a webhook, the ID of a
//     finished operation, or of a reconcile run). Handling a delivery again
//     (a retry, a crash, a redelivery) finds the operations it created.
//     GitHub is only read directly (pull requests, checks, statuses,
//     branch protection, permissions).
//   - One merge at a time per repository, in queue order, each at the sha
//     its gate passed on; GitHub's own compare-and-swap on that sha refuses
//     a merge of any other head.
//   - The event and audit logs keep their newest MaxEventLog and
//     MaxAuditLog entries, in order; the trimming happens in the
//     transaction that appends.
//   - Reconcile (every Config.ReconcileInterval between Start and Stop, and
//     on demand) serializes with event handling on the same lease: one
//     that finds the lease held skips and says why. It takes over an
//     expired lease left by a crashed holder, and re-derives the queue from
//     GitHub: open pull requests carrying the label, at their current
//     heads, but for bounced ones still carrying it (their label removal
//     is asked for again, whichever head they are at now), and for pull
//     requests in line whose label a "/baton queue" asked for is not on
//     them yet (the addition waits its turn behind the other
//     operations, or is dead-lettered until an operator replays or cancels
//     it): they keep their place; a label removed after it was added takes
//     the pull request out. It changes nothing in an archived repository (GitHub refuses
//     every change to it) until it is unarchived.
//
// # Wiring
//
// Package app wires the queue; this package does not import app.
//
//	q, err := mergequeue.New(mergequeue.Config{DB: db, Leases: coord, Operations: exec, DeadLetters: broker,
//		GitHub: clients.Installation, Installations: installations,
//		Logger: log, Registerer: reg})
//	// executor.Config.OnFinished: q.OnOperationFinished
//	// the event dispatcher: subscribe app.MergeQueueHandler(q), which calls
//	// q.HandleEvent with the delivery (ID, event, action, installation,
//	// repository, payload), turning a *RetryError into app.RetryAfter and
//	// ErrInvalidEvent into app.Permanent
//	// the API: mount mergequeue.NewHandler(q, authorize) on each of
//	// mergequeue.Routes(), behind the token check
//	err = q.Start(ctx) // … q.Stop(ctx), before the database closes
//
// The App needs the permissions it already asks for (pull requests, issues
// and statuses write; checks read; administration read, for branch
// protection) and the events pull_request, issue_comment, check_run,
// check_suite and status.
//
// # Logs and metrics
//
// Log lines carry event ("mergequeue.joined", "mergequeue.bounced", …),
// repository, pr, deliveryId, installationId and operationId; never payloads,
// comment bodies, tokens or e-mail addresses. Metrics:
// baton_mergequeue_changes_total{action}, baton_mergequeue_events_total{result}
// and baton_mergequeue_reconciles_total{result}.
package mergequeue
