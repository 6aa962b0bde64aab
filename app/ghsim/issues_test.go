package ghsim

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/bradleyfalzon/ghinstallation/v2"
	"github.com/google/go-github/v62/github"
)

func TestComments(t *testing.T) {
	t.Parallel()
	e := seeded(t, Config{})
	c := ctx(t)
	cl := e.client(1)
	for i := range 7 {
		cm, resp, err := cl.Issues.CreateComment(c, "octo", "demo", 10, &github.IssueComment{Body: ptr(fmt.Sprintf("comment %d", i))})
		if err != nil || resp.StatusCode != http.StatusCreated || cm.GetUser().GetLogin() != "baton-sim[bot]" {
			t.Fatalf("create comment = %v, %v", cm, err)
		}
	}
	// Pull requests are issues: comments work on their numbers.
	if _, _, err := cl.Issues.CreateComment(c, "octo", "demo", 1, &github.IssueComment{Body: ptr("on a PR")}); err != nil {
		t.Fatal(err)
	}
	_, _, err := cl.Issues.CreateComment(c, "octo", "demo", 10, &github.IssueComment{Body: ptr("")})
	wantStatus(t, err, http.StatusUnprocessableEntity)
	_, _, err = cl.Issues.CreateComment(c, "octo", "demo", 99, &github.IssueComment{Body: ptr("x")})
	wantStatus(t, err, http.StatusNotFound)

	var bodies []string
	opts := &github.IssueListCommentsOptions{ListOptions: github.ListOptions{PerPage: 3}}
	pages := 0
	for {
		page, resp, err := cl.Issues.ListComments(c, "octo", "demo", 10, opts)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		if pages == 1 && (resp.LastPage != 3 || !strings.Contains(resp.Header.Get("Link"), `rel="next"`)) {
			t.Errorf("first page Link = %q", resp.Header.Get("Link"))
		}
		for _, cm := range page {
			bodies = append(bodies, cm.GetBody())
		}
		if resp.NextPage == 0 {
			break
		}
		opts.Page = resp.NextPage
	}
	if pages != 3 || len(bodies) != 7 || bodies[0] != "comment 0" || bodies[6] != "comment 6" {
		t.Errorf("listed %d pages, %v", pages, bodies)
	}
	is, _, err := cl.Issues.Get(c, "octo", "demo", 10)
	if err != nil || is.GetComments() != 7 || is.IsPullRequest() {
		t.Fatalf("GET issue = %v, %v", is, err)
	}
	pi, _, err := cl.Issues.Get(c, "octo", "demo", 1)
	if err != nil || !pi.IsPullRequest() || pi.GetComments() != 1 {
		t.Fatalf("GET issue of a PR = %v, %v", pi, err)
	}
	_, _, err = cl.Issues.Get(c, "octo", "demo", 404)
	wantStatus(t, err, http.StatusNotFound)
	got, _ := e.sim.Issue("octo", "demo", 10)
	if len(got.Comments) != 7 || !got.Comments[0].ByApp {
		t.Errorf("Issue() = %+v", got)
	}
}

func TestLabels(t *testing.T) {
	t.Parallel()
	e := seeded(t, Config{})
	c := ctx(t)
	cl := e.client(1)
	labels, resp, err := cl.Issues.AddLabelsToIssue(c, "octo", "demo", 1, []string{"baton:queue", "bug"})
	if err != nil || resp.StatusCode != http.StatusOK || len(labels) != 2 {
		t.Fatalf("add labels = %v, %v", labels, err)
	}
	// Adding again is idempotent.
	if labels, _, err = cl.Issues.AddLabelsToIssue(c, "octo", "demo", 1, []string{"bug"}); err != nil || len(labels) != 2 {
		t.Fatalf("re-add = %v, %v", labels, err)
	}
	list, _, err := cl.Issues.ListLabelsByIssue(c, "octo", "demo", 1, nil)
	if err != nil || len(list) != 2 || list[0].GetName() != "baton:queue" {
		t.Fatalf("list labels = %v, %v", list, err)
	}
	// Adding matches a label whatever its case; removing needs the exact
	// name.
	if labels, _, err = cl.Issues.AddLabelsToIssue(c, "octo", "demo", 1, []string{"BUG"}); err != nil || len(labels) != 2 {
		t.Fatalf("re-add in another case = %v, %v", labels, err)
	}
	_, err = cl.Issues.RemoveLabelForIssue(c, "octo", "demo", 1, "Baton:Queue")
	wantStatus(t, err, http.StatusNotFound)
	if _, err := cl.Issues.RemoveLabelForIssue(c, "octo", "demo", 1, "baton:queue"); err != nil {
		t.Fatal(err)
	}
	_, err = cl.Issues.RemoveLabelForIssue(c, "octo", "demo", 1, "baton:queue")
	wantStatus(t, err, http.StatusNotFound)
	var er *github.ErrorResponse
	if !errors.As(err, &er) || er.Message != "Label does not exist" {
		t.Errorf("404 message = %v", err)
	}
	_, _, err = cl.Issues.AddLabelsToIssue(c, "octo", "demo", 77, []string{"x"})
	wantStatus(t, err, http.StatusNotFound)
	if _, _, err := cl.Issues.AddLabelsToIssue(c, "octo", "demo", 11, []string{"triage"}); err != nil {
		t.Fatal(err)
	}
	p, _ := e.sim.Pull("octo", "demo", 1)
	is, _ := e.sim.Issue("octo", "demo", 11)
	if fmt.Sprint(p.Labels) != "[bug]" || fmt.Sprint(is.Labels) != "[triage]" {
		t.Errorf("labels: pull %v, issue %v", p.Labels, is.Labels)
	}
	var resources []string
	for _, ef := range e.sim.Effects() {
		resources = append(resources, ef.Resource)
	}
	want := "[issue:octo/demo#1 issue:octo/demo#1 issue:octo/demo#1 issue:octo/demo#1 issue:octo/demo#11]"
	if fmt.Sprint(resources) != want {
		t.Errorf("effects on %v, want %s", resources, want)
	}
	// A name is at most 50 characters (not bytes).
	long := strings.Repeat("é", 50)
	if _, _, err = cl.Issues.AddLabelsToIssue(c, "octo", "demo", 2, []string{long}); err != nil {
		t.Errorf("add a label of 50 characters: %v", err)
	}
	_, _, err = cl.Issues.AddLabelsToIssue(c, "octo", "demo", 2, []string{long + "e"})
	wantStatus(t, err, http.StatusUnprocessableEntity)
}

// A label name with a slash is removed by its name sent with the slash as
// is, as GitHub takes it (the rest of the name escaped). GitHub's own
// description has the name as one path segment, so these requests are not
// checked against it.
func TestLabelNameWithSlash(t *testing.T) {
	t.Parallel()
	e := seeded(t, Config{})
	c := ctx(t)
	itr, err := ghinstallation.New(e.tr, e.sim.AppID(), 1, e.sim.PrivateKeyPEM())
	if err != nil {
		t.Fatal(err)
	}
	itr.BaseURL = e.sim.URL()
	cl := e.gh(itr)
	if _, _, err := cl.Issues.AddLabelsToIssue(c, "octo", "demo", 10, []string{"kind/bug", "kind/bug?", "kind"}); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"kind/bug%3F", "kind/bug"} {
		req, err := cl.NewRequest("DELETE", "repos/octo/demo/issues/10/labels/"+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cl.Do(c, req, nil); err != nil {
			t.Errorf("remove %s: %v", path, err)
		}
	}
	if is, _ := e.sim.Issue("octo", "demo", 10); fmt.Sprint(is.Labels) != "[kind]" {
		t.Errorf("labels left: %v, want [kind]", is.Labels)
	}
}
