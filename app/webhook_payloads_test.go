package app

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/baton-dev/baton/app/client"
	"github.com/baton-dev/baton/app/ghsim"
)

// payloadEnv is `baton serve --dev` (the whole server, its simulator as
// GitHub) receiving deliveries shaped as GitHub's own (testdata/webhooks,
// see its README) rather than the simulator's.
type payloadEnv struct {
	t      *testing.T
	srv    *Server
	sim    *ghsim.Sim
	c      *client.Client
	repoID int64
	n      int
}

func newPayloadEnv(t *testing.T) *payloadEnv {
	t.Helper()
	srv := startServer(t, Config{Dev: true, Logger: zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel))})
	e := &payloadEnv{t: t, srv: srv, sim: srv.Simulator()}
	for _, r := range e.sim.Repos() {
		if r.FullName == "octo/demo" {
			e.repoID = r.ID
		}
	}
	if e.repoID == 0 {
		t.Fatal("the simulator has no octo/demo")
	}
	var err error
	if e.c, err = client.New(srv.URL(), client.WithToken(srv.Dev().Token)); err != nil {
		t.Fatal(err)
	}
	e.settle()
	return e
}

// payload reads testdata/webhooks/name with the simulator's repository ID
// and the head of its pull request #2 put in.
func (e *payloadEnv) payload(name string) []byte {
	e.t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "webhooks", name))
	if err != nil {
		e.t.Fatal(err)
	}
	b = bytes.ReplaceAll(b, []byte("186853002"), []byte(strconv.FormatInt(e.repoID, 10)))
	return bytes.ReplaceAll(b, []byte("{{HEAD_SHA}}"), []byte(ghsim.DemoHeadSHA(2)))
}

// deliver posts body as GitHub would (signed, with its headers) and
// returns the answer's status and, once the dispatcher is done with it,
// the delivery as the ledger has it.
func (e *payloadEnv) deliver(event string, body []byte, headers map[string]string) (int, DeliveryRecord) {
	e.t.Helper()
	e.n++
	id := "payload-" + strconv.Itoa(e.n) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	req, err := http.NewRequest(http.MethodPost, e.srv.URL()+"/webhooks/github", bytes.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "GitHub-Hookshot/1a2b3c4")
	req.Header.Set("X-GitHub-Event", event)
	req.Header.Set("X-GitHub-Delivery", id)
	req.Header.Set("X-GitHub-Hook-ID", "109948940")
	req.Header.Set("X-GitHub-Hook-Installation-Target-Type", "integration")
	req.Header.Set("X-GitHub-Hook-Installation-Target-ID", strconv.FormatInt(e.sim.AppID(), 10))
	req.Header.Set("X-Hub-Signature", "sha1=0000000000000000000000000000000000000000")
	req.Header.Set("X-Hub-Signature-256", webhookSignature(e.sim.WebhookSecret(), body))
	for k, v := range headers {
		if v == "" {
			req.Header.Del(k)
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return resp.StatusCode, DeliveryRecord{}
	}
	ctx := hookCtx(e.t)
	var rec DeliveryRecord
	hookEventually(e.t, ctx, "delivery "+id+" handled", func() bool {
		rec, err = e.srv.ledger.Get(ctx, id)
		return err == nil && rec.State != DeliveryPending
	})
	e.settle()
	return resp.StatusCode, rec
}

// settle waits until the simulator has delivered what baton's operations
// made it send, and baton has handled it.
func (e *payloadEnv) settle() {
	e.t.Helper()
	ctx := hookCtx(e.t)
	if err := e.sim.WaitDeliveries(ctx); err != nil {
		e.t.Fatal(err)
	}
	hookEventually(e.t, ctx, "every delivery handled", func() bool {
		pending, err := e.srv.ledger.List(ctx, DeliveryFilter{State: DeliveryPending, Limit: 1})
		return err == nil && len(pending) == 0
	})
}

func (e *payloadEnv) installation() Installation {
	e.t.Helper()
	all, err := e.srv.installs.ListInstallations(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	for _, in := range all {
		if in.ID == ghsim.DemoInstallationID {
			return in
		}
	}
	e.t.Fatalf("installation %d not in the registry: %+v", ghsim.DemoInstallationID, all)
	return Installation{}
}

// queued lists the pull requests in octo/demo's merge queue, not bounced.
func (e *payloadEnv) queued() []int {
	e.t.Helper()
	st, err := e.c.Queue(context.Background(), "octo", "demo")
	if err != nil {
		e.t.Fatal(err)
	}
	var prs []int
	for _, en := range st.Entries {
		if en.Status != "bounced" {
			prs = append(prs, en.PRNumber)
		}
	}
	return prs
}

// The installation and repository events GitHub sends, as GitHub shapes
// them, are answered 202 and handled; none takes away or grants anything
// GitHub does not say now (baton reads the installation from GitHub), and
// the repository events that say what happened are applied.
func TestGitHubPayloadsInstallations(t *testing.T) {
	e := newPayloadEnv(t)
	demo := func(t *testing.T) {
		t.Helper()
		in := e.installation()
		if in.Suspended || !slices.Contains(in.Repositories, "octo/demo") || in.Account != "octo" {
			t.Errorf("installation 1 = %+v, want octo's, in force, with octo/demo", in)
		}
		if slices.Contains(in.Repositories, "octo/secret") {
			t.Errorf("installation 1 has octo/secret, which GitHub does not list: %+v", in)
		}
		if got, err := e.srv.installs.InstallationOf(context.Background(), "octo", "demo"); err != nil || got != ghsim.DemoInstallationID {
			t.Errorf("InstallationOf(octo/demo) = %d, %v", got, err)
		}
	}
	for _, tc := range []struct{ file, event string }{
		{"ping.app.json", "ping"},
		{"github_app_authorization.revoked.json", "github_app_authorization"},
		{"installation.created.selected.json", "installation"},
		{"installation.new_permissions_accepted.json", "installation"},
		{"installation.suspend.json", "installation"},
		{"installation.unsuspend.json", "installation"},
		{"installation_repositories.added.json", "installation_repositories"},
		{"installation_repositories.removed.json", "installation_repositories"},
		{"installation_target.renamed.json", "installation_target"},
		{"installation.deleted.json", "installation"},
		{"repository.archived.json", "repository"},
		{"repository.transferred.json", "repository"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			code, rec := e.deliver(tc.event, e.payload(tc.file), nil)
			if code != http.StatusAccepted || rec.State != DeliveryHandled {
				t.Fatalf("answer %d, delivery %+v", code, rec)
			}
			demo(t)
		})
	}

	// An Enterprise Server too old to sign with SHA-256 (X-Hub-Signature
	// only) is refused, 401, and nothing is recorded.
	t.Run("sha1 signature only", func(t *testing.T) {
		before := ledgerAll(t, context.Background(), e.srv.ledger)
		code, _ := e.deliver("installation", e.payload("installation.deleted.json"),
			map[string]string{"X-Hub-Signature-256": "", "X-GitHub-Enterprise-Host": "github.example.com"})
		if code != http.StatusUnauthorized {
			t.Errorf("answer %d, want 401", code)
		}
		if after := ledgerAll(t, context.Background(), e.srv.ledger); len(after) != len(before) {
			t.Errorf("%d deliveries recorded, want %d", len(after), len(before))
		}
		demo(t)
	})

	t.Run("repository.renamed.json", func(t *testing.T) {
		// Renamed on GitHub; its delivery is the one below.
		e.sim.SetWebhook("", "")
		if err := e.sim.RenameRepo("octo", "demo", "hello-world", ""); err != nil {
			t.Fatal(err)
		}
		code, rec := e.deliver("repository", e.payload("repository.renamed.json"), nil)
		if code != http.StatusAccepted || rec.State != DeliveryHandled {
			t.Fatalf("answer %d, delivery %+v", code, rec)
		}
		if in := e.installation(); !slices.Contains(in.Repositories, "octo/hello-world") || slices.Contains(in.Repositories, "octo/demo") {
			t.Errorf("after the rename: %+v", in)
		}
	})
	t.Run("repository.deleted.json", func(t *testing.T) {
		b := bytes.ReplaceAll(e.payload("repository.deleted.json"), []byte(`"octo/demo"`), []byte(`"octo/hello-world"`))
		code, rec := e.deliver("repository", b, nil)
		if code != http.StatusAccepted || rec.State != DeliveryHandled {
			t.Fatalf("answer %d, delivery %+v", code, rec)
		}
		if in := e.installation(); len(in.Repositories) != 0 {
			t.Errorf("after the deletion: %+v", in)
		}
	})
}

// The pull request, comment, check and status events GitHub sends, as
// GitHub shapes them (a fork deleted, a user deleted, a check of no App,
// an Enterprise Server delivery), are answered 202 and handled, and the
// merge queue does only what each says.
func TestGitHubPayloadsMergeQueue(t *testing.T) {
	e := newPayloadEnv(t)
	// A check of pull request #2's head is pending: a pull request that
	// joins stays queued.
	if _, err := e.sim.AddCheckRun("octo", "demo", ghsim.NewCheckRun{Name: "ci", HeadSHA: ghsim.DemoHeadSHA(2)}); err != nil {
		t.Fatal(err)
	}
	e.settle()
	step := func(file, event string, headers map[string]string, want ...int) {
		t.Helper()
		code, rec := e.deliver(event, e.payload(file), headers)
		if code != http.StatusAccepted || rec.State != DeliveryHandled {
			t.Fatalf("%s: answer %d, delivery %+v", file, code, rec)
		}
		if got := e.queued(); !slices.Equal(got, want) {
			t.Fatalf("%s: queued %v, want %v", file, got, want)
		}
	}
	step("pull_request.opened.json", "pull_request", nil)
	step("pull_request.labeled.other.json", "pull_request", nil)
	step("pull_request.edited.json", "pull_request", nil)
	step("issue_comment.created.issue.json", "issue_comment", nil)
	step("check_run.completed.json", "check_run", nil)
	step("check_suite.completed.json", "check_suite", nil)
	step("status.json", "status", nil)
	step("pull_request.closed.ghost.json", "pull_request", nil)
	step("pull_request.reopened.json", "pull_request", nil)

	// The label, added on the simulator (so that GitHub has it), is
	// delivered as GitHub shapes it, from Enterprise Server.
	e.sim.SetWebhook("", "")
	if err := e.sim.AddLabel("octo", "demo", 2, "baton:queue", "monalisa"); err != nil {
		t.Fatal(err)
	}
	step("pull_request.labeled.enterprise.json", "pull_request",
		map[string]string{"X-GitHub-Enterprise-Host": "github.example.com", "X-GitHub-Enterprise-Version": "3.14.0"}, 2)
	step("pull_request.labeled.json", "pull_request", nil, 2)
	step("pull_request.synchronize.fork-deleted.json", "pull_request", nil, 2)
	step("check_run.completed.json", "check_run", nil, 2)
	step("status.json", "status", nil, 2)
	step("issue_comment.created.pull.json", "issue_comment", nil, 2)
	step("pull_request.unlabeled.label-deleted.json", "pull_request", nil, 2) // GitHub still has the label
	if err := e.sim.RemoveLabel("octo", "demo", 2, "baton:queue", "monalisa"); err != nil {
		t.Fatal(err)
	}
	step("pull_request.unlabeled.json", "pull_request", nil)
}

// A label deleted from the repository is taken off every pull request
// that had it, and GitHub's unlabeled deliveries then carry no label. A
// pull request whose queue label was deleted so leaves the queue (GitHub
// is asked which labels it has), as when the label is removed from it;
// it is not merged without the label.
func TestGitHubPayloadsQueueLabelDeleted(t *testing.T) {
	e := newPayloadEnv(t)
	if _, err := e.sim.AddCheckRun("octo", "demo", ghsim.NewCheckRun{Name: "ci", HeadSHA: ghsim.DemoHeadSHA(2)}); err != nil {
		t.Fatal(err)
	}
	if err := e.sim.AddLabel("octo", "demo", 2, "baton:queue", "monalisa"); err != nil {
		t.Fatal(err)
	}
	e.settle()
	if got := e.queued(); !slices.Equal(got, []int{2}) {
		t.Fatalf("queued %v, want [2]", got)
	}
	// The label goes; GitHub's delivery of it is the one below.
	e.sim.SetWebhook("", "")
	if err := e.sim.RemoveLabel("octo", "demo", 2, "baton:queue", "monalisa"); err != nil {
		t.Fatal(err)
	}
	code, rec := e.deliver("pull_request", e.payload("pull_request.unlabeled.label-deleted.json"), nil)
	if code != http.StatusAccepted || rec.State != DeliveryHandled {
		t.Fatalf("answer %d, delivery %+v", code, rec)
	}
	if got := e.queued(); len(got) != 0 {
		t.Errorf("queued %v after its label was deleted, want none", got)
	}
}

// The installation events GitHub sends when what they say is so (GitHub
// suspended, unsuspended, then lost the installation) are believed: the
// installation's repositories are refused while it is suspended, and once
// it is removed.
func TestGitHubPayloadsInstallationsWhenSo(t *testing.T) {
	e := newPayloadEnv(t)
	ctx := context.Background()
	e.sim.SetWebhook("", "")
	for _, tc := range []struct {
		file      string
		change    func() error
		installed bool
	}{
		{"installation.suspend.json", func() error { return e.sim.SuspendInstallation(ghsim.DemoInstallationID, true) }, false},
		{"installation.unsuspend.json", func() error { return e.sim.SuspendInstallation(ghsim.DemoInstallationID, false) }, true},
		{"installation.deleted.json", func() error { return e.sim.DeleteInstallation(ghsim.DemoInstallationID) }, false},
	} {
		if err := tc.change(); err != nil {
			t.Fatal(err)
		}
		code, rec := e.deliver("installation", e.payload(tc.file), nil)
		if code != http.StatusAccepted || rec.State != DeliveryHandled {
			t.Fatalf("%s: answer %d, delivery %+v", tc.file, code, rec)
		}
		got, err := e.srv.installs.InstallationOf(ctx, "octo", "demo")
		if installed := err == nil && got == ghsim.DemoInstallationID; installed != tc.installed {
			t.Errorf("%s: InstallationOf(octo/demo) = %d, %v; want installed %v", tc.file, got, err, tc.installed)
		}
	}
}
