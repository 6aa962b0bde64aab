package executor

import (
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/app/ghsim"
	"github.com/baton-dev/baton/schema"
)

// An issue deleted on GitHub answers 410 Gone: the operations on it fail
// at once, as not_found (the thing is no longer there), not as a
// validation failure of their payload.
func TestDeletedIssueFailsAsNotFound(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	n, err := s.sim.AddIssue("octo", "demo", ghsim.NewIssue{Title: "to be deleted"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.sim.DeleteIssue("octo", "demo", n, ""); err != nil {
		t.Fatal(err)
	}
	cases := []struct{ action, payload string }{
		{schema.ActionComment, `{"body":"hello"}`},
		{schema.ActionAddLabels, `{"labels":["a"]}`},
	}
	for _, c := range cases {
		rec := s.submit(t, "deleted-"+c.action, c.action, issue(n), c.payload)
		got := s.await(t, rec.OperationID, 20*time.Second)
		if got.Status != schema.StatusFailed || got.Attempts != 1 || got.LastErrorCategory != CategoryNotFound ||
			!strings.Contains(got.LastErrorMessage, "This issue was deleted") {
			t.Errorf("%s: status=%s attempts=%d category=%s message=%s", c.action, got.Status, got.Attempts, got.LastErrorCategory, got.LastErrorMessage)
		}
	}
}

// A write to an archived repository is refused for good (403 "Repository
// was archived so is read-only."): one attempt, category forbidden, and
// GitHub's reason on the record. Once unarchived, writes work again.
func TestArchivedRepositoryFailsAsForbidden(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	n, err := s.sim.AddIssue("octo", "demo", ghsim.NewIssue{Title: "in an archived repository"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.sim.ArchiveRepo("octo", "demo", true, ""); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		action  string
		res     schema.Resource
		payload string
	}{
		{schema.ActionComment, issue(n), `{"body":"hello"}`},
		{schema.ActionAddLabels, issue(n), `{"labels":["a"]}`},
		{schema.ActionMerge, schema.Resource{Type: "pull_request", ID: "octo/demo#1"}, `{"sha":"` + ghsim.DemoHeadSHA(1) + `"}`},
		{schema.ActionCreateStatus, schema.Resource{Type: "commit", ID: "octo/demo@" + ghsim.DemoHeadSHA(3)}, `{"state":"success","context":"ci"}`},
	}
	for _, c := range cases {
		rec := s.submit(t, "archived-"+c.action, c.action, c.res, c.payload)
		got := s.await(t, rec.OperationID, 20*time.Second)
		if got.Status != schema.StatusFailed || got.Attempts != 1 || got.LastErrorCategory != CategoryForbidden ||
			!strings.Contains(got.LastErrorMessage, "archived so is read-only") {
			t.Errorf("%s: status=%s attempts=%d category=%s message=%s", c.action, got.Status, got.Attempts, got.LastErrorCategory, got.LastErrorMessage)
		}
	}
	if err := s.sim.ArchiveRepo("octo", "demo", false, ""); err != nil {
		t.Fatal(err)
	}
	rec := s.submit(t, "unarchived-comment", schema.ActionComment, issue(n), `{"body":"hello again"}`)
	if got := s.await(t, rec.OperationID, 20*time.Second); got.Status != schema.StatusSucceeded {
		t.Errorf("after unarchiving: status=%s category=%s message=%s", got.Status, got.LastErrorCategory, got.LastErrorMessage)
	}
}
