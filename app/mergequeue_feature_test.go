package app

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/app/client"
	"github.com/baton-dev/baton/app/ghsim"
	"github.com/baton-dev/baton/app/mergequeue"
	"github.com/baton-dev/baton/executor"
	"github.com/baton-dev/baton/schema"
)

// The merge queue's label, required checks and merge method come from
// the server's Config.
func TestServerMergeQueueSettings(t *testing.T) {
	t.Parallel()
	srv := startServer(t, Config{Dev: true, MergeQueue: MergeQueueConfig{Label: "ship-it", RequiredChecks: []string{"lint"}, MergeMethod: "squash"}})
	sim := srv.Simulator()
	head := ghsim.DemoHeadSHA(2)
	if _, err := sim.AddCheckRun("octo", "demo", ghsim.NewCheckRun{Name: "ci", HeadSHA: head, Status: "completed", Conclusion: "success"}); err != nil {
		t.Fatal(err)
	}
	// The default label does nothing; the configured one queues.
	if err := sim.AddLabel("octo", "demo", 3, "baton:queue", "monalisa"); err != nil {
		t.Fatal(err)
	}
	if err := sim.AddLabel("octo", "demo", 2, "ship-it", "monalisa"); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(srv.URL(), client.WithToken(srv.Dev().Token))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	deadline := time.Now().Add(30 * time.Second)
	wait := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("after 30s: %s", what)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	var q client.QueueState
	wait("#2 queued, waiting for lint", func() bool {
		if q, err = c.Queue(ctx, "octo", "demo"); err != nil {
			t.Fatal(err)
		}
		return len(q.Entries) == 1 && q.Entries[0].PRNumber == 2 && q.Entries[0].Status == "evaluating"
	})
	// ci passed, but lint is what the gate requires.
	if pr, err := sim.Pull("octo", "demo", 2); err != nil || pr.Merged {
		t.Fatalf("#2 merged before lint passed (%v)", err)
	}
	if _, err := sim.AddCheckRun("octo", "demo", ghsim.NewCheckRun{Name: "lint", HeadSHA: head, Status: "completed", Conclusion: "success"}); err != nil {
		t.Fatal(err)
	}
	wait("#2 merged", func() bool {
		pr, err := sim.Pull("octo", "demo", 2)
		if err != nil {
			t.Fatal(err)
		}
		return pr.Merged
	})
	ops, _, err := srv.exec.List(ctx, executor.ListFilter{Action: schema.ActionMerge})
	if err != nil {
		t.Fatal(err)
	}
	if len(ops) != 1 {
		t.Fatalf("%d merge operations", len(ops))
	}
	var p schema.MergePayload
	if err := json.Unmarshal(ops[0].Payload, &p); err != nil || p.Method != "squash" {
		t.Errorf("merge method %q (%v)", p.Method, err)
	}
	// #3 was labeled baton:queue before #2 was labeled ship-it, and one
	// repository's deliveries are sent and handled in order: by now the
	// queue has seen #3's label, and had it queued #3 the audit would say
	// so.
	audit, err := c.QueueAudit(ctx, "octo", "demo")
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range audit.Audit {
		if a.PRNumber == 3 {
			t.Errorf("#3, labeled baton:queue, is in the queue's audit: %+v", a)
		}
	}
}

// Settings the merge queue would refuse fail NewServer, before anything
// is opened.
func TestNewServerChecksMergeQueueSettings(t *testing.T) {
	t.Parallel()
	for _, mq := range []MergeQueueConfig{
		{Label: strings.Repeat("l", 51)},
		{RequiredChecks: []string{"ci", "baton/queue"}},
		{RequiredChecks: []string{" "}},
		{MergeMethod: "octopus"},
	} {
		if _, err := NewServer(Config{DataDir: t.TempDir(), MergeQueue: mq}); err == nil || !strings.HasPrefix(err.Error(), "merge queue: ") {
			t.Errorf("%+v: %v", mq, err)
		}
	}
	if _, err := NewServer(Config{DataDir: t.TempDir(), MergeQueue: MergeQueueConfig{Label: "ship-it", RequiredChecks: []string{"lint"}, MergeMethod: "squash"}}); err != nil {
		t.Error(err)
	}
}

// A merge-queue route asked with another method answers 405 naming every
// method it serves, as the API's own routes do: its GET routes serve HEAD
// too. As on the API's own routes, the method is checked before the
// token (a request no route takes is refused as such, whoever asks), and
// an unknown route is 404 with or without a token.
func TestServerMergeQueueMethodNotAllowed(t *testing.T) {
	t.Parallel()
	srv := startServer(t, Config{Dev: true})
	for _, token := range []string{srv.Dev().Token, ""} {
		ask := func(method, path string) (*http.Request, *http.Response, []byte) {
			req, _ := http.NewRequest(method, srv.URL()+path, nil)
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return req, resp, b
		}
		for _, c := range []struct{ method, path, allow string }{
			{"POST", "/v1/repos/octo/demo/queue", "GET, HEAD"},
			{"DELETE", "/v1/repos/octo/demo/queue", "GET, HEAD"},
			{"DELETE", "/v1/repos/octo/demo/queue/events", "GET, HEAD"},
			{"PUT", "/v1/repos/octo/demo/queue/audit", "GET, HEAD"},
			{"GET", "/v1/repos/octo/demo/queue/reconcile", "POST"},
			// The API's own route, for comparison.
			{"DELETE", "/v1/operations", "POST, GET, HEAD"},
		} {
			req, resp, b := ask(c.method, c.path)
			if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != c.allow || !strings.Contains(string(b), `"invalid_request"`) {
				t.Errorf("%s %s (token %t): %d Allow %q, want 405 Allow %q: %s", c.method, c.path, token != "",
					resp.StatusCode, resp.Header.Get("Allow"), c.allow, b)
			}
			if token != "" {
				if err := loadAPISpec(t).check(req, nil, resp.StatusCode, resp.Header, b); err != nil {
					t.Errorf("OpenAPI: %v", err)
				}
			}
		}
		for _, path := range []string{"/v1/repos/octo/demo/queue/nope", "/v1/repos/octo/demo", "/v1/operations/x/y"} {
			_, resp, b := ask("GET", path)
			if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(b), `"not_found"`) {
				t.Errorf("GET %s (token %t): %d %s, want 404 not_found", path, token != "", resp.StatusCode, b)
			}
		}
	}
}

// The merge queue's routes hold a body to the API's limit as the API's own
// routes do (TestAPIBodyTooLargeEverywhere): one over it is 413
// payload_too_large, its length announced or not (chunked).
func TestServerMergeQueueBodyTooLarge(t *testing.T) {
	t.Parallel()
	srv := startServer(t, Config{Dev: true})
	big := strings.Repeat(" ", DefaultMaxBodyBytes+1)
	for _, rt := range mergequeue.Routes() {
		method, pattern, _ := strings.Cut(rt, " ")
		path := strings.NewReplacer("{owner}", "octo", "{repo}", "demo").Replace(pattern)
		for i, body := range []io.Reader{strings.NewReader(big), struct{ io.Reader }{strings.NewReader(big)}} {
			how := [...]string{"Content-Length", "chunked"}[i]
			req, _ := http.NewRequest(method, srv.URL()+path, body)
			req.Header.Set("Authorization", "Bearer "+srv.Dev().Token)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(b), `"payload_too_large"`) {
				t.Errorf("%s with a body over the limit (%s): %d %s", rt, how, resp.StatusCode, b)
			}
			if err := loadAPISpec(t).check(req, nil, resp.StatusCode, resp.Header, b); err != nil {
				t.Errorf("OpenAPI: %v", err)
			}
		}
	}
}
