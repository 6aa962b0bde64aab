package executor

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

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
	c, err := gh.Installation(1)
	if err != nil {
		t.Fatal(err)
	}
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
