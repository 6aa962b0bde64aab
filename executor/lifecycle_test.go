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
