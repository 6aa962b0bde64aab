package mergequeue_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/app/ghsim"
	"github.com/baton-dev/baton/app/mergequeue"
	"github.com/baton-dev/baton/executor"
	"github.com/baton-dev/baton/schema"
)

// A merge that failed because the installation was suspended is tried
// again once GitHub answers for the installation again: the suspension
// said nothing about the pull request, so it does not bounce ("GitHub
// refused the merge") and need not be queued again by hand.
func TestMergeFailedWhileSuspendedIsTriedAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStack(t, stackOptions{noWorkers: true})
	const repo = "suspended"
	s.repo(t, repo, 1, []string{"ci"})
	head := s.pull(t, repo, 1).HeadSHA
	if _, err := s.sim.AddCheckRun("octo", repo, ghsim.NewCheckRun{Name: "ci", HeadSHA: head, Status: "completed", Conclusion: "success"}); err != nil {
		t.Fatal(err)
	}
	if err := s.sim.AddLabel("octo", repo, 1, "baton:queue", "monalisa"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "merge submitted", func() bool { return len(s.mergeOps(t, repo, 1)) == 1 })
	first := s.mergeOps(t, repo, 1)[0]

	if err := s.sim.SuspendInstallation(ghsim.DemoInstallationID, true); err != nil {
		t.Fatal(err)
	}
	s.exec.Process(ctx, first.OperationID)
	rec, err := s.exec.Get(ctx, first.OperationID)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Status != schema.StatusFailed || rec.LastErrorCategory != executor.CategoryInstallationUnavailable {
		t.Fatalf("merge while suspended: status=%s category=%s message=%s", rec.Status, rec.LastErrorCategory, rec.LastErrorMessage)
	}
	if err := s.sim.SuspendInstallation(ghsim.DemoInstallationID, false); err != nil {
		t.Fatal(err)
	}

	// The outcome is applied by the queue as soon as it can read the pull
	// request again (here: the reconcile that follows the unsuspension).
	var next schema.Record
	waitFor(t, 15*time.Second, "a new try of the merge", func() bool {
		if rep, err := s.q.Reconcile(ctx, ghsim.DemoInstallationID, "octo", repo); err != nil || rep.Skipped {
			return false
		}
		for _, r := range s.mergeOps(t, repo, 1) {
			if r.OperationID != first.OperationID {
				next = r
				return true
			}
		}
		return len(auditOf(s.audit(t, repo), mergequeue.AuditBounce)) > 0
	})
	if b := auditOf(s.audit(t, repo), mergequeue.AuditBounce); len(b) != 0 {
		t.Fatalf("bounced: %+v", b)
	}
	s.exec.Process(ctx, next.OperationID)
	waitFor(t, 15*time.Second, "#1 merged by the queue", func() bool {
		return s.pull(t, repo, 1).Merged && len(auditOf(s.audit(t, repo), mergequeue.AuditMerge)) == 1
	})
}

// A repository whose App was uninstalled and installed again (a new
// installation ID; a transfer does the same) is reconciled as the
// installation that has it now: the queue's state still names the old
// installation, which GitHub no longer knows, and a reconcile as that one
// failed on every pass until an event of the repository came.
func TestReconcileAllFollowsTheRepositoryToItsNewInstallation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var sim atomic.Pointer[ghsim.Sim]
	s := newStack(t, stackOptions{mq: func(c *mergequeue.Config) {
		c.Repositories = simInstallations{&sim}.Repositories
	}})
	sim.Store(s.sim)
	const repo = "reinstalled"
	// No more webhooks once uninstalled: an event would carry the new
	// installation.
	queuedThenUninstalled(t, s, repo)
	const reinstalled = 2
	if _, err := s.sim.AddRepo("octo", repo, reinstalled); err != nil {
		t.Fatal(err)
	}
	head := s.pull(t, repo, 1).HeadSHA
	if _, err := s.sim.AddCheckRun("octo", repo, ghsim.NewCheckRun{Name: "ci", HeadSHA: head, Status: "completed", Conclusion: "success"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "#1 merged after a reconcile as the new installation", func() bool {
		reports, err := s.q.ReconcileAll(ctx)
		if err != nil {
			t.Fatalf("ReconcileAll: %v", err)
		}
		for _, r := range reports {
			if !r.Skipped && r.InstallationID != reinstalled {
				t.Fatalf("reconciled as installation %d: %+v", r.InstallationID, r)
			}
		}
		return s.pull(t, repo, 1).Merged
	})
}

// queuedThenUninstalled creates repository repo with pull request #1,
// queues it, stops the simulator's webhooks and uninstalls the App from
// the demo installation, so that the queue hears nothing of it.
func queuedThenUninstalled(t *testing.T, s *stack, repo string) {
	t.Helper()
	s.repo(t, repo, 1, []string{"ci"})
	if err := s.sim.AddLabel("octo", repo, 1, "baton:queue", "monalisa"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "#1 queued", func() bool { _, ok := s.entryOf(t, repo, 1); return ok })
	s.sim.SetWebhook("", "")
	if err := s.sim.DeleteInstallation(ghsim.DemoInstallationID); err != nil {
		t.Fatal(err)
	}
}

// simInstallations answers InstallationOf from the simulator, as the
// installations registry does from GitHub's webhooks: the installation
// that has the repository now, forbidden when none does.
// Until the simulator is stored (the queue reconciles as it starts, before
// the stack is returned) there is no installation.
type simInstallations struct{ sim *atomic.Pointer[ghsim.Sim] }

func (r simInstallations) installations() []ghsim.Installation {
	if sim := r.sim.Load(); sim != nil {
		return sim.Installations()
	}
	return nil
}

func (r simInstallations) InstallationOf(_ context.Context, owner, repo string) (int64, error) {
	for _, in := range r.installations() {
		for _, full := range in.Repositories {
			if strings.EqualFold(full, owner+"/"+repo) {
				if in.Suspended {
					return 0, schema.Errorf(schema.CodeForbidden, "installation %d is suspended", in.ID)
				}
				return in.ID, nil
			}
		}
	}
	return 0, schema.Errorf(schema.CodeForbidden, "baton is not installed on %s/%s", owner, repo)
}

// Repositories lists the repositories of the installations in force, as
// the server does for the merge queue's reconcile.
func (r simInstallations) Repositories(context.Context) ([]mergequeue.Repository, error) {
	var out []mergequeue.Repository
	for _, in := range r.installations() {
		for _, full := range in.Repositories {
			if !in.Suspended {
				out = append(out, mergequeue.Repository{InstallationID: in.ID, FullName: full})
			}
		}
	}
	return out, nil
}

// POST …/queue/reconcile of a repository whose App was installed again
// reconciles it as the new installation; one that no installation has any
// more is a clear 403, not a 500 from GitHub refusing the old one.
func TestReconcileRouteFollowsTheRepositoryToItsNewInstallation(t *testing.T) {
	t.Parallel()
	var sim atomic.Pointer[ghsim.Sim]
	s := newStack(t, stackOptions{noWebhooks: true, mq: func(c *mergequeue.Config) {
		c.Installations = simInstallations{&sim}
	}})
	sim.Store(s.sim)
	const repo = "reinstalled-api"
	s.repo(t, repo, 1, []string{"ci"})
	if err := s.sim.AddLabel("octo", repo, 1, "baton:queue", "monalisa"); err != nil {
		t.Fatal(err)
	}
	if err := s.q.HandleEvent(context.Background(), labelEvent(repo, 1, "labeled", "reinstalled-1")); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mergequeue.NewHandler(s.q, authorizeBearer))
	t.Cleanup(srv.Close)
	path := "/v1/repos/octo/" + repo + "/queue/reconcile"

	if err := s.sim.DeleteInstallation(ghsim.DemoInstallationID); err != nil {
		t.Fatal(err)
	}
	if a := call(t, srv, "POST", path, "good"); a.status != http.StatusForbidden || errorCode(a) != "forbidden" ||
		!strings.Contains(a.raw, "not installed") {
		t.Errorf("reconcile, uninstalled: %d %s", a.status, a.raw)
	}
	const reinstalled = 2
	if _, err := s.sim.AddRepo("octo", repo, reinstalled); err != nil {
		t.Fatal(err)
	}
	a := call(t, srv, "POST", path, "good")
	if a.status != http.StatusOK || a.body["installationId"] != float64(reinstalled) || a.body["entries"] != float64(1) {
		t.Errorf("reconcile, installed again: %d %s", a.status, a.raw)
	}
}

// A repository with a queue whose installation was removed is left alone
// by the periodic reconcile, which failed on it on every pass (GitHub
// refuses the installation): its queue waits, as it is, for the App to be
// installed again.
func TestReconcileAllLeavesAnUninstalledRepositoryAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var sim atomic.Pointer[ghsim.Sim]
	s := newStack(t, stackOptions{mq: func(c *mergequeue.Config) {
		c.Installations = simInstallations{&sim}
		c.Repositories = simInstallations{&sim}.Repositories
	}})
	sim.Store(s.sim)
	const repo = "uninstalled"
	queuedThenUninstalled(t, s, repo)
	reports, err := s.q.ReconcileAll(ctx)
	if err != nil || len(reports) != 0 {
		t.Fatalf("ReconcileAll: %+v, %v", reports, err)
	}
	if _, ok := s.entryOf(t, repo, 1); !ok {
		t.Error("#1 left the queue")
	}
}

// A pull request in the queue whose base branch is changed (its author, or
// GitHub itself when the branch it was stacked on is deleted) bounces:
// it was queued, and its gate read, for the other branch. It can be
// queued again for the new one.
func TestRetargetedPullRequestBounces(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	const repo = "retargeted"
	repoWithRelease(t, s, repo)
	if err := s.sim.AddLabel("octo", repo, 1, "baton:queue", "monalisa"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "#1 queued", func() bool { _, ok := s.entryOf(t, repo, 1); return ok })
	if err := s.sim.SetPullBase("octo", repo, 1, "release", "monalisa"); err != nil {
		t.Fatal(err)
	}
	// (The label's removal then clears the bounced entry.)
	waitFor(t, 15*time.Second, "#1 bounced, saying why", func() bool {
		b := auditOf(s.audit(t, repo), mergequeue.AuditBounce)
		return len(b) == 1 && strings.Contains(b[0].Detail, "base branch was changed from main to release") &&
			!slices.Contains(s.pull(t, repo, 1).Labels, "baton:queue")
	})
	// Its checks pass: nothing is merged into the branch nobody queued it for.
	head := s.pull(t, repo, 1).HeadSHA
	if _, err := s.sim.AddCheckRun("octo", repo, ghsim.NewCheckRun{Name: "ci", HeadSHA: head, Status: "completed", Conclusion: "success"}); err != nil {
		t.Fatal(err)
	}
	// Queued again, for release: it merges there.
	if err := s.sim.AddLabel("octo", repo, 1, "baton:queue", "monalisa"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "#1 merged into release", func() bool { return s.pull(t, repo, 1).Merged })
	if b := auditOf(s.audit(t, repo), mergequeue.AuditBounce); len(b) != 1 {
		t.Errorf("bounces: %+v", b)
	}
}

// repoWithRelease creates repository repo with pull request #1 on main
// (required check "ci") and a branch release at main's head, to retarget
// the pull request to.
func repoWithRelease(t *testing.T, s *stack, repo string) {
	t.Helper()
	s.repo(t, repo, 1, []string{"ci"})
	main, err := s.sim.Ref("octo", repo, "heads/main")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.sim.SetRef("octo", repo, "heads/release", main, ""); err != nil {
		t.Fatal(err)
	}
}

// queueThenRetarget labels #1 of repo, hands the queue that delivery
// (deliveryID) itself, and retargets #1 to release, whose delivery the
// queue is not given.
func queueThenRetarget(t *testing.T, ctx context.Context, s *stack, repo, deliveryID string) {
	t.Helper()
	if err := s.sim.AddLabel("octo", repo, 1, "baton:queue", "monalisa"); err != nil {
		t.Fatal(err)
	}
	if err := s.q.HandleEvent(ctx, labelEvent(repo, 1, "labeled", deliveryID)); err != nil {
		t.Fatal(err)
	}
	if err := s.sim.SetPullBase("octo", repo, 1, "release", "monalisa"); err != nil {
		t.Fatal(err)
	}
}

// A retargeting whose delivery never came is found by the reconcile, also
// when the pull request was pushed to as well.
func TestReconcileBouncesARetargetedPullRequest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStack(t, stackOptions{noWebhooks: true})
	const repo = "retargeted-quietly"
	repoWithRelease(t, s, repo)
	queueThenRetarget(t, ctx, s, repo, "quiet-1")
	if _, err := s.sim.PushPull("octo", repo, 1, "", "monalisa"); err != nil {
		t.Fatal(err)
	}
	rep, err := s.q.Reconcile(ctx, ghsim.DemoInstallationID, "octo", repo)
	if err != nil || !slices.Equal(rep.Bounced, []int{1}) {
		t.Fatalf("reconcile: %+v, %v", rep, err)
	}
	if e, ok := s.entryOf(t, repo, 1); !ok || e.BaseRef != "release" || !strings.Contains(e.BounceReason, "from main to release") {
		t.Errorf("entry: %+v", e)
	}
}

// An archived repository refuses every change (403 "Repository was
// archived so is read-only."): the reconcile leaves its queue as it is,
// rather than ask again, on every pass, for the removal of a bounced pull
// request's label, each time a new operation GitHub refuses. Unarchived,
// the queue is repaired.
func TestReconcileLeavesAnArchivedRepositoryAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStack(t, stackOptions{})
	const repo = "archived"
	s.repo(t, repo, 1, []string{"ci"})
	if err := s.sim.AddLabel("octo", repo, 1, "baton:queue", "monalisa"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "#1 queued", func() bool { _, ok := s.entryOf(t, repo, 1); return ok })
	if err := s.sim.ArchiveRepo("octo", repo, true, ""); err != nil {
		t.Fatal(err)
	}
	head := s.pull(t, repo, 1).HeadSHA
	if _, err := s.sim.AddCheckRun("octo", repo, ghsim.NewCheckRun{Name: "ci", HeadSHA: head, Status: "completed", Conclusion: "success"}); err != nil {
		t.Fatal(err)
	}
	// Its merge is refused: it bounces, and the bounce's changes are
	// refused too (the label stays).
	unlabels := func() int {
		recs, _, err := s.exec.List(ctx, executor.ListFilter{Action: schema.ActionRemoveLabel, ResourceType: schema.ResourceIssue,
			ResourceID: "octo/" + repo + "#1", Limit: 500})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if !r.Terminal() {
				return -1
			}
		}
		return len(recs)
	}
	waitFor(t, 15*time.Second, "#1 bounced, its label removal refused", func() bool {
		return len(auditOf(s.audit(t, repo), mergequeue.AuditBounce)) == 1 && unlabels() >= 1
	})
	before := unlabels()
	for range 3 {
		waitFor(t, 15*time.Second, "a reconcile", func() bool {
			rep, err := s.q.Reconcile(ctx, ghsim.DemoInstallationID, "octo", repo)
			if err != nil {
				t.Fatalf("reconcile: %v", err)
			}
			return !rep.Skipped
		})
	}
	waitFor(t, 15*time.Second, "operations finished", func() bool { return unlabels() >= 0 })
	if got := unlabels(); got != before {
		t.Errorf("label removals: %d before the reconciles, %d after", before, got)
	}
	if err := s.sim.ArchiveRepo("octo", repo, false, ""); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "label removed once unarchived", func() bool {
		if _, err := s.q.Reconcile(ctx, ghsim.DemoInstallationID, "octo", repo); err != nil {
			t.Fatalf("reconcile: %v", err)
		}
		return !slices.Contains(s.pull(t, repo, 1).Labels, "baton:queue")
	})
}

// A push delivered while the retargeting's delivery is late (or lost)
// bounces the pull request for its new base, rather than move it to its
// new head on the new base quietly.
func TestPushAfterAnUnseenRetargetingBounces(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStack(t, stackOptions{noWebhooks: true})
	const repo = "retargeted-then-pushed"
	repoWithRelease(t, s, repo)
	queueThenRetarget(t, ctx, s, repo, "seq-1")
	head, err := s.sim.PushPull("octo", repo, 1, "", "monalisa")
	if err != nil {
		t.Fatal(err)
	}
	body := fmt.Sprintf(`{"action":"synchronize","number":1,"pull_request":{"number":1,"state":"open","head":{"sha":%q}},`+
		`"repository":{"full_name":"octo/%s"},"installation":{"id":1},"sender":{"login":"monalisa","type":"User"}}`, head, repo)
	if err := s.q.HandleEvent(ctx, mergequeue.Event{DeliveryID: "seq-2", Name: "pull_request", Action: "synchronize", InstallationID: 1,
		Repository: "octo/" + repo, Payload: []byte(body)}); err != nil {
		t.Fatal(err)
	}
	if e, ok := s.entryOf(t, repo, 1); !ok || e.Status != mergequeue.StatusBounced || !strings.Contains(e.BounceReason, "from main to release") {
		t.Errorf("entry: %+v", e)
	}
}

// A base branch renamed (main to trunk, say) is the same branch: GitHub
// retargets its open pull requests to the new name and sends
// pull_request edited with changes.base as for a change of base, but the
// queue, its gate and the merge carry on for the branch under its new name
// rather than bounce every pull request in the queue.
func TestRenamedBaseBranchDoesNotBounce(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	const repo = "renamed-base"
	s.repo(t, repo, 1, []string{"ci"})
	if err := s.sim.AddLabel("octo", repo, 1, "baton:queue", "monalisa"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "#1 queued", func() bool { _, ok := s.entryOf(t, repo, 1); return ok })
	if err := s.sim.RenameBranch("octo", repo, "main", "trunk", "monalisa"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "#1 following trunk", func() bool {
		e, ok := s.entryOf(t, repo, 1)
		return ok && e.BaseRef == "trunk"
	})
	head := s.pull(t, repo, 1).HeadSHA
	if _, err := s.sim.AddCheckRun("octo", repo, ghsim.NewCheckRun{Name: "ci", HeadSHA: head, Status: "completed", Conclusion: "success"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "#1 merged into trunk", func() bool { return s.pull(t, repo, 1).Merged })
	if b := auditOf(s.audit(t, repo), mergequeue.AuditBounce); len(b) != 0 {
		t.Errorf("bounces: %+v", b)
	}
}

// A renaming (twice, here) whose deliveries never came is found by the
// reconcile, and by a push seen before it: neither bounces the pull
// request.
func TestReconcileAndPushFollowARenamedBaseBranch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStack(t, stackOptions{noWebhooks: true})
	const repo = "renamed-base-quietly"
	s.repo(t, repo, 2, []string{"ci"})
	for i, n := range []int{1, 2} {
		if err := s.sim.AddLabel("octo", repo, n, "baton:queue", "monalisa"); err != nil {
			t.Fatal(err)
		}
		if err := s.q.HandleEvent(ctx, labelEvent(repo, n, "labeled", fmt.Sprintf("renamed-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	// Renamed twice: the old name redirects along both.
	if err := s.sim.RenameBranch("octo", repo, "main", "trunk", "monalisa"); err != nil {
		t.Fatal(err)
	}
	if err := s.sim.RenameBranch("octo", repo, "trunk", "stable", "monalisa"); err != nil {
		t.Fatal(err)
	}
	head, err := s.sim.PushPull("octo", repo, 2, "", "monalisa")
	if err != nil {
		t.Fatal(err)
	}
	body := fmt.Sprintf(`{"action":"synchronize","number":2,"pull_request":{"number":2,"state":"open","head":{"sha":%q}},`+
		`"repository":{"full_name":"octo/%s"},"installation":{"id":1},"sender":{"login":"monalisa","type":"User"}}`, head, repo)
	if err := s.q.HandleEvent(ctx, mergequeue.Event{DeliveryID: "renamed-push", Name: "pull_request", Action: "synchronize", InstallationID: 1,
		Repository: "octo/" + repo, Payload: []byte(body)}); err != nil {
		t.Fatal(err)
	}
	if e, ok := s.entryOf(t, repo, 2); !ok || e.Status == mergequeue.StatusBounced || e.BaseRef != "stable" || e.PRSHA != head {
		t.Errorf("#2 after the push: %+v", e)
	}
	rep, err := s.q.Reconcile(ctx, ghsim.DemoInstallationID, "octo", repo)
	if err != nil || len(rep.Bounced) != 0 {
		t.Fatalf("reconcile: %+v, %v", rep, err)
	}
	if e, ok := s.entryOf(t, repo, 1); !ok || e.Status == mergequeue.StatusBounced || e.BaseRef != "stable" {
		t.Errorf("#1 after the reconcile: %+v", e)
	}
}
