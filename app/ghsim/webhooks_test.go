package ghsim

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-github/v62/github"
)

func TestSignPayload(t *testing.T) {
	t.Parallel()
	// GitHub's documented example.
	got := SignPayload("It's a Secret to Everybody", []byte("Hello, World!"))
	if got != "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17" {
		t.Errorf("SignPayload = %s", got)
	}
}

// TestWebhooksFromPeople checks the events of what people do on "GitHub"
// (the admin API): each is delivered, signed, shaped as GitHub documents,
// and in order.
func TestWebhooksFromPeople(t *testing.T) {
	t.Parallel()
	e := seeded(t, Config{})
	rc := newReceiver(e)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(e.sim.AddLabel("octo", "demo", 1, "baton:queue", "alice"))
	_, err := e.sim.AddComment("octo", "demo", 1, "/baton queue", "alice")
	must(err)
	head, err := e.sim.PushPull("octo", "demo", 1, "", "alice")
	must(err)
	must(e.sim.SetStatus("octo", "demo", head, NewStatus{State: "success", Context: "ci"}))
	id, err := e.sim.AddCheckRun("octo", "demo", NewCheckRun{Name: "test", HeadSHA: head})
	must(err)
	must(e.sim.CompleteCheckRun("octo", "demo", id, "success"))
	must(e.sim.RemoveLabel("octo", "demo", 1, "baton:queue", "alice"))
	must(e.sim.AddLabel("octo", "demo", 10, "bug", "bob"))
	must(e.sim.RemoveLabel("octo", "demo", 10, "bug", "bob"))
	must(e.sim.ClosePull("octo", "demo", 2, true, "bob"))
	must(e.sim.ClosePull("octo", "demo", 2, false, "bob"))
	_, err = e.sim.AddPull("octo", "demo", NewPull{Title: "new"})
	must(err)
	_, err = e.sim.AddIssue("octo", "demo", NewIssue{Title: "new"})
	must(err)

	want := []string{
		"pull_request.labeled", "issue_comment.created", "push", "pull_request.synchronize", "status",
		"check_run.completed", "check_suite.completed", "pull_request.unlabeled", "issues.labeled",
		"issues.unlabeled", "pull_request.closed", "pull_request.reopened", "pull_request.opened", "issues.opened",
	}
	got := rc.wait(len(want))
	if !slices.Equal(events(got), want) {
		t.Fatalf("events\n got %v\nwant %v", events(got), want)
	}
	for _, h := range got {
		inst, _ := h.Payload["installation"].(map[string]any)
		sender, _ := h.Payload["sender"].(map[string]any)
		if inst["id"] != float64(1) || sender["login"] == nil || h.Payload["repository"] == nil {
			t.Errorf("%s: installation %v sender %v", h.Event, inst, sender)
		}
	}
	if l := got[0].Payload["label"].(map[string]any); l["name"] != "baton:queue" {
		t.Errorf("labeled label = %v", l)
	}
	if got[3].Payload["after"] != head || got[3].Payload["before"] != DemoHeadSHA(1) {
		t.Errorf("synchronize before/after = %v/%v", got[3].Payload["before"], got[3].Payload["after"])
	}
	if err := e.sim.WaitDeliveries(ctx(t)); err != nil {
		t.Fatal(err)
	}
	ds := e.sim.Deliveries()
	if len(ds) != len(want) || !ds[0].OK() || ds[0].GUID != got[0].GUID {
		t.Errorf("deliveries log: %d entries, first %+v", len(ds), ds[0])
	}
}

// TestWebhooksFromREST checks that mutations made through the REST API
// emit what GitHub emits.
func TestWebhooksFromREST(t *testing.T) {
	t.Parallel()
	e := seeded(t, Config{})
	rc := newReceiver(e)
	c := ctx(t)
	cl := e.client(1)
	if _, _, err := cl.Issues.AddLabelsToIssue(c, "octo", "demo", 2, []string{"baton:queue"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := cl.Issues.CreateComment(c, "octo", "demo", 2, &github.IssueComment{Body: ptr("2nd in queue")}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := cl.Repositories.CreateStatus(c, "octo", "demo", DemoHeadSHA(2), &github.RepoStatus{State: ptr("pending"), Context: ptr("baton/queue")}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := cl.PullRequests.Merge(c, "octo", "demo", 2, "", &github.PullRequestOptions{SHA: DemoHeadSHA(2)}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Issues.RemoveLabelForIssue(c, "octo", "demo", 2, "baton:queue"); err != nil {
		t.Fatal(err)
	}
	want := []string{"pull_request.labeled", "issue_comment.created", "status", "push", "pull_request.closed", "pull_request.unlabeled"}
	got := rc.wait(len(want))
	if !slices.Equal(events(got), want) {
		t.Fatalf("events\n got %v\nwant %v", events(got), want)
	}
	closed := got[4].Payload["pull_request"].(map[string]any)
	if closed["merged"] != true || got[4].Payload["sender"].(map[string]any)["login"] != "baton-sim[bot]" {
		t.Errorf("closed payload: merged %v sender %v", closed["merged"], got[4].Payload["sender"])
	}
}

func TestWebhooksForInstallations(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	rc := newReceiver(e)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err := e.sim.AddRepo("octo", "demo", 1)
	must(err)
	_, err = e.sim.AddRepo("octo", "more", 1)
	must(err)
	must(e.sim.AddInstallation(5, "acme"))
	must(e.sim.SuspendInstallation(1, true))
	must(e.sim.SuspendInstallation(1, false))
	must(e.sim.RemoveRepo("octo", "more"))
	must(e.sim.DeleteInstallation(1))
	want := []string{
		"installation.created", "installation_repositories.added", "installation.created", "installation.suspend",
		"installation.unsuspend", "installation_repositories.removed", "installation.deleted",
	}
	got := rc.wait(len(want))
	// Deliveries are ordered per installation; across installations they race.
	var one, five []string
	for _, h := range got {
		if h.Payload["installation"].(map[string]any)["id"] == float64(5) {
			five = append(five, events([]hook{h})...)
		} else {
			one = append(one, events([]hook{h})...)
		}
	}
	if !slices.Equal(five, []string{"installation.created"}) || !slices.Equal(one, slices.Delete(slices.Clone(want), 2, 3)) {
		t.Fatalf("installation 1: %v; installation 5: %v", one, five)
	}
	for _, h := range got {
		if h.Action == "created" && h.Payload["installation"].(map[string]any)["id"] == float64(1) {
			if repos := h.Payload["repositories"].([]any); len(repos) != 1 {
				t.Errorf("created with %d repositories", len(repos))
			}
		}
	}
}

// TestWebhooksOrderedPerRepository checks that many quick events on one
// repository arrive in the order they happened, while the REST handlers
// never wait for the receiver.
func TestWebhooksOrderedPerRepository(t *testing.T) {
	t.Parallel()
	e := seeded(t, Config{})
	rc := newReceiver(e)
	for i := range 30 {
		if _, err := e.sim.AddComment("octo", "demo", 10, fmt.Sprint(i), ""); err != nil {
			t.Fatal(err)
		}
	}
	got := rc.wait(30)
	for i, h := range got {
		if body := h.Payload["comment"].(map[string]any)["body"]; body != fmt.Sprint(i) {
			t.Fatalf("delivery %d carries comment %v", i, body)
		}
	}
}

// TestWebhooksNotSentWhileSuspended checks that what happens in the
// repositories of a suspended installation is not delivered, as on
// GitHub, where a suspension blocks the App's webhook events for the
// account as well as its access; the installation's own suspend and
// unsuspend events are.
func TestWebhooksNotSentWhileSuspended(t *testing.T) {
	t.Parallel()
	e := seeded(t, Config{})
	rc := newReceiver(e)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(e.sim.SuspendInstallation(DemoInstallationID, true))
	must(e.sim.AddLabel("octo", "demo", 1, "baton:queue", "alice"))
	_, err := e.sim.AddComment("octo", "demo", 1, "/baton queue", "alice")
	must(err)
	must(e.sim.SuspendInstallation(DemoInstallationID, false))
	must(e.sim.RemoveLabel("octo", "demo", 1, "baton:queue", "alice"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	must(e.sim.WaitDeliveries(ctx))
	got := events(rc.wait(3))
	slices.Sort(got)
	if want := []string{"installation.suspend", "installation.unsuspend", "pull_request.unlabeled"}; !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
}
