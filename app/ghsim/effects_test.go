package ghsim

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-github/v62/github"
)

// TestEffectsUnderConcurrency drives 32 clients at once, each with its own
// go-github client and installation token, on four repositories of four
// installations (and people commenting through the Go API meanwhile), and
// checks that the effect log holds every applied mutation exactly once,
// that AppliedAt never decreases with Seq (across repositories too), and
// that webhooks arrive in each repository's order.
func TestEffectsUnderConcurrency(t *testing.T) {
	t.Parallel()
	e := seeded(t, Config{})
	c := ctx(t)
	const clients, perClient, people = 32, 4, 4
	repos := []struct {
		owner, name string
		inst        int64
	}{{"octo", "demo", 1}, {"acme", "widgets", 2}, {"beta", "tools", 3}, {"gamma", "site", 4}}
	for _, r := range repos {
		if _, err := e.sim.AddRepo(r.owner, r.name, r.inst); err != nil {
			t.Fatal(err)
		}
		for n := 20; n < 24; n++ {
			if _, err := e.sim.AddIssue(r.owner, r.name, NewIssue{Number: n, Title: "x"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	rc := newReceiver(e)
	hooksBefore := len(rc.wait(0))
	var (
		mu   sync.Mutex
		seen = map[string]string{} // request ID → resource commented on
		inst = map[string]int64{}  // request ID → installation
		wg   sync.WaitGroup
	)
	for i := range clients {
		r := repos[i%len(repos)]
		cl := e.client(r.inst) // a client, and a token, of its own
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range perClient {
				n := 20 + (i+j)%4
				body := fmt.Sprintf("client %d comment %d", i, j)
				_, resp, err := cl.Issues.CreateComment(c, r.owner, r.name, n, &github.IssueComment{Body: &body})
				if err != nil {
					t.Error(err)
					return
				}
				id := resp.Header.Get("X-GitHub-Request-Id")
				mu.Lock()
				if _, dup := seen[id]; dup {
					t.Errorf("request ID %s answered twice", id)
				}
				seen[id] = fmt.Sprintf("issue:%s/%s#%d", r.owner, r.name, n)
				inst[id] = r.inst
				mu.Unlock()
				if _, _, err := cl.Issues.Get(c, r.owner, r.name, n); err != nil { // reads apply nothing
					t.Error(err)
					return
				}
			}
		}()
	}
	for i := range people {
		r := repos[i%len(repos)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range perClient {
				if _, err := e.sim.AddComment(r.owner, r.name, 20+j%4, fmt.Sprintf("person %d says %d", i, j), "alice"); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()

	// Deliveries of one repository arrive in the order of its history.
	hooks := rc.wait(hooksBefore + (clients+people)*perClient)
	order := map[string][]float64{} // "owner/name#n" → comment IDs as delivered
	for _, h := range hooks {
		if h.Event != "issue_comment" {
			continue
		}
		repo := h.Payload["repository"].(map[string]any)["full_name"].(string)
		n := h.Payload["issue"].(map[string]any)["number"].(float64)
		key := fmt.Sprintf("%s#%v", repo, n)
		order[key] = append(order[key], h.Payload["comment"].(map[string]any)["id"].(float64))
	}
	for _, r := range repos {
		for n := 20; n < 24; n++ {
			key := fmt.Sprintf("%s/%s#%d", r.owner, r.name, n)
			is, _ := e.sim.Issue(r.owner, r.name, n)
			ids := order[key]
			if len(ids) != len(is.Comments) {
				t.Fatalf("%s: %d deliveries for %d comments", key, len(ids), len(is.Comments))
			}
			for i, id := range ids {
				if int64(id) != is.Comments[i].ID {
					t.Fatalf("%s: delivery %d is comment %v, want %d", key, i, id, is.Comments[i].ID)
				}
			}
		}
	}

	effects := e.sim.Effects()
	if len(effects) != clients*perClient || len(seen) != clients*perClient {
		t.Fatalf("%d effects for %d comments", len(effects), len(seen))
	}
	perResource := map[string]int{}
	for i, ef := range effects {
		if i > 0 && ef.Seq <= effects[i-1].Seq {
			t.Errorf("effect %d has seq %d after %d", i, ef.Seq, effects[i-1].Seq)
		}
		if i > 0 && ef.AppliedAt.Before(effects[i-1].AppliedAt) {
			t.Errorf("effect %d (%s) applied at %s, before effect %d (%s) at %s", ef.Seq, ef.Resource, ef.AppliedAt.Format(time.StampNano),
				effects[i-1].Seq, effects[i-1].Resource, effects[i-1].AppliedAt.Format(time.StampNano))
		}
		if ef.AppliedAt.Before(ef.StartedAt) || ef.EndedAt.Before(ef.AppliedAt) {
			t.Errorf("effect %d: started %s, applied %s, ended %s", ef.Seq, ef.StartedAt, ef.AppliedAt, ef.EndedAt)
		}
		res, ok := seen[ef.RequestID]
		if !ok {
			t.Errorf("effect %+v is not one of the answered requests, or is logged twice", ef)
			continue
		}
		if res != ef.Resource || ef.Status != 201 || ef.InstallationID != inst[ef.RequestID] || ef.Method != "POST" {
			t.Errorf("effect %+v does not match its response", ef)
		}
		delete(seen, ef.RequestID)
		perResource[ef.Resource]++
	}
	if len(seen) != 0 {
		t.Errorf("%d answered requests have no effect", len(seen))
	}
	// Each issue got its share of the clients' comments.
	for _, r := range repos {
		for n := 20; n < 24; n++ {
			key := fmt.Sprintf("issue:%s/%s#%d", r.owner, r.name, n)
			if got := perResource[key]; got != clients*perClient/16 {
				t.Errorf("%s: %d effects, want %d", key, got, clients*perClient/16)
			}
		}
	}
	if since := e.sim.EffectsSince(120); len(since) != 8 || since[0].Seq != 121 {
		t.Errorf("EffectsSince(120) = %d effects", len(since))
	}
}

// A clock set back (Config.Now) does not make AppliedAt go back with it:
// AppliedAt never decreases with Seq.
func TestEffectsAppliedAtWithClockSetBack(t *testing.T) {
	t.Parallel()
	var (
		mu sync.Mutex
		at = time.Now()
	)
	clock := func() time.Time { // a millisecond earlier at each reading
		mu.Lock()
		defer mu.Unlock()
		at = at.Add(-time.Millisecond)
		return at
	}
	e := seeded(t, Config{Now: clock})
	c := ctx(t)
	cl := e.client(1)
	for i := range 5 {
		if _, _, err := cl.Issues.CreateComment(c, "octo", "demo", 10, &github.IssueComment{Body: ptr(fmt.Sprint("comment ", i))}); err != nil {
			t.Fatal(err)
		}
	}
	effects := e.sim.Effects()
	if len(effects) != 5 {
		t.Fatalf("%d effects for 5 comments", len(effects))
	}
	for i := 1; i < len(effects); i++ {
		if effects[i].AppliedAt.Before(effects[i-1].AppliedAt) {
			t.Errorf("effect %d applied at %s, before effect %d at %s", effects[i].Seq, effects[i].AppliedAt.Format(time.StampNano),
				effects[i-1].Seq, effects[i-1].AppliedAt.Format(time.StampNano))
		}
	}
}

// An effect whose request is still in flight has no end: the admin API
// leaves endedAt out rather than showing the zero time.
func TestEffectsInFlightHaveNoEnd(t *testing.T) {
	t.Parallel()
	e := seeded(t, Config{})
	c := ctx(t)
	if _, _, err := e.client(1).Issues.CreateComment(c, "octo", "demo", 10, &github.IssueComment{Body: ptr("done")}); err != nil {
		t.Fatal(err)
	}
	e.sim.effects.add(Effect{Method: "POST", Path: "/repos/octo/demo/issues/11/comments", Status: 201,
		Resource: "issue:octo/demo#11", StartedAt: time.Now()}, time.Now()) // as a handler does, before finish
	var raw []map[string]json.RawMessage
	if st := e.admin("GET", "/_ghsim/effects", nil, &raw); st != 200 || len(raw) != 2 {
		t.Fatalf("GET /_ghsim/effects = %d, %d effects", st, len(raw))
	}
	if _, ok := raw[0]["endedAt"]; !ok {
		t.Errorf("the finished effect has no endedAt: %v", raw[0])
	}
	if end, ok := raw[1]["endedAt"]; ok {
		t.Errorf("the in-flight effect shows endedAt %s", end)
	}
	for _, k := range []string{"startedAt", "appliedAt"} {
		if v := string(raw[1][k]); v == "" || strings.HasPrefix(v, `"0001-`) {
			t.Errorf("the in-flight effect's %s = %s", k, v)
		}
	}
}
