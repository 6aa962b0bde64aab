package mergequeue_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-github/v62/github"

	"github.com/baton-dev/baton/app/ghsim"
	"github.com/baton-dev/baton/app/mergequeue"
	"github.com/baton-dev/baton/coordinator"
	"github.com/baton-dev/baton/schema"
)

// captured waits for the simulator's delivery of event and action sent
// by sender ("": by an App, baton's own), and returns it as the queue
// would be handed it again, under a new delivery ID (a late or replayed
// copy).
func (s *stack) captured(t *testing.T, repo, event, action, sender string) mergequeue.Event {
	t.Helper()
	var ev mergequeue.Event
	waitFor(t, 30*time.Second, event+" "+action+" by "+sender+" delivered", func() bool {
		for _, d := range s.sim.Deliveries() {
			var p struct {
				Sender struct {
					Login string `json:"login"`
					Type  string `json:"type"`
				} `json:"sender"`
				Repository struct {
					FullName string `json:"full_name"`
				} `json:"repository"`
			}
			if d.Event == event && d.Action == action && json.Unmarshal(d.Payload, &p) == nil &&
				(p.Sender.Login == sender || sender == "" && p.Sender.Type == "Bot") && p.Repository.FullName == "octo/"+repo {
				ev = mergequeue.Event{DeliveryID: "late-" + d.GUID, Name: d.Event, Action: d.Action,
					InstallationID: d.InstallationID, Repository: "octo/" + repo, Payload: d.Payload}
				return true
			}
		}
		return false
	})
	return ev
}

// holdIssue holds pull request n's issue lease: baton's comments and
// label changes on it wait until it is released.
func (s *stack) holdIssue(t *testing.T, repo string, n int) *coordinator.Lease {
	t.Helper()
	res := schema.Resource{Type: schema.ResourceIssue, ID: "octo/" + repo + "#" + strconv.Itoa(n)}
	l, err := s.coord.Acquire(context.Background(), res.Key(), "test-holds-the-issue", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// labelDeliveries counts the labeled and unlabeled deliveries of repo
// (a redelivery is the same one).
func (s *stack) labelDeliveries(repo string) int {
	seen := map[string]bool{}
	for _, d := range s.sim.Deliveries() {
		if d.Event == "pull_request" && (d.Action == "unlabeled" || d.Action == "labeled") && strings.Contains(string(d.Payload), `"octo/`+repo+`"`) {
			seen[d.GUID] = true
		}
	}
	return len(seen)
}

func (s *stack) writerAndReader(t *testing.T, repo string) {
	t.Helper()
	for user, perm := range map[string]string{"writer": "write", "reader": "read"} {
		if err := s.sim.SetPermission("octo", repo, user, perm); err != nil {
			t.Fatal(err)
		}
	}
}

// labelledByWriter has the writer label pull request #1 and waits until
// it is queued.
func (s *stack) labelledByWriter(t *testing.T, repo string) {
	t.Helper()
	if err := s.sim.AddLabel("octo", repo, 1, "baton:queue", "writer"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "#1 queued", func() bool { _, ok := s.entryOf(t, repo, 1); return ok })
}

// pushedByReader has the reader push to pull request #1 and waits until
// the push bounced it; it returns the reader's head.
func (s *stack) pushedByReader(t *testing.T, repo string) string {
	t.Helper()
	head, err := s.sim.PushPull("octo", repo, 1, "", "reader")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "#1 bounced by the push", func() bool { return s.isBounced(t, repo, 1) })
	return head
}

// isBounced reports whether pull request n has a bounced entry.
func (s *stack) isBounced(t *testing.T, repo string, n int) bool {
	t.Helper()
	e, ok := s.entryOf(t, repo, n)
	return ok && e.Status == mergequeue.StatusBounced
}

// checksPass has the required check "ci" pass on sha.
func (s *stack) checksPass(t *testing.T, repo, sha string) {
	t.Helper()
	if _, err := s.sim.AddCheckRun("octo", repo, ghsim.NewCheckRun{Name: "ci", HeadSHA: sha, Status: "completed", Conclusion: "success"}); err != nil {
		t.Fatal(err)
	}
}

// releasedAndOut releases the issue's lease held, waits until the label's
// removal took #1 out of the queue, and checks that it neither merged nor
// carries the label.
func (s *stack) releasedAndOut(t *testing.T, repo string, lease *coordinator.Lease) {
	t.Helper()
	if err := s.coord.Release(context.Background(), lease); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "#1 out of the queue", func() bool { _, ok := s.entryOf(t, repo, 1); return !ok })
	if p := s.pull(t, repo, 1); p.Merged || slices.Contains(p.Labels, "baton:queue") {
		t.Errorf("#1 after the label's removal: merged %v, labels %v", p.Merged, p.Labels)
	}
}

// relabelledAndMerged releases the issue's lease held, waits until the
// label's removal and its addition again are done and their deliveries
// handled (three label deliveries in all), and checks that #1, still
// queued, merges once its checks pass on head.
func (s *stack) relabelledAndMerged(t *testing.T, repo string, lease *coordinator.Lease, head string) {
	t.Helper()
	if err := s.coord.Release(context.Background(), lease); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the label removed and added again", func() bool {
		return s.labelDeliveries(repo) == 3 && slices.Contains(s.pull(t, repo, 1).Labels, "baton:queue")
	})
	s.checksPass(t, repo, head)
	waitFor(t, 30*time.Second, "#1 merged", func() bool { return s.pull(t, repo, 1).Merged })
}

// reconciled runs a reconcile of repo (as installation 1) until one is
// not skipped (the repository's lease was free), and returns its report.
func (s *stack) reconciled(t *testing.T, repo string) mergequeue.Report {
	t.Helper()
	var rep mergequeue.Report
	waitFor(t, 30*time.Second, "a reconcile that ran", func() bool {
		var err error
		rep, err = s.q.Reconcile(context.Background(), 1, "octo", repo)
		if err != nil {
			t.Fatal(err)
		}
		return !rep.Skipped
	})
	return rep
}

// A reconcile while a bounced pull request's label removal waits its turn,
// after the head moved again, does not queue the new head from the label
// that is going.
func TestReconcileDoesNotRequeueABouncedPullWhoseHeadMoved(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	const repo = "reconcilebounced"
	s.repo(t, repo, 1, []string{"ci"})
	s.writerAndReader(t, repo)
	s.labelledByWriter(t, repo)

	lease := s.holdIssue(t, repo, 1)
	s.pushedByReader(t, repo)
	head, err := s.sim.PushPull("octo", repo, 1, "", "reader")
	if err != nil {
		t.Fatal(err)
	}
	s.checksPass(t, repo, head)
	rep := s.reconciled(t, repo)
	if e, ok := s.entryOf(t, repo, 1); !ok || e.Status != mergequeue.StatusBounced {
		t.Errorf("the reconcile queued the reader's new head: %+v (in the queue: %v); report %+v", e, ok, rep)
	}
	s.releasedAndOut(t, repo, lease)
}

// pullEvent is a pull_request delivery of action on #n at head, sent by
// sender (a person), the pull request carrying the label or not.
func pullEvent(repo string, n int, action, head, sender, id string, labeled bool) mergequeue.Event {
	labels := `[]`
	if labeled {
		labels = `[{"name":"baton:queue"}]`
	}
	body := fmt.Sprintf(`{"action":%q,"number":%d,"pull_request":{"number":%d,"state":"open","head":{"sha":%q},"labels":%s},`+
		`"label":{"name":"baton:queue"},"repository":{"full_name":"octo/%s"},"installation":{"id":1},"sender":{"login":%q,"type":"User"}}`,
		action, n, n, head, labels, repo, sender)
	return mergequeue.Event{DeliveryID: id, Name: "pull_request", Action: action, InstallationID: 1, Repository: "octo/" + repo, Payload: []byte(body)}
}

// A push to a pull request carrying the label, by someone who may not
// write, whose delivery is handled before the label's (GitHub does not
// keep deliveries in order): the label was added at the head before, and
// its late delivery does not queue the pusher's head. Pushed by someone
// who may write, the late label queues the new head.
func TestPushByAReaderBeforeTheLabelIsHandledBounces(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{noWebhooks: true}) // the deliveries are handed over below, in the order the test says
	for _, pusher := range []string{"reader", "writer"} {
		t.Run(pusher, func(t *testing.T) {
			t.Parallel()
			repo := "pushbeforelabel-" + pusher
			s.repo(t, repo, 1, []string{"ci"})
			s.writerAndReader(t, repo)
			before := s.pull(t, repo, 1).HeadSHA
			if err := s.sim.AddLabel("octo", repo, 1, "baton:queue", "writer"); err != nil {
				t.Fatal(err)
			}
			head, err := s.sim.PushPull("octo", repo, 1, "", pusher)
			if err != nil {
				t.Fatal(err)
			}
			s.checksPass(t, repo, head)
			s.handle(t, pullEvent(repo, 1, "synchronize", head, pusher, repo+"-push", true))
			s.handle(t, pullEvent(repo, 1, "labeled", before, "writer", repo+"-label", true))
			if pusher == "writer" {
				waitFor(t, 30*time.Second, "#1 merged at the writer's head", func() bool { return s.pull(t, repo, 1).Merged })
				return
			}
			if e, ok := s.entryOf(t, repo, 1); !ok || e.Status != mergequeue.StatusBounced || e.PRSHA != head {
				t.Errorf("#1 after the reader's push and the late label: %+v (in the queue: %v)", e, ok)
			}
			waitFor(t, 30*time.Second, "the label removed", func() bool { return !slices.Contains(s.pull(t, repo, 1).Labels, "baton:queue") })
			if ops := s.mergeOps(t, repo, 1); len(ops) != 0 || s.pull(t, repo, 1).Merged {
				t.Errorf("%d merge operations of #1; merged %v", len(ops), s.pull(t, repo, 1).Merged)
			}
			if c := s.botComments(t, repo, 1, "new commits were pushed by @reader"); len(c) != 1 {
				t.Errorf("bounce comments: %q", c)
			}
		})
	}
}

// "/baton queue" by someone who may write, after a push by a reader
// bounced the pull request and while the bounce's removal of the label
// waits its turn, keeps it queued: the removal is followed by the label
// again, and its unlabeled delivery does not take it out.
func TestQueueCommandWhileABounceRemovesTheLabel(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	const repo = "queueafterbounce"
	s.repo(t, repo, 1, []string{"ci"})
	s.writerAndReader(t, repo)
	s.labelledByWriter(t, repo)

	lease := s.holdIssue(t, repo, 1)
	head := s.pushedByReader(t, repo)
	if _, err := s.sim.AddComment("octo", repo, 1, "/baton queue", "writer"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "#1 queued again", func() bool {
		e, ok := s.entryOf(t, repo, 1)
		return ok && e.Status != mergequeue.StatusBounced
	})
	s.relabelledAndMerged(t, repo, lease, head)
}

// "/baton queue" by someone who may write, while the removal of a label
// added by someone who may not (refused) waits its turn, keeps the pull
// request queued: the label is asked for again after the removal.
func TestQueueCommandWhileARefusedLabelIsRemoved(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	const repo = "queueafterrefusal"
	s.repo(t, repo, 1, []string{"ci"})
	s.writerAndReader(t, repo)
	lease := s.holdIssue(t, repo, 1)
	if err := s.sim.AddLabel("octo", repo, 1, "baton:queue", "reader"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the reader's label refused", func() bool {
		return slices.ContainsFunc(s.events(t, repo), func(e mergequeue.EventRecord) bool { return e.Action == "labeled" })
	})
	if _, err := s.sim.AddComment("octo", repo, 1, "/baton queue", "writer"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "#1 queued", func() bool { _, ok := s.entryOf(t, repo, 1); return ok })
	s.relabelledAndMerged(t, repo, lease, s.pull(t, repo, 1).HeadSHA)
}

// baton's label for a "/baton queue", delivered after a "/baton dequeue"
// that followed it (the dequeue's removal of the label waiting its turn),
// does not queue the pull request again.
func TestLateLabelOfACommandDoesNotRequeueADequeuedPull(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStack(t, stackOptions{})
	const repo = "latelabeldequeued"
	s.repo(t, repo, 1, []string{"ci"})
	s.writerAndReader(t, repo)
	if _, err := s.sim.AddComment("octo", repo, 1, "/baton queue", "writer"); err != nil {
		t.Fatal(err)
	}
	labeled := s.captured(t, repo, "pull_request", "labeled", "")
	waitFor(t, 30*time.Second, "#1 queued", func() bool { _, ok := s.entryOf(t, repo, 1); return ok })

	lease := s.holdIssue(t, repo, 1)
	if _, err := s.sim.AddComment("octo", repo, 1, "/baton dequeue", "writer"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "#1 dequeued", func() bool {
		e, ok := s.entryOf(t, repo, 1)
		return !ok || e.Status == mergequeue.StatusBounced
	})
	s.checksPass(t, repo, s.pull(t, repo, 1).HeadSHA)
	s.handle(t, labeled)
	if e, ok := s.entryOf(t, repo, 1); ok && e.Status != mergequeue.StatusBounced {
		t.Errorf("baton's late label queued the dequeued pull request: %+v", e)
	}
	if err := s.coord.Release(ctx, lease); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "#1 out of the queue, its label gone", func() bool {
		_, ok := s.entryOf(t, repo, 1)
		return !ok && !slices.Contains(s.pull(t, repo, 1).Labels, "baton:queue")
	})
	if p := s.pull(t, repo, 1); p.Merged {
		t.Error("the dequeued pull request merged")
	}
}

// A reconcile while the removal of a label added by someone who may not
// write waits its turn does not queue the pull request from that label.
func TestReconcileDoesNotQueueFromARefusedLabel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStack(t, stackOptions{})
	const repo = "reconcilerefused"
	s.repo(t, repo, 1, []string{"ci"})
	s.writerAndReader(t, repo)
	s.checksPass(t, repo, s.pull(t, repo, 1).HeadSHA)
	lease := s.holdIssue(t, repo, 1)
	if err := s.sim.AddLabel("octo", repo, 1, "baton:queue", "reader"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the reader's label refused", func() bool {
		return slices.ContainsFunc(s.events(t, repo), func(e mergequeue.EventRecord) bool { return e.Action == "labeled" })
	})
	rep := s.reconciled(t, repo)
	if e, ok := s.entryOf(t, repo, 1); ok && e.Status != mergequeue.StatusBounced {
		t.Errorf("the reconcile queued #1 from the refused label: %+v; report %+v", e, rep)
	}
	if err := s.coord.Release(ctx, lease); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "#1 out of the queue, its label gone", func() bool {
		_, ok := s.entryOf(t, repo, 1)
		return !ok && !slices.Contains(s.pull(t, repo, 1).Labels, "baton:queue")
	})
	if s.pull(t, repo, 1).Merged {
		t.Error("#1 merged from the refused label")
	}
}

// "/baton dequeue" right after a "/baton queue", before the label the
// queue command asked for was added: baton's label, added then and
// delivered before the dequeue's removal of it (failing on GitHub's side
// here), does not queue the pull request again, and it does not merge.
func TestDequeueBeforeTheQueueCommandsLabelIsAdded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStack(t, stackOptions{})
	const repo = "dequeuebeforelabel"
	s.repo(t, repo, 1, []string{"ci"})
	s.writerAndReader(t, repo)
	head := s.pull(t, repo, 1).HeadSHA
	if _, err := s.sim.AddCheckRun("octo", repo, ghsim.NewCheckRun{Name: "ci", HeadSHA: head, Status: "in_progress"}); err != nil {
		t.Fatal(err)
	}
	fault, err := s.sim.SetFault(ghsim.Fault{Route: "DELETE /repos/octo/" + repo + "/issues/{number}/labels/{name...}", Kind: ghsim.FaultStatus, Status: 500, Count: 100})
	if err != nil {
		t.Fatal(err)
	}
	lease := s.holdIssue(t, repo, 1)
	for i, c := range []string{"/baton queue", "/baton dequeue"} {
		if _, err := s.sim.AddComment("octo", repo, 1, c, "writer"); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 30*time.Second, c+" handled", func() bool { return len(s.audit(t, repo)) == i+1 })
	}
	s.checksPass(t, repo, head)
	if err := s.coord.Release(ctx, lease); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "baton's label delivered and handled", func() bool {
		return slices.ContainsFunc(s.events(t, repo), func(e mergequeue.EventRecord) bool { return e.Action == "labeled" })
	})
	s.waitIdle(t)
	if e, ok := s.entryOf(t, repo, 1); ok && e.Status != mergequeue.StatusBounced {
		t.Errorf("baton's label queued the dequeued pull request again: %+v", e)
	}
	if p := s.pull(t, repo, 1); p.Merged {
		t.Fatal("the dequeued pull request merged")
	}
	// GitHub answers again: the next reconcile removes the label, and the
	// entry goes with it.
	s.sim.ClearFault(fault)
	s.reconciled(t, repo)
	waitFor(t, 30*time.Second, "#1 out of the queue, its label gone", func() bool {
		_, ok := s.entryOf(t, repo, 1)
		return !ok && !slices.Contains(s.pull(t, repo, 1).Labels, "baton:queue")
	})
	if p := s.pull(t, repo, 1); p.Merged {
		t.Error("the dequeued pull request merged")
	}
}

// A delivery that would join a pull request, handled late (or again) after
// a push by a reader bounced it while the bounce's removal of the label
// waits its turn, does not queue the reader's head: whoever labelled or
// reopened it vouched for the head before.
func TestLateJoinsDoNotRequeueABouncedPull(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	for _, tc := range []struct {
		name string
		// join puts #1 in the queue and returns the delivery that did.
		join func(t *testing.T, repo string) mergequeue.Event
	}{
		{"label by a writer", func(t *testing.T, repo string) mergequeue.Event {
			if err := s.sim.AddLabel("octo", repo, 1, "baton:queue", "writer"); err != nil {
				t.Fatal(err)
			}
			return s.captured(t, repo, "pull_request", "labeled", "writer")
		}},
		{"baton's label for a command", func(t *testing.T, repo string) mergequeue.Event {
			if _, err := s.sim.AddComment("octo", repo, 1, "/baton queue", "writer"); err != nil {
				t.Fatal(err)
			}
			return s.captured(t, repo, "pull_request", "labeled", "")
		}},
		{"reopening by a writer", func(t *testing.T, repo string) mergequeue.Event {
			s.labelledByWriter(t, repo)
			for _, closed := range []bool{true, false} {
				if err := s.sim.ClosePull("octo", repo, 1, closed, "writer"); err != nil {
					t.Fatal(err)
				}
			}
			ev := s.captured(t, repo, "pull_request", "reopened", "writer")
			waitFor(t, 30*time.Second, "the reopening handled", func() bool {
				return slices.ContainsFunc(s.events(t, repo), func(e mergequeue.EventRecord) bool { return e.Action == "reopened" })
			})
			return ev
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			repo := "latejoin-" + strings.ReplaceAll(strings.ReplaceAll(tc.name, " ", "-"), "'", "")
			s.repo(t, repo, 1, []string{"ci"})
			s.writerAndReader(t, repo)
			late := tc.join(t, repo)
			waitFor(t, 30*time.Second, "#1 queued", func() bool { _, ok := s.entryOf(t, repo, 1); return ok })

			// The issue's lease held by someone else: the bounce's comment
			// and label removal wait, and the label stays on.
			lease := s.holdIssue(t, repo, 1)
			head := s.pushedByReader(t, repo)
			if !slices.Contains(s.pull(t, repo, 1).Labels, "baton:queue") {
				t.Fatal("the label went while its removal's lease was held")
			}
			// The reader's head passes its checks: queued, it would merge.
			s.checksPass(t, repo, head)
			s.handle(t, late)
			if !s.isBounced(t, repo, 1) {
				t.Errorf("the late delivery queued the reader's head: %+v", s.entries(t, repo))
			}
			s.releasedAndOut(t, repo, lease)
		})
	}
}

// A reconcile while the label a "/baton queue" asked for waits its turn
// does not take the pull request out for the label it does not carry yet:
// it keeps its place. Once the label was added, its removal (a person's,
// whose delivery was missed) takes it out at the next reconcile.
func TestReconcileKeepsAPullWhoseLabelIsBeingAdded(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	const repo = "reconcilelabelpending"
	s.repo(t, repo, 1, []string{"ci"})
	s.writerAndReader(t, repo)
	lease := s.holdIssue(t, repo, 1)
	if _, err := s.sim.AddComment("octo", repo, 1, "/baton queue", "writer"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "#1 queued", func() bool { _, ok := s.entryOf(t, repo, 1); return ok })
	before, _ := s.entryOf(t, repo, 1)
	rep := s.reconciled(t, repo)
	if e, ok := s.entryOf(t, repo, 1); !ok || len(rep.Left) != 0 || !e.QueuedAt.Equal(before.QueuedAt) {
		t.Fatalf("a reconcile while baton's label waits its turn: #1 %+v (in the queue: %v); report %+v", e, ok, rep)
	}
	if err := s.coord.Release(context.Background(), lease); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the label added", func() bool {
		ops := s.issueOps(t, repo, 1, schema.ActionAddLabels)
		return len(ops) == 1 && ops[0].Terminal() && slices.Contains(s.pull(t, repo, 1).Labels, "baton:queue")
	})
	if rep := s.reconciled(t, repo); len(rep.Left) != 0 || len(rep.Joined) != 0 {
		t.Errorf("a reconcile once the label is there: %+v", rep)
	}
	if e, ok := s.entryOf(t, repo, 1); !ok || !e.QueuedAt.Equal(before.QueuedAt) {
		t.Errorf("#1 once the label is there: %+v (in the queue: %v)", e, ok)
	}

	s.sim.SetWebhook("", "") // the removal's delivery is missed
	if err := s.sim.RemoveLabel("octo", repo, 1, "baton:queue", "writer"); err != nil {
		t.Fatal(err)
	}
	if rep := s.reconciled(t, repo); !slices.Equal(rep.Left, []int{1}) {
		t.Errorf("a reconcile after a person removed the label: %+v", rep)
	}
	if _, ok := s.entryOf(t, repo, 1); ok {
		t.Error("#1 still in the queue after its label was removed")
	}
}

// A queued pull request merged by someone else (another App here: the
// simulator merges only through the API) leaves with a status that says
// so, not that the queue merged it; one the queue merges says the queue
// did.
func TestMergedOutsideTheQueueSaysSo(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	const repo = "mergedoutside"
	s.repo(t, repo, 2, []string{"ci"})
	s.writerAndReader(t, repo)
	// #2 first in line, its checks pending; #1 behind it, its checks passed.
	if err := s.sim.AddLabel("octo", repo, 2, "baton:queue", "writer"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "#2 queued", func() bool { _, ok := s.entryOf(t, repo, 2); return ok })
	head := s.pull(t, repo, 1).HeadSHA
	s.checksPass(t, repo, head)
	s.labelledByWriter(t, repo)
	waitFor(t, 30*time.Second, "#1 in line", func() bool { return hasStatus(s, repo, head, "2nd in queue") })
	gh, err := s.gh.Installation(1)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := gh.PullRequests.Merge(context.Background(), "octo", repo, 1, "", &github.PullRequestOptions{SHA: head}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "#1 out of the queue", func() bool { _, ok := s.entryOf(t, repo, 1); return !ok })
	waitFor(t, 30*time.Second, "#1's status says it merged", func() bool {
		return hasStatus(s, repo, head, "Merged outside the merge queue") || hasStatus(s, repo, head, "Merged by the merge queue")
	})
	if hasStatus(s, repo, head, "Merged by the merge queue") {
		t.Error("#1, merged by someone else, says it was merged by the merge queue")
	}

	head2 := s.pull(t, repo, 2).HeadSHA
	s.checksPass(t, repo, head2)
	waitFor(t, 30*time.Second, "#2 merged by the queue", func() bool { return hasStatus(s, repo, head2, "Merged by the merge queue") })
}

// The head whose merge operation was dead-lettered, which waits until an
// operator replays or cancels it, says so in its status (once a run on the
// repository, the next reconcile at the latest, reads it); cancelled, the
// pull request bounces.
func TestDeadLetteredMergeSaysSo(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{failMerges: true})
	const repo = "deadlettermerge"
	s.repo(t, repo, 1, []string{"ci"})
	s.writerAndReader(t, repo)
	head := s.pull(t, repo, 1).HeadSHA
	s.checksPass(t, repo, head)
	s.labelledByWriter(t, repo)
	var op schema.Record
	waitFor(t, 30*time.Second, "#1's merge dead-lettered", func() bool {
		ops := s.mergeOps(t, repo, 1)
		if len(ops) != 1 {
			return false
		}
		op = ops[0]
		v, err := s.exec.Get(context.Background(), op.OperationID)
		return err == nil && !v.Terminal() && s.deadLettered(op.OperationID)
	})
	s.reconciled(t, repo)
	const want = "1st in queue; its merge is dead-lettered: the queue waits until an operator replays or cancels it"
	// The status is an operation of its own: it is set a moment later.
	waitFor(t, 30*time.Second, "#1's status saying its merge is dead-lettered", func() bool { return hasStatus(s, repo, head, want) })
	if _, err := s.exec.Cancel(context.Background(), op.OperationID); err != nil {
		t.Fatal(err)
	}
	// The bounced entry is cleared once its label is gone: the audit log
	// keeps the bounce.
	waitFor(t, 30*time.Second, "#1 bounced", func() bool {
		return slices.ContainsFunc(s.audit(t, repo), func(a mergequeue.AuditRecord) bool { return a.Action == mergequeue.AuditBounce && a.PRNumber == 1 })
	})
}

// An unlabeled delivery handled while the label a "/baton queue" asked for
// waits its turn (the delivery of a removal that ran before it: an issue's
// operations run in the order submitted) does not take the pull request
// out: the label comes back, and the pull request keeps its place.
func TestUnlabeledWhileTheLabelIsBeingAddedKeepsThePlace(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	const repo = "unlabeledlabelpending"
	s.repo(t, repo, 1, []string{"ci"})
	s.writerAndReader(t, repo)
	lease := s.holdIssue(t, repo, 1)
	if _, err := s.sim.AddComment("octo", repo, 1, "/baton queue", "writer"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "#1 queued", func() bool { _, ok := s.entryOf(t, repo, 1); return ok })
	before, _ := s.entryOf(t, repo, 1)
	s.handle(t, pullEvent(repo, 1, "unlabeled", before.PRSHA, "baton-sim[bot]", repo+"-unlabeled", false))
	if e, ok := s.entryOf(t, repo, 1); !ok || !e.QueuedAt.Equal(before.QueuedAt) {
		t.Fatalf("#1 after an unlabeled delivery while its label waits its turn: %+v (in the queue: %v)", e, ok)
	}
	if err := s.coord.Release(context.Background(), lease); err != nil {
		t.Fatal(err)
	}
	s.checksPass(t, repo, before.PRSHA)
	waitFor(t, 30*time.Second, "#1 merged", func() bool { return s.pull(t, repo, 1).Merged })
	if a := s.audit(t, repo); slices.ContainsFunc(a, func(r mergequeue.AuditRecord) bool { return r.Action == mergequeue.AuditLeave }) {
		t.Errorf("#1 left the queue: %+v", a)
	}
}
