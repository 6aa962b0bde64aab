package ghsim

import (
	"errors"
	"net/http"
	"testing"

	"github.com/google/go-github/v62/github"
)

func TestRefs(t *testing.T) {
	t.Parallel()
	e := seeded(t, Config{})
	c := ctx(t)
	cl := e.client(1)
	main, _ := e.sim.Ref("octo", "demo", "heads/main")

	ref, _, err := cl.Git.GetRef(c, "octo", "demo", "heads/main")
	if err != nil || ref.GetRef() != "refs/heads/main" || ref.GetObject().GetSHA() != main {
		t.Fatalf("GET ref = %v, %v", ref, err)
	}
	_, _, err = cl.Git.GetRef(c, "octo", "demo", "heads/nope")
	wantStatus(t, err, http.StatusNotFound)

	child, err := e.sim.AddCommit("octo", "demo", Commit{Parents: []string{main}})
	if err != nil {
		t.Fatal(err)
	}
	sibling, err := e.sim.AddCommit("octo", "demo", Commit{Parents: []string{main}, Message: "elsewhere"})
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := cl.Git.GetCommit(c, "octo", "demo", child)
	if err != nil || got.GetSHA() != child || len(got.Parents) != 1 || got.Parents[0].GetSHA() != main {
		t.Fatalf("GET git commit = %+v, %v", got, err)
	}
	_, _, err = cl.Git.GetCommit(c, "octo", "demo", "0123456789012345678901234567890123456789")
	wantStatus(t, err, http.StatusNotFound)
	update := func(sha string, force bool) (*github.Reference, error) {
		r, _, err := cl.Git.UpdateRef(c, "octo", "demo", &github.Reference{Ref: ptr("heads/main"), Object: &github.GitObject{SHA: ptr(sha)}}, force)
		return r, err
	}
	if r, err := update(child, false); err != nil || r.GetObject().GetSHA() != child {
		t.Fatalf("fast-forward = %v, %v", r, err)
	}
	_, err = update(sibling, false)
	wantStatus(t, err, http.StatusUnprocessableEntity)
	var er *github.ErrorResponse
	if !errors.As(err, &er) || er.Message != "Update is not a fast forward" {
		t.Errorf("non-fast-forward message = %v", err)
	}
	_, err = update("0123456789012345678901234567890123456789", true)
	wantStatus(t, err, http.StatusUnprocessableEntity)
	if r, err := update(sibling, true); err != nil || r.GetObject().GetSHA() != sibling {
		t.Fatalf("forced update = %v, %v", r, err)
	}
	if got, _ := e.sim.Ref("octo", "demo", "heads/main"); got != sibling {
		t.Errorf("main = %s, want %s", got, sibling)
	}

	created, resp, err := cl.Git.CreateRef(c, "octo", "demo", &github.Reference{Ref: ptr("refs/heads/feature/x"), Object: &github.GitObject{SHA: ptr(child)}})
	if err != nil || resp.StatusCode != http.StatusCreated || created.GetRef() != "refs/heads/feature/x" {
		t.Fatalf("create ref = %v, %v", created, err)
	}
	_, _, err = cl.Git.CreateRef(c, "octo", "demo", &github.Reference{Ref: ptr("refs/heads/feature/x"), Object: &github.GitObject{SHA: ptr(child)}})
	wantStatus(t, err, http.StatusUnprocessableEntity)
	if ref, _, err = cl.Git.GetRef(c, "octo", "demo", "heads/feature/x"); err != nil || ref.GetObject().GetSHA() != child {
		t.Fatalf("GET nested ref = %v, %v", ref, err)
	}
	if _, err := cl.Git.DeleteRef(c, "octo", "demo", "heads/feature/x"); err != nil {
		t.Fatal(err)
	}
	_, err = cl.Git.DeleteRef(c, "octo", "demo", "heads/feature/x")
	wantStatus(t, err, http.StatusUnprocessableEntity)

	var kinds []string
	for _, ef := range e.sim.Effects() {
		kinds = append(kinds, ef.Method+" "+ef.Resource)
	}
	want := []string{"PATCH ref:octo/demo:heads/main", "PATCH ref:octo/demo:heads/main", "POST ref:octo/demo:heads/feature/x", "DELETE ref:octo/demo:heads/feature/x"}
	if len(kinds) != len(want) {
		t.Fatalf("effects = %v, want %v", kinds, want)
	}
	for i := range want {
		if kinds[i] != want[i] {
			t.Errorf("effect %d = %s, want %s", i, kinds[i], want[i])
		}
	}
}

func TestFastForwardThroughMerges(t *testing.T) {
	t.Parallel()
	e := seeded(t, Config{})
	main, _ := e.sim.Ref("octo", "demo", "heads/main")
	a, _ := e.sim.AddCommit("octo", "demo", Commit{Parents: []string{main}})
	b, _ := e.sim.AddCommit("octo", "demo", Commit{Parents: []string{main}})
	m, _ := e.sim.AddCommit("octo", "demo", Commit{Parents: []string{a, b}})
	top, _ := e.sim.AddCommit("octo", "demo", Commit{Parents: []string{m}})
	r, _ := e.sim.lookupRepo("octo", "demo")
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, tc := range []struct {
		anc, desc string
		want      bool
	}{{main, top, true}, {a, top, true}, {b, top, true}, {top, main, false}, {a, b, false}, {top, top, true}} {
		if got := r.isAncestor(tc.anc, tc.desc); got != tc.want {
			t.Errorf("isAncestor(%.7s, %.7s) = %v, want %v", tc.anc, tc.desc, got, tc.want)
		}
	}
}
