package mergequeue_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/app/mergequeue"
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
	waitFor(t, 10*time.Second, "a reply to the reader", func() bool {
		return slices.ContainsFunc(appComments(), func(b string) bool { return strings.Contains(b, "@reader, `/baton queue` needs write permission") })
	})
	if _, queued := s.entryOf(t, repo, 1); queued {
		t.Fatal("a reader queued #1")
	}

	comment("Looks good to me.\n/baton queue\n", "writer")
	waitFor(t, 10*time.Second, "#1 queued by the writer, with the label", func() bool {
		_, queued := s.entryOf(t, repo, 1)
		return queued && slices.Contains(s.pull(t, repo, 1).Labels, "baton:queue")
	})
	if j := auditOf(s.audit(t, repo), mergequeue.AuditJoin); len(j) != 1 || j[0].Detail != "/baton queue by @writer" {
		t.Errorf("joins: %+v", j)
	}
	waitFor(t, 10*time.Second, "the label baton added handled as already_queued", func() bool {
		return slices.ContainsFunc(s.events(t, repo), func(e mergequeue.EventRecord) bool {
			return e.Action == "labeled" && e.Details == "#1 already_queued"
		})
	})

	sha := s.pull(t, repo, 1).HeadSHA
	comment("/baton dequeue", "boss")
	waitFor(t, 10*time.Second, "#1 dequeued by a maintainer, label removed, status replaced", func() bool {
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
	// baton's reply, which quotes the command, was no command.
	if got := len(auditOf(a, mergequeue.AuditJoin)); got != 1 {
		t.Errorf("%d joins", got)
	}
}
