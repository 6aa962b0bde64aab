package executor

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-github/v62/github"

	"github.com/baton-dev/baton/app/ghsim"
	"github.com/baton-dev/baton/schema"
)

func actionRecord(t *testing.T, action string, res schema.Resource, payload string) (*schema.Record, schema.Target, any) {
	t.Helper()
	rec, err := NewRecord("tester", schema.Submission{IdempotencyKey: t.Name() + time.Now().String(), Action: action,
		Resource: res, Payload: json.RawMessage(payload)}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	tg, err := schema.ParseResource(res)
	if err != nil {
		t.Fatal(err)
	}
	p, err := schema.DecodePayload(action, rec.Payload)
	if err != nil {
		t.Fatal(err)
	}
	return rec, tg, p
}

// Each action against the simulator over HTTP: the call, its
// compare-and-swap refusal, and the probe that finds the effect.
func TestActionsAgainstSimulator(t *testing.T) {
	t.Parallel()
	sim, gh := newSim(t, ghsim.Config{})
	c := installationClient(t, gh)
	ctx := context.Background()
	now := time.Now()

	t.Run("comment", func(t *testing.T) {
		rec, tg, p := actionRecord(t, schema.ActionComment, schema.Resource{Type: "issue", ID: "octo/demo#10"}, `{"body":"hello"}`)
		a := actions[rec.Action]
		if done, _, _, err := a.probe(ctx, c, rec, tg, p); err != nil || done {
			t.Fatalf("probe before = %v, %v", done, err)
		}
		res, _, err := a.do(ctx, c, rec, tg, p)
		if err != nil {
			t.Fatal(err)
		}
		done, pres, _, err := a.probe(ctx, c, rec, tg, p)
		if err != nil || !done || pres.(commentResult).CommentID != res.(commentResult).CommentID {
			t.Fatalf("probe after = %v %+v, %v", done, pres, err)
		}
		is, _ := sim.Issue("octo", "demo", 10)
		if len(is.Comments) != 1 || !strings.Contains(is.Comments[0].Body, CommentMarker(rec.OperationID)) {
			t.Errorf("comments = %+v", is.Comments)
		}
	})

	t.Run("labels", func(t *testing.T) {
		rec, tg, p := actionRecord(t, schema.ActionAddLabels, schema.Resource{Type: "issue", ID: "octo/demo#11"}, `{"labels":["bug","ready"]}`)
		a := actions[rec.Action]
		if _, _, err := a.do(ctx, c, rec, tg, p); err != nil {
			t.Fatal(err)
		}
		if done, _, _, err := a.probe(ctx, c, rec, tg, p); err != nil || !done {
			t.Fatalf("add probe = %v, %v", done, err)
		}
		rec, tg, p = actionRecord(t, schema.ActionRemoveLabel, schema.Resource{Type: "issue", ID: "octo/demo#11"}, `{"label":"bug"}`)
		a = actions[rec.Action]
		if done, _, _, _ := a.probe(ctx, c, rec, tg, p); done {
			t.Fatal("remove probe true before removing")
		}
		if _, _, err := a.do(ctx, c, rec, tg, p); err != nil {
			t.Fatal(err)
		}
		if done, _, _, err := a.probe(ctx, c, rec, tg, p); err != nil || !done {
			t.Fatalf("remove probe = %v, %v", done, err)
		}
		// Removing an absent label is the state asked for.
		if _, _, err := a.do(ctx, c, rec, tg, p); err != nil {
			t.Errorf("removing an absent label: %v", err)
		}
	})

	t.Run("merge", func(t *testing.T) {
		stale := strings.Repeat("f", 40)
		rec, tg, p := actionRecord(t, schema.ActionMerge, schema.Resource{Type: "pull_request", ID: "octo/demo#1"}, `{"sha":"`+stale+`"}`)
		a := actions[rec.Action]
		_, _, err := a.do(ctx, c, rec, tg, p)
		if cl := Classify(err, now); cl.Category != CategoryConflict || cl.Retryable {
			t.Fatalf("stale sha: %+v (%v)", cl, err)
		}
		head := ghsim.DemoHeadSHA(1)
		rec, tg, p = actionRecord(t, schema.ActionMerge, schema.Resource{Type: "pull_request", ID: "octo/demo#1"}, `{"sha":"`+head+`","method":"squash"}`)
		if done, _, _, _ := a.probe(ctx, c, rec, tg, p); done {
			t.Fatal("merge probe true before merging")
		}
		res, _, err := a.do(ctx, c, rec, tg, p)
		if err != nil || !res.(mergeResult).Merged {
			t.Fatalf("merge = %+v, %v", res, err)
		}
		if done, _, _, err := a.probe(ctx, c, rec, tg, p); err != nil || !done {
			t.Fatalf("merge probe = %v, %v", done, err)
		}
	})

	t.Run("update_branch", func(t *testing.T) {
		head := ghsim.DemoHeadSHA(2)
		rec, tg, p := actionRecord(t, schema.ActionUpdateBranch, schema.Resource{Type: "pull_request", ID: "octo/demo#2"}, `{"expectedHeadSha":"`+strings.Repeat("e", 40)+`"}`)
		a := actions[rec.Action]
		_, _, err := a.do(ctx, c, rec, tg, p)
		if cl := Classify(err, now); cl.Category != CategoryConflict {
			t.Fatalf("mismatch: %+v (%v)", cl, err)
		}
		// main moves on: the update has something to bring in.
		moveDemoMain(t, sim)
		rec, tg, p = actionRecord(t, schema.ActionUpdateBranch, schema.Resource{Type: "pull_request", ID: "octo/demo#2"}, `{"expectedHeadSha":"`+head+`"}`)
		if res, _, err := a.do(ctx, c, rec, tg, p); err != nil || !res.(updateBranchResult).Accepted {
			t.Fatalf("update = %+v, %v", res, err)
		}
		if done, _, _, err := a.probe(ctx, c, rec, tg, p); err != nil || !done {
			t.Fatalf("update probe = %v, %v", done, err)
		}
	})

	t.Run("update_ref", func(t *testing.T) {
		base, err := sim.Ref("octo", "demo", "heads/main")
		if err != nil {
			t.Fatal(err)
		}
		next, err := sim.AddCommit("octo", "demo", ghsim.Commit{Parents: []string{base}, Message: "next"})
		if err != nil {
			t.Fatal(err)
		}
		other, err := sim.AddCommit("octo", "demo", ghsim.Commit{Parents: []string{base}, Message: "sideways"})
		if err != nil {
			t.Fatal(err)
		}
		res := schema.Resource{Type: "ref", ID: "octo/demo:heads/main"}
		rec, tg, p := actionRecord(t, schema.ActionUpdateRef, res, `{"sha":"`+next+`","expectedSha":"`+strings.Repeat("0", 40)+`"}`)
		a := actions[rec.Action]
		_, _, err = a.do(ctx, c, rec, tg, p)
		if cl := Classify(err, now); cl.Category != CategoryConflict {
			t.Fatalf("expectedSha mismatch: %+v (%v)", cl, err)
		}
		rec, tg, p = actionRecord(t, schema.ActionUpdateRef, res, `{"sha":"`+next+`","expectedSha":"`+base+`"}`)
		if _, _, err := a.do(ctx, c, rec, tg, p); err != nil {
			t.Fatal(err)
		}
		if done, _, _, err := a.probe(ctx, c, rec, tg, p); err != nil || !done {
			t.Fatalf("ref probe = %v, %v", done, err)
		}
		// A second identical update (a retry) is harmless.
		if _, _, err := a.do(ctx, c, rec, tg, p); err != nil {
			t.Errorf("repeat update: %v", err)
		}
		rec, tg, p = actionRecord(t, schema.ActionUpdateRef, res, `{"sha":"`+other+`"}`)
		_, _, err = a.do(ctx, c, rec, tg, p)
		if cl := Classify(err, now); cl.Category != CategoryConflict {
			t.Fatalf("non-fast-forward: %+v (%v)", cl, err)
		}
	})

	t.Run("status", func(t *testing.T) {
		sha := ghsim.DemoHeadSHA(3)
		rec, tg, p := actionRecord(t, schema.ActionCreateStatus, schema.Resource{Type: "commit", ID: "octo/demo@" + sha},
			`{"state":"success","context":"ci/test","description":"ok"}`)
		res, _, err := actions[rec.Action].do(ctx, c, rec, tg, p)
		if err != nil || res.(statusResult).State != "success" {
			t.Fatalf("status = %+v, %v", res, err)
		}
		sts, _ := sim.Statuses("octo", "demo", sha)
		if len(sts) != 1 {
			t.Errorf("statuses = %+v", sts)
		}
	})
}

// remove_label puts the label's name in the URL path: it must name that
// label and nothing else, whatever characters it holds.
func TestRemoveLabelNameStaysInItsPath(t *testing.T) {
	t.Parallel()
	sim, gh := newSim(t, ghsim.Config{})
	c := installationClient(t, gh)
	ctx := context.Background()
	res := schema.Resource{Type: "issue", ID: "octo/demo#12"}
	remove := func(t *testing.T, label string) error {
		t.Helper()
		rec, tg, _ := actionRecord(t, schema.ActionRemoveLabel, res, `{"label":"placeholder"}`)
		// Built by hand: schema refuses some of these names, but a record
		// stored before it did would still reach the action.
		_, _, err := actions[rec.Action].do(ctx, c, rec, tg, &schema.RemoveLabelPayload{Label: label})
		return err
	}
	labels := func() []string {
		is, err := sim.Issue("octo", "demo", 12)
		if err != nil {
			t.Fatal(err)
		}
		return is.Labels
	}

	t.Run("traversal", func(t *testing.T) {
		base, _ := sim.Ref("octo", "demo", "heads/main")
		if err := sim.SetRef("octo", "demo", "heads/victim", base, ""); err != nil {
			t.Fatal(err)
		}
		before := len(sim.Effects())
		for _, l := range []string{"../../../git/refs/heads/victim", "..", "x/../../../../git/refs/heads/victim"} {
			err := remove(t, l)
			if cl := Classify(err, time.Now()); cl.Category != CategoryValidation || cl.Retryable {
				t.Errorf("%q: %+v (%v)", l, cl, err)
			}
		}
		if ref, err := sim.Ref("octo", "demo", "heads/victim"); err != nil || ref != base {
			t.Errorf("victim branch = %q, %v", ref, err)
		}
		if eff := sim.Effects()[before:]; len(eff) != 0 {
			t.Errorf("mutations made: %+v", eff)
		}
	})
	t.Run("question mark", func(t *testing.T) {
		for _, l := range []string{"ready", "ready?"} {
			if err := sim.AddLabel("octo", "demo", 12, l, ""); err != nil {
				t.Fatal(err)
			}
		}
		if err := remove(t, "ready?"); err != nil {
			t.Fatal(err)
		}
		if got := labels(); !slices.Contains(got, "ready") || slices.Contains(got, "ready?") {
			t.Errorf("labels after removing %q: %v", "ready?", got)
		}
	})
	t.Run("percent", func(t *testing.T) {
		if err := sim.AddLabel("octo", "demo", 12, "50%", ""); err != nil {
			t.Fatal(err)
		}
		if err := remove(t, "50%"); err != nil {
			t.Fatalf("%v (%+v)", err, Classify(err, time.Now()))
		}
		if got := labels(); slices.Contains(got, "50%") {
			t.Errorf("labels: %v", got)
		}
	})
}

// The path remove_label asks for, byte for byte: parts escaped, slashes
// kept (GitHub does not find "kind/bug" sent as kind%2Fbug).
func TestRemoveLabelPath(t *testing.T) {
	t.Parallel()
	var (
		mu   sync.Mutex
		uris []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodDelete {
			mu.Lock()
			uris = append(uris, r.RequestURI)
			mu.Unlock()
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`[]`))
	}))
	t.Cleanup(srv.Close)
	c := github.NewClient(srv.Client())
	c.BaseURL, _ = url.Parse(srv.URL + "/api/v3/")
	for label, want := range map[string]string{
		"kind/bug":     "/api/v3/repos/octo/demo/issues/12/labels/kind/bug",
		"ready?":       "/api/v3/repos/octo/demo/issues/12/labels/ready%3F",
		"50%":          "/api/v3/repos/octo/demo/issues/12/labels/50%25",
		"help wanted":  "/api/v3/repos/octo/demo/issues/12/labels/help%20wanted",
		"#1 ..x":       "/api/v3/repos/octo/demo/issues/12/labels/%231%20..x",
		"status:stale": "/api/v3/repos/octo/demo/issues/12/labels/status:stale",
	} {
		mu.Lock()
		uris = nil
		mu.Unlock()
		tg := schema.Target{Owner: "octo", Repo: "demo", Number: 12}
		if _, _, err := (removeLabelAction{}).do(context.Background(), c, &schema.Record{}, tg, &schema.RemoveLabelPayload{Label: label}); err != nil {
			t.Fatalf("%q: %v", label, err)
		}
		mu.Lock()
		if len(uris) != 1 || uris[0] != want {
			t.Errorf("%q: DELETE %v, want %s", label, uris, want)
		}
		mu.Unlock()
	}
}

// A comment carrying the operation's marker counts only when the App
// posted it: anyone who can comment could copy the marker.
func TestCommentProbeTrustsOnlyTheApp(t *testing.T) {
	t.Parallel()
	sim, gh := newSim(t, ghsim.Config{})
	c := installationClient(t, gh)
	ctx := withApp(context.Background(), gh.identity)
	rec, tg, p := actionRecord(t, schema.ActionComment, schema.Resource{Type: "issue", ID: "octo/demo#11"}, `{"body":"hello"}`)
	a := actions[rec.Action]
	if _, err := sim.AddComment("octo", "demo", 11, "forged\n\n"+CommentMarker(rec.OperationID), "mallory"); err != nil {
		t.Fatal(err)
	}
	if done, _, _, err := a.probe(ctx, c, rec, tg, p); err != nil || done {
		t.Fatalf("probe with a person's copy of the marker = %v, %v", done, err)
	}
	res, _, err := a.do(ctx, c, rec, tg, p)
	if err != nil {
		t.Fatal(err)
	}
	done, pres, _, err := a.probe(ctx, c, rec, tg, p)
	if err != nil || !done || pres.(commentResult).CommentID != res.(commentResult).CommentID {
		t.Fatalf("probe after the App's comment = %v %+v, %v (posted %+v)", done, pres, err, res)
	}
	// Another App's bot is not baton's App.
	is, _ := sim.Issue("octo", "demo", 11)
	for _, cm := range is.Comments {
		if strings.Contains(cm.Body, "hello") && (!cm.ByApp || !strings.HasSuffix(cm.User, "[bot]")) {
			t.Errorf("the App's comment as the simulator shows it: %+v", cm)
		}
	}
	other := withApp(context.Background(), func(context.Context) (appIdentity, error) {
		return appIdentity{Slug: "someone-else"}, nil
	})
	if done, _, _, err := a.probe(other, c, rec, tg, p); err != nil || done {
		t.Errorf("probe for another App = %v, %v", done, err)
	}
}

// The comment probe lists by update time: a comment created before the
// operation and edited since is listed, and may carry the marker of an
// earlier operation of the same ID (same actor and key, its record
// deleted by retention). It is not this operation's effect.
func TestCommentProbeSkipsOlderComments(t *testing.T) {
	t.Parallel()
	created := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	rec, tg, p := actionRecord(t, schema.ActionComment, schema.Resource{Type: "issue", ID: "octo/demo#11"}, `{"body":"hello"}`)
	rec.CreatedAt = created
	comment := func(at time.Time) string {
		return fmt.Sprintf(`{"id":7,"body":%q,"user":{"login":"baton[bot]","type":"Bot"},"created_at":%q,"updated_at":%q}`,
			"hello\n\n"+CommentMarker(rec.OperationID), at.Format(time.RFC3339), created.Add(time.Hour).Format(time.RFC3339))
	}
	var listed string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte("[" + listed + "]"))
	}))
	t.Cleanup(srv.Close)
	c := github.NewClient(srv.Client())
	c.BaseURL, _ = url.Parse(srv.URL + "/api/v3/")
	ctx := withApp(context.Background(), func(context.Context) (appIdentity, error) { return appIdentity{Slug: "baton"}, nil })
	for _, tc := range []struct {
		name string
		at   time.Time
		want bool
	}{
		{"made a day before the operation, edited since", created.Add(-24 * time.Hour), false},
		{"made after the operation", created.Add(time.Minute), true},
		{"made within the clock-skew margin", created.Add(-5 * time.Minute), true},
	} {
		listed = comment(tc.at)
		done, _, _, err := actions[rec.Action].probe(ctx, c, rec, tg, p)
		if err != nil || done != tc.want {
			t.Errorf("%s: probe = %v, %v; want %v", tc.name, done, err, tc.want)
		}
	}
}

// remove_label records the labels GitHub's answer to the removal lists
// (the remaining labels, as GitHub documents), without a second request
// whose list could lag behind the removal.
func TestRemoveLabelRecordsTheAnswersLabels(t *testing.T) {
	t.Parallel()
	var (
		mu   sync.Mutex
		gets int
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.Method == http.MethodGet {
			mu.Lock()
			gets++
			mu.Unlock()
			_, _ = w.Write([]byte(`[{"name":"kept"},{"name":"bug"}]`)) // a list not yet caught up
			return
		}
		_, _ = w.Write([]byte(`[{"name":"kept"}]`))
	}))
	t.Cleanup(srv.Close)
	c := github.NewClient(srv.Client())
	c.BaseURL, _ = url.Parse(srv.URL + "/")
	tg := schema.Target{Owner: "octo", Repo: "demo", Number: 12}
	res, _, err := (removeLabelAction{}).do(context.Background(), c, &schema.Record{}, tg, &schema.RemoveLabelPayload{Label: "bug"})
	if err != nil {
		t.Fatal(err)
	}
	if got := res.(labelsResult).Labels; !slices.Equal(got, []string{"kept"}) {
		t.Errorf("labels %q, want the answer's [kept]", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if gets != 0 {
		t.Errorf("%d further requests after the removal, want none", gets)
	}
}

// A marker quoted inside another comment of the App is not the
// operation's effect: any client may submit a comment whose body carries
// another operation's marker, and the App posts it (with its own marker
// after). Taken for the effect, it would make that operation succeed,
// after an ambiguous failure, without its comment ever being posted.
func TestCommentProbeIgnoresAQuotedMarker(t *testing.T) {
	t.Parallel()
	sim, gh := newSim(t, ghsim.Config{})
	c := installationClient(t, gh)
	ctx := withApp(context.Background(), gh.identity)
	victim, tg, p := actionRecord(t, schema.ActionComment, schema.Resource{Type: "issue", ID: "octo/demo#11"}, `{"body":"the real one"}`)
	quoting, qtg, qp := actionRecord(t, schema.ActionComment, schema.Resource{Type: "issue", ID: "octo/demo#11"},
		fmt.Sprintf(`{"body":%q}`, "see\n\n"+CommentMarker(victim.OperationID)+"\n"))
	a := actions[schema.ActionComment]
	if _, _, err := a.do(ctx, c, quoting, qtg, qp); err != nil {
		t.Fatal(err)
	}
	if done, _, _, err := a.probe(ctx, c, victim, tg, p); err != nil || done {
		t.Fatalf("probe with the marker quoted by another operation's comment = %v, %v", done, err)
	}
	res, _, err := a.do(ctx, c, victim, tg, p)
	if err != nil {
		t.Fatal(err)
	}
	done, pres, _, err := a.probe(ctx, c, victim, tg, p)
	if err != nil || !done || pres.(commentResult).CommentID != res.(commentResult).CommentID {
		t.Fatalf("probe after the operation's own comment = %v %+v, %v (posted %+v)", done, pres, err, res)
	}
	if is, _ := sim.Issue("octo", "demo", 11); len(is.Comments) != 2 {
		t.Errorf("comments: %+v", is.Comments)
	}
}

// A pull request whose head has every commit of its base is already what
// update_branch asks for: GitHub answers 422 "There are no new commits on
// the base branch." and makes no commit, and the operation succeeds
// instead of failing as invalid.
func TestUpdateBranchAlreadyUpToDate(t *testing.T) {
	t.Parallel()
	sim, gh := newSim(t, ghsim.Config{})
	c := installationClient(t, gh)
	ctx := context.Background()
	head := ghsim.DemoHeadSHA(1)
	rec, tg, p := actionRecord(t, schema.ActionUpdateBranch, schema.Resource{Type: "pull_request", ID: "octo/demo#1"}, `{"expectedHeadSha":"`+head+`"}`)
	res, resp, err := actions[rec.Action].do(ctx, c, rec, tg, p)
	if err != nil {
		t.Fatalf("update of an up-to-date branch: %+v (%v)", Classify(err, time.Now()), err)
	}
	if r := res.(updateBranchResult); !r.UpToDate || r.Accepted || resp.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("result = %+v, status %d", r, resp.StatusCode)
	}
	if pr, err := sim.Pull("octo", "demo", 1); err != nil || pr.HeadSHA != head {
		t.Fatalf("head = %s, %v; want it unchanged", pr.HeadSHA, err)
	}
	// A stale expectation is still the compare-and-swap's conflict.
	rec, tg, p = actionRecord(t, schema.ActionUpdateBranch, schema.Resource{Type: "pull_request", ID: "octo/demo#1"}, `{"expectedHeadSha":"`+strings.Repeat("e", 40)+`"}`)
	if _, _, err := actions[rec.Action].do(ctx, c, rec, tg, p); Classify(err, time.Now()).Category != CategoryConflict {
		t.Fatalf("stale expectedHeadSha: %v", err)
	}
}

// GitHub removes a label only by its exact name ("Stale" leaves "stale":
// 404 "Label does not exist"), although label names are case-insensitive
// everywhere else: remove_label of "Triage" takes "triage" off the issue
// instead of succeeding with it still there.
func TestRemoveLabelInAnotherCase(t *testing.T) {
	t.Parallel()
	sim, gh := newSim(t, ghsim.Config{})
	c := installationClient(t, gh)
	ctx := context.Background()
	if err := sim.AddLabel("octo", "demo", 11, "triage", ""); err != nil {
		t.Fatal(err)
	}
	if err := sim.AddLabel("octo", "demo", 11, "keep", ""); err != nil {
		t.Fatal(err)
	}
	rec, tg, p := actionRecord(t, schema.ActionRemoveLabel, schema.Resource{Type: "issue", ID: "octo/demo#11"}, `{"label":"Triage"}`)
	a := actions[rec.Action]
	res, _, err := a.do(ctx, c, rec, tg, p)
	if err != nil {
		t.Fatal(err)
	}
	is, err := sim.Issue("octo", "demo", 11)
	if err != nil || fmt.Sprint(is.Labels) != "[keep]" {
		t.Fatalf("labels left = %v, %v; want [keep]", is.Labels, err)
	}
	if got := fmt.Sprint(res.(labelsResult).Labels); got != "[keep]" {
		t.Errorf("result labels = %s", got)
	}
	if done, _, _, err := a.probe(ctx, c, rec, tg, p); err != nil || !done {
		t.Errorf("probe = %v, %v", done, err)
	}
	// A label the issue does not have, in no case, is absent: done.
	rec, tg, p = actionRecord(t, schema.ActionRemoveLabel, schema.Resource{Type: "issue", ID: "octo/demo#11"}, `{"label":"Absent"}`)
	if res, _, err := a.do(ctx, c, rec, tg, p); err != nil || fmt.Sprint(res.(labelsResult).Labels) != "[keep]" {
		t.Fatalf("absent label = %+v, %v", res, err)
	}
}

// GitHub documents a 301 answer to adding labels to (and removing one
// from) an issue that moved. Go's default client would follow it with a
// GET, which lists the moved issue's labels with 200: the labels, never
// added, would be recorded added. baton's client stops at such a redirect
// and the operation fails as not found.
func TestMovedIssueRedirectIsNotFollowedAsGET(t *testing.T) {
	t.Parallel()
	var (
		mu      sync.Mutex
		methods []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		methods = append(methods, r.Method+" "+r.URL.Path)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/repos/octo/demo/issues/5/labels" {
			w.Header().Set("Location", "/repos/octo/other/issues/9/labels")
			w.WriteHeader(http.StatusMovedPermanently)
			_, _ = w.Write([]byte(`{"message":"Moved Permanently","url":"/repos/octo/other/issues/9/labels"}`))
			return
		}
		_, _ = w.Write([]byte(`[{"name":"old"}]`))
	}))
	t.Cleanup(srv.Close)
	c := github.NewClient(httpClient(http.DefaultTransport))
	c.BaseURL, _ = url.Parse(srv.URL + "/")
	tg := schema.Target{Owner: "octo", Repo: "demo", Number: 5}
	res, _, err := (addLabelsAction{}).do(context.Background(), c, &schema.Record{}, tg, &schema.AddLabelsPayload{Labels: []string{"bug"}})
	if err == nil {
		t.Fatalf("add labels to a moved issue succeeded: %+v (requests %v)", res, methods)
	}
	if cl := Classify(err, time.Now()); cl.Category != CategoryNotFound || cl.Retryable || cl.Status != http.StatusMovedPermanently {
		t.Errorf("classified %+v", cl)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(methods) != 1 {
		t.Errorf("requests %v, want the POST alone", methods)
	}
}

// tokenTransport adds an installation token to every request, as the
// installation transport does.
type tokenTransport struct{}

func (tokenTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "token ghs_secret")
	return http.DefaultTransport.RoundTrip(r)
}

// A redirect to another host, of a read or a mutation, is not followed:
// the installation token would go with it.
func TestRedirectToAnotherHostIsNotFollowed(t *testing.T) {
	t.Parallel()
	var reached atomic.Int64
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		if r.Header.Get("Authorization") != "" {
			t.Errorf("the token reached another host: %s %s", r.Method, r.URL.Path)
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`[{"name":"bug"}]`))
	}))
	t.Cleanup(elsewhere.Close)
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code := http.StatusTemporaryRedirect // keeps the method
		if r.Method == http.MethodGet {
			code = http.StatusMovedPermanently
		}
		http.Redirect(w, r, elsewhere.URL+r.URL.Path, code)
	}))
	t.Cleanup(api.Close)
	c := github.NewClient(httpClient(tokenTransport{}))
	c.BaseURL, _ = url.Parse(api.URL + "/")
	tg := schema.Target{Owner: "octo", Repo: "demo", Number: 5}
	if _, _, err := (addLabelsAction{}).do(context.Background(), c, &schema.Record{}, tg, &schema.AddLabelsPayload{Labels: []string{"bug"}}); err == nil {
		t.Error("add labels through a redirect to another host succeeded")
	}
	if _, _, err := c.Issues.ListLabelsByIssue(context.Background(), "octo", "demo", 5, nil); err == nil {
		t.Error("a read through a redirect to another host succeeded")
	}
	if n := reached.Load(); n != 0 {
		t.Errorf("the other host got %d requests", n)
	}
}

// A label GitHub lists on the issue but answers "Label does not exist" to
// removing by that very name is still there: the removal fails instead
// of being recorded done.
func TestRemoveLabelListedButNotFound(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.Method == http.MethodDelete {
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"message":"Label does not exist"}`))
			return
		}
		_, _ = w.Write([]byte(`[{"name":"x y"}]`))
	}))
	t.Cleanup(srv.Close)
	c := github.NewClient(srv.Client())
	c.BaseURL, _ = url.Parse(srv.URL + "/")
	tg := schema.Target{Owner: "octo", Repo: "demo", Number: 12}
	res, _, err := (removeLabelAction{}).do(context.Background(), c, &schema.Record{}, tg, &schema.RemoveLabelPayload{Label: "x y"})
	if cl := Classify(err, time.Now()); err == nil || cl.Category != CategoryValidation || cl.Retryable {
		t.Fatalf("remove = %+v, %v (%+v); want a validation failure", res, err, cl)
	}
}
