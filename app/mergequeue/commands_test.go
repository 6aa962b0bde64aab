package mergequeue_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/app"
	"github.com/baton-dev/baton/app/ghsim"
	"github.com/baton-dev/baton/app/mergequeue"
	"github.com/baton-dev/baton/executor"
	"github.com/baton-dev/baton/schema"
)

// "/baton queue" and "/baton dequeue" work for commenters with write
// permission (write, maintain, admin); others get a reply and nothing
// changes. The label follows the commands, so that it keeps telling who is
// queued.
func TestCommentCommands(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	const repo = "commands"
	s.repo(t, repo, 1, []string{"ci"})
	for user, perm := range map[string]string{"reader": "read", "writer": "write", "boss": "maintain"} {
		if err := s.sim.SetPermission("octo", repo, user, perm); err != nil {
			t.Fatal(err)
		}
	}
	comment := func(body, user string) {
		t.Helper()
		if _, err := s.sim.AddComment("octo", repo, 1, body, user); err != nil {
			t.Fatal(err)
		}
	}
	appComments := func() []string {
		var out []string
		for _, c := range s.pull(t, repo, 1).Comments {
			if c.ByApp {
				out = append(out, c.Body)
			}
		}
		return out
	}

	comment("/baton queue", "reader")
	waitFor(t, 30*time.Second, "a reply to the reader", func() bool {
		return slices.ContainsFunc(appComments(), func(b string) bool { return strings.Contains(b, "@reader, `/baton queue` needs write permission") })
	})
	if _, queued := s.entryOf(t, repo, 1); queued {
		t.Fatal("a reader queued #1")
	}

	comment("Looks good to me.\n/baton queue\n", "writer")
	waitFor(t, 30*time.Second, "#1 queued by the writer, with the label", func() bool {
		_, queued := s.entryOf(t, repo, 1)
		return queued && slices.Contains(s.pull(t, repo, 1).Labels, "baton:queue")
	})
	if j := auditOf(s.audit(t, repo), mergequeue.AuditJoin); len(j) != 1 || j[0].Detail != "/baton queue by @writer" {
		t.Errorf("joins: %+v", j)
	}
	waitFor(t, 30*time.Second, "the label baton added handled as already_queued", func() bool {
		return slices.ContainsFunc(s.events(t, repo), func(e mergequeue.EventRecord) bool {
			return e.Action == "labeled" && e.Details == "#1 already_queued"
		})
	})

	sha := s.pull(t, repo, 1).HeadSHA
	comment("/baton dequeue", "boss")
	waitFor(t, 30*time.Second, "#1 dequeued by a maintainer, label removed, status replaced", func() bool {
		_, queued := s.entryOf(t, repo, 1)
		return !queued && !slices.Contains(s.pull(t, repo, 1).Labels, "baton:queue") && hasStatus(s, repo, sha, "Not in the merge queue")
	})
	a := s.audit(t, repo)
	if l := auditOf(a, mergequeue.AuditLeave); len(l) != 1 || l[0].Detail != "/baton dequeue by @boss" {
		t.Errorf("leaves: %+v", l)
	}
	if len(appComments()) != 1 {
		t.Errorf("baton commented %d times: %q", len(appComments()), appComments())
	}

	// A command in a comment by a bot is no command, even a bot with write
	// permission: baton's own comments and other Apps' are not people
	// asking for a merge.
	if err := s.sim.SetPermission("octo", repo, "helper[bot]", "write"); err != nil {
		t.Fatal(err)
	}
	comment("/baton queue", "helper[bot]")
	waitFor(t, 30*time.Second, "the bot's comment handled", func() bool {
		// Five comments: the reader's, baton's reply, the writer's, the
		// maintainer's and the bot's.
		ds, err := s.ledger.List(context.Background(), app.DeliveryFilter{Limit: 500})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, d := range ds {
			if d.State == app.DeliveryPending {
				return false
			}
			if d.Event == "issue_comment" {
				n++
			}
		}
		return n == 5
	})
	if _, queued := s.entryOf(t, repo, 1); queued {
		t.Fatal("a bot's /baton queue queued #1")
	}
	if got := len(auditOf(s.audit(t, repo), mergequeue.AuditJoin)); got != 1 {
		t.Errorf("%d joins, want the writer's only", got)
	}
}

// A commenter without write permission is told once per pull request and
// command, however often they comment: anyone may comment on a public
// repository, and a reply to each comment would let one person spend the
// installation's budget of comments on baton's replies.
func TestRefusedCommandsAnsweredOnce(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	const repo = "refusals"
	s.repo(t, repo, 1, []string{"ci"})
	if err := s.sim.SetPermission("octo", repo, "reader", "read"); err != nil {
		t.Fatal(err)
	}
	replies := func() (n int) {
		for _, c := range s.pull(t, repo, 1).Comments {
			if c.ByApp && strings.Contains(c.Body, "needs write permission") {
				n++
			}
		}
		return n
	}
	handled := func() (n int) {
		for _, e := range s.events(t, repo) {
			if e.Event == "issue_comment" {
				n++
			}
		}
		return n
	}
	for i, cmd := range []string{"/baton queue", "/baton queue", "/baton queue", "/baton queue", "/baton dequeue"} {
		if _, err := s.sim.AddComment("octo", repo, 1, cmd, "reader"); err != nil {
			t.Fatal(err)
		}
		// Each comment is handled before the next is made (its reply, if
		// any, is submitted by then).
		waitFor(t, 30*time.Second, "the comment handled", func() bool { return handled() >= i+1 })
	}
	ops := func() []schema.Record {
		recs, _, err := s.exec.List(context.Background(), executor.ListFilter{Action: schema.ActionComment,
			ResourceType: schema.ResourceIssue, ResourceID: "octo/" + repo + "#1"})
		if err != nil {
			t.Fatal(err)
		}
		return recs
	}
	waitFor(t, 30*time.Second, "the replies posted", func() bool {
		return !slices.ContainsFunc(ops(), func(r schema.Record) bool { return !r.Terminal() })
	})
	if n, o := replies(), len(ops()); n != 2 || o != 2 {
		t.Errorf("%d replies (%d operations) to four /baton queue and one /baton dequeue of the same reader, want 2", n, o)
	}
}

// A check's name is anyone's who can make a check run on the head (a
// job's name in the pull request's own workflow): in the App's bounce
// comment it is in a code span, where it mentions nobody and links
// nowhere.
func TestBounceCommentQuotesCheckNames(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	const repo = "names"
	s.repo(t, repo, 1, nil) // no branch protection: every reported check counts
	const name = "@octo/everyone please [review](https://evil.example) <img src=x>"
	sha := s.pull(t, repo, 1).HeadSHA
	run, err := s.sim.AddCheckRun("octo", repo, ghsim.NewCheckRun{Name: name, HeadSHA: sha, Status: "in_progress"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.sim.AddLabel("octo", repo, 1, "baton:queue", "monalisa"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "#1 queued", func() bool { _, ok := s.entryOf(t, repo, 1); return ok })
	if err := s.sim.CompleteCheckRun("octo", repo, run, "failure"); err != nil {
		t.Fatal(err)
	}
	var body string
	waitFor(t, 30*time.Second, "the bounce comment", func() bool {
		for _, c := range s.pull(t, repo, 1).Comments {
			if c.ByApp && strings.Contains(c.Body, "removed this pull request from the merge queue") {
				body = c.Body
				return true
			}
		}
		return false
	})
	open := strings.Index(body, "`")
	closing := open + 1 + strings.Index(body[open+1:], "`")
	at := strings.Index(body, name)
	if open < 0 || closing <= open || at < open || at+len(name) > closing {
		t.Errorf("the check's name is not in a code span of the comment: %q", body)
	}
}

// Putting a pull request in the queue vouches for what it holds then:
// new commits pushed by someone without write permission (the author of a
// pull request from a fork) take it out of the queue, and baton does not
// merge them when their checks pass. Pushes by someone who may write keep
// it queued at its new head.
func TestPushByReaderBouncesFromTheQueue(t *testing.T) {
	t.Parallel()
	t.Run("person", func(t *testing.T) { t.Parallel(); testPushByReaderBounces(t, false) })
	t.Run("app", func(t *testing.T) { t.Parallel(); testPushByReaderBounces(t, true) })
}

func testPushByReaderBounces(t *testing.T, bot bool) {
	s := newStack(t, stackOptions{})
	const repo = "pushes"
	s.repo(t, repo, 2, []string{"ci"})
	if err := s.sim.SetPermission("octo", repo, "outsider", "read"); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1, 2} {
		if err := s.sim.AddLabel("octo", repo, n, "baton:queue", "monalisa"); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 30*time.Second, "#1 and #2 queued", func() bool { return len(s.queueOrder(t, repo)) == 2 })

	// #1: its author, who may not write, pushes after it was queued (or
	// has a workflow of the fork push, as github-actions[bot]).
	pusher := "outsider"
	if bot {
		pusher = "github-actions[bot]"
	}
	sha1, err := s.sim.PushPull("octo", repo, 1, "", pusher)
	if err != nil {
		t.Fatal(err)
	}
	// #2: a writer pushes.
	sha2, err := s.sim.PushPull("octo", repo, 2, "", "monalisa")
	if err != nil {
		t.Fatal(err)
	}
	// Both new heads pass their checks.
	for n, sha := range map[int]string{1: sha1, 2: sha2} {
		if _, err := s.sim.AddCheckRun("octo", repo, ghsim.NewCheckRun{Name: "ci", HeadSHA: sha, Status: "completed", Conclusion: "success"}); err != nil {
			t.Fatalf("#%d: %v", n, err)
		}
	}
	waitFor(t, 30*time.Second, "#2 merged at its new head", func() bool {
		return s.pull(t, repo, 2).Merged && len(s.mergeEffects(repo)) > 0
	})
	if s.pull(t, repo, 1).Merged {
		t.Fatal("#1 merged with commits pushed by someone without write permission")
	}
	waitFor(t, 30*time.Second, "#1 out of the queue, without its label", func() bool {
		_, queued := s.entryOf(t, repo, 1)
		return !queued && !slices.Contains(s.pull(t, repo, 1).Labels, "baton:queue")
	})
	if c := bounceComments(s.pull(t, repo, 1)); len(c) != 1 || !strings.Contains(c[0], "pushed by @"+pusher+", who has") {
		t.Errorf("#1's bounce comments: %q", c)
	}
}

// The label vouches for a pull request as it was when someone with write
// permission put it there. Its author, who may not write, closing it and
// reopening it (after pushing to its branch while it was closed, say)
// does not queue it again: the label is removed instead. Reopened by
// someone who may write, it joins again.
func TestReopenByReaderDoesNotQueue(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	const repo = "reopens"
	s.repo(t, repo, 2, []string{"ci"})
	if err := s.sim.SetPermission("octo", repo, "outsider", "read"); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1, 2} {
		if err := s.sim.AddLabel("octo", repo, n, "baton:queue", "monalisa"); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 30*time.Second, "#1 and #2 queued", func() bool { return len(s.queueOrder(t, repo)) == 2 })
	for n, who := range map[int]string{1: "outsider", 2: "monalisa"} {
		if err := s.sim.ClosePull("octo", repo, n, true, who); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 30*time.Second, "the closed pull request out of the queue", func() bool {
			_, queued := s.entryOf(t, repo, n)
			return !queued
		})
		if err := s.sim.ClosePull("octo", repo, n, false, who); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 30*time.Second, "#2 queued again, #1 not and without its label", func() bool {
		_, queued1 := s.entryOf(t, repo, 1)
		return slices.Equal(s.queueOrder(t, repo), []int{2}) && !queued1 && !slices.Contains(s.pull(t, repo, 1).Labels, "baton:queue")
	})
	// A reconcile, which queues what carries the label, does not queue #1.
	if _, err := s.q.Reconcile(context.Background(), 1, "octo", repo); err != nil {
		t.Fatal(err)
	}
	if got := s.queueOrder(t, repo); !slices.Equal(got, []int{2}) {
		t.Errorf("queue after a reconcile: %v", got)
	}
}

// The label queues a pull request only when whoever added it may write:
// GitHub lets triage add labels but not merge, so a triager's label would
// have baton merge what they may not. The label is removed (a reconcile
// would queue from it), and a label added by someone who may write queues.
// The label baton adds for a "/baton queue" command, as the App, queues
// (the command's author was asked about).
func TestLabelByTriagerDoesNotQueue(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	const repo = "triaged"
	s.repo(t, repo, 3, []string{"ci"})
	if err := s.sim.SetPermission("octo", repo, "triager", "read"); err != nil {
		t.Fatal(err)
	}
	if err := s.sim.AddLabel("octo", repo, 1, "baton:queue", "triager"); err != nil {
		t.Fatal(err)
	}
	if err := s.sim.AddLabel("octo", repo, 2, "baton:queue", "monalisa"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.sim.AddComment("octo", repo, 3, "/baton queue", "monalisa"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "#2 and #3 queued, #1 not and without its label", func() bool {
		_, queued1 := s.entryOf(t, repo, 1)
		order := s.queueOrder(t, repo)
		return len(order) == 2 && slices.Contains(order, 2) && slices.Contains(order, 3) && !queued1 &&
			!slices.Contains(s.pull(t, repo, 1).Labels, "baton:queue") && slices.Contains(s.pull(t, repo, 3).Labels, "baton:queue")
	})
	// A reconcile, which queues what carries the label, does not queue #1.
	if _, err := s.q.Reconcile(context.Background(), 1, "octo", repo); err != nil {
		t.Fatal(err)
	}
	if _, queued := s.entryOf(t, repo, 1); queued {
		t.Error("#1 queued by a reconcile")
	}
}

// A comment command is acted on once, and never after a newer command of
// the pull request: GitHub does not sign X-GitHub-Delivery, so a captured
// delivery replayed under another ID passes the signature check and the
// ledger. Replaying "/baton queue" must not queue again a pull request
// dequeued since, nor one bounced by a push (its new head unreviewed).
func TestReplayedCommandIsNotActedOnAgain(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	const repo = "replays"
	s.repo(t, repo, 1, []string{"ci"})
	for user, perm := range map[string]string{"writer": "write", "reader": "read"} {
		if err := s.sim.SetPermission("octo", repo, user, perm); err != nil {
			t.Fatal(err)
		}
	}
	commented := func(body string) mergequeue.Event {
		t.Helper()
		id, err := s.sim.AddComment("octo", repo, 1, body, "writer")
		if err != nil {
			t.Fatal(err)
		}
		var ev mergequeue.Event
		waitFor(t, 30*time.Second, "the comment's delivery", func() bool {
			for _, d := range s.sim.Deliveries() {
				var p struct {
					Comment struct {
						ID int64 `json:"id"`
					} `json:"comment"`
				}
				if d.Event == "issue_comment" && json.Unmarshal(d.Payload, &p) == nil && p.Comment.ID == id {
					ev = mergequeue.Event{DeliveryID: "replayed-" + d.GUID, Name: d.Event, Action: d.Action,
						InstallationID: d.InstallationID, Repository: "octo/" + repo, Payload: d.Payload}
					return true
				}
			}
			return false
		})
		return ev
	}
	queued := func() bool { _, ok := s.entryOf(t, repo, 1); return ok }
	queue := commented("/baton queue")
	waitFor(t, 30*time.Second, "#1 queued", queued)
	commented("/baton dequeue")
	waitFor(t, 30*time.Second, "#1 dequeued", func() bool { return !queued() })

	s.handle(t, queue)
	if queued() {
		t.Fatal("the replayed /baton queue queued #1 again after /baton dequeue")
	}
	if !slices.ContainsFunc(s.events(t, repo), func(e mergequeue.EventRecord) bool {
		return e.DeliveryID == queue.DeliveryID && strings.Contains(e.Details, "/baton queue ignored")
	}) {
		t.Errorf("no event log row says the replay was ignored: %+v", s.events(t, repo))
	}

	// Queued again by a new comment, then bounced by a push of someone
	// who may not write: the replayed command does not bring the new head
	// in.
	queue = commented("/baton queue")
	waitFor(t, 30*time.Second, "#1 queued again", queued)
	if _, err := s.sim.PushPull("octo", repo, 1, "", "reader"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "#1 bounced by the push", func() bool {
		e, ok := s.entryOf(t, repo, 1)
		return !ok || e.Status == mergequeue.StatusBounced
	})
	queue.DeliveryID += "-again"
	s.handle(t, queue)
	if e, ok := s.entryOf(t, repo, 1); ok && e.Status != mergequeue.StatusBounced {
		t.Errorf("the replayed /baton queue queued the pushed head: %+v", e)
	}
}

// handle hands the queue a delivery as the dispatcher would: again after a
// RetryError (webhooks of the repository hold its lease).
func (s *stack) handle(t *testing.T, ev mergequeue.Event) {
	t.Helper()
	var err error
	waitFor(t, 30*time.Second, "the delivery handled", func() bool {
		err = s.q.HandleEvent(context.Background(), ev)
		var re *mergequeue.RetryError
		return !errors.As(err, &re)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// "/baton queue" on a pull request whose required check failed already
// bounces it at once, and leaves no label on it: the label asked for after
// the bounce's removal would stay, saying "queued" on a pull request out
// of the queue.
func TestQueueCommandOnAFailedGateLeavesNoLabel(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	const repo = "queuefailedgate"
	s.repo(t, repo, 1, []string{"ci"})
	if err := s.sim.SetPermission("octo", repo, "writer", "write"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.sim.AddCheckRun("octo", repo, ghsim.NewCheckRun{Name: "ci", HeadSHA: s.pull(t, repo, 1).HeadSHA, Status: "completed", Conclusion: "failure"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.sim.AddComment("octo", repo, 1, "/baton queue", "writer"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "#1 bounced", func() bool { return len(s.botComments(t, repo, 1, "the checks on")) == 1 })
	s.waitIdle(t)
	if ops := s.issueOps(t, repo, 1, schema.ActionAddLabels); len(ops) != 0 {
		t.Errorf("%d label operations for a pull request that bounced at once", len(ops))
	}
	if p := s.pull(t, repo, 1); slices.Contains(p.Labels, "baton:queue") {
		t.Errorf("the label is on #1, which bounced: %v", p.Labels)
	}
	if e, ok := s.entryOf(t, repo, 1); !ok || e.Status != mergequeue.StatusBounced {
		t.Errorf("#1: %+v (in the queue: %v)", e, ok)
	}
}
