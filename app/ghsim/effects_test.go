package ghsim

import (
	"fmt"
	"sync"
	"testing"

	"github.com/google/go-github/v62/github"
)

// TestEffectsUnderConcurrency drives 32 clients at once (and people
// commenting through the Go API meanwhile) and checks that the effect log
// holds every applied mutation exactly once, in the order they were
// applied, and that webhooks arrive in each repository's order.
func TestEffectsUnderConcurrency(t *testing.T) {
	t.Parallel()
	e := seeded(t, Config{})
	c := ctx(t)
	const clients, perClient = 32, 4
	for n := 20; n < 24; n++ {
		if _, err := e.sim.AddIssue("octo", "demo", NewIssue{Number: n, Title: "x"}); err != nil {
			t.Fatal(err)
		}
	}
	rc := newReceiver(e)
	cl := e.client(1)
	var (
		mu   sync.Mutex
		seen = map[string]string{} // request ID → comment body
		wg   sync.WaitGroup
	)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range perClient {
				n := 20 + (i+j)%4
				body := fmt.Sprintf("client %d comment %d", i, j)
				_, resp, err := cl.Issues.CreateComment(c, "octo", "demo", n, &github.IssueComment{Body: &body})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				seen[resp.Header.Get("X-GitHub-Request-Id")] = fmt.Sprintf("issue:octo/demo#%d", n)
				mu.Unlock()
				if _, _, err := cl.Issues.Get(c, "octo", "demo", n); err != nil { // reads apply nothing
					t.Error(err)
					return
				}
			}
		}()
	}
	const people = 4
	for i := range people {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range perClient {
				if _, err := e.sim.AddComment("octo", "demo", 20+j%4, fmt.Sprintf("person %d says %d", i, j), "alice"); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()

	// Deliveries of one repository arrive in the order of its history.
	hooks := rc.wait((clients + people) * perClient)
	order := map[float64][]float64{} // issue → comment IDs as delivered
	for _, h := range hooks {
		n := h.Payload["issue"].(map[string]any)["number"].(float64)
		order[n] = append(order[n], h.Payload["comment"].(map[string]any)["id"].(float64))
	}
	for n, ids := range order {
		is, _ := e.sim.Issue("octo", "demo", int(n))
		if len(ids) != len(is.Comments) {
			t.Fatalf("#%v: %d deliveries for %d comments", n, len(ids), len(is.Comments))
		}
		for i, id := range ids {
			if int64(id) != is.Comments[i].ID {
				t.Fatalf("#%v: delivery %d is comment %v, want %d", n, i, id, is.Comments[i].ID)
			}
		}
	}

	effects := e.sim.Effects()
	if len(effects) != clients*perClient || len(seen) != clients*perClient {
		t.Fatalf("%d effects for %d comments", len(effects), len(seen))
	}
	perResource := map[string][]int64{}
	for i, ef := range effects {
		if ef.Seq != int64(i+1) {
			t.Fatalf("effect %d has seq %d", i, ef.Seq)
		}
		if i > 0 && ef.AppliedAt.Before(effects[i-1].AppliedAt) {
			t.Errorf("effect %d applied before effect %d", ef.Seq, effects[i-1].Seq)
		}
		if seen[ef.RequestID] != ef.Resource || ef.Status != 201 || ef.InstallationID != 1 || ef.Method != "POST" {
			t.Errorf("effect %+v does not match a response", ef)
		}
		delete(seen, ef.RequestID)
		perResource[ef.Resource] = append(perResource[ef.Resource], ef.Seq)
	}
	// The log's order per issue is the order of the issue's comments.
	for n := 20; n < 24; n++ {
		is, _ := e.sim.Issue("octo", "demo", n)
		if got := len(perResource[fmt.Sprintf("issue:octo/demo#%d", n)]); got != len(is.Comments)-people*perClient/4 {
			t.Errorf("#%d: %d effects, %d comments", n, got, len(is.Comments))
		}
		for i := 1; i < len(is.Comments); i++ {
			if is.Comments[i].ID <= is.Comments[i-1].ID {
				t.Errorf("#%d: comments out of order", n)
			}
		}
	}
	if since := e.sim.EffectsSince(120); len(since) != 8 || since[0].Seq != 121 {
		t.Errorf("EffectsSince(120) = %d effects", len(since))
	}
}
