package proof

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/baton-dev/baton/app/client"
	"github.com/baton-dev/baton/app/ghsim"
	"github.com/baton-dev/baton/schema"
)

// An operation whose call was in flight when `baton serve` was killed with
// SIGKILL runs again as soon as the server is back: the lease it held in
// its own name is released at start and it gets a fresh message, instead
// of waiting for its message's ack wait (a minute by default). Its call,
// which may have been applied, is probed before it is made again, and the
// comment is posted once.
func TestInFlightOperationResumesAtRestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	bin := batonBinary(t)
	sim := startDemoSim(t, ctx)
	work := t.TempDir()
	dataDir := filepath.Join(work, "data")
	keyFile, secretFile := appFiles(t, sim, work)
	addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	proc := newBatonProcess(t, bin, addr, filepath.Join(work, "baton.log"),
		"--data", dataDir, "--github-url", sim.URL(), "--app-id", strconv.FormatInt(sim.AppID(), 10),
		"--private-key", keyFile, "--webhook-secret-file", secretFile, "--github-pacing", "off")
	tok := createToken(t, bin, dataDir, "--actor", "alice", "--installation", "1")
	proc.start(ctx)
	c, err := client.New(proc.url(), client.WithToken(tok))
	if err != nil {
		t.Fatal(err)
	}
	// The comment's call hangs: the server is killed while it is in flight.
	if _, err := sim.SetFault(ghsim.Fault{Route: "POST /repos/{owner}/{repo}/issues/{number}/comments", Kind: ghsim.FaultLatency, Latency: 10 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	var op client.Operation
	if !poll(ctx, time.Minute, 100*time.Millisecond, func() bool {
		op, _, err = c.Submit(ctx, client.SubmitRequest{IdempotencyKey: "k", Action: schema.ActionComment,
			Resource: client.Resource{Type: schema.ResourceIssue, ID: "octo/demo#10"}, Payload: json.RawMessage(`{"body":"x"}`)})
		return err == nil
	}) {
		t.Fatalf("submit: %v", err)
	}
	if !poll(ctx, time.Minute, 50*time.Millisecond, func() bool {
		v, err := c.Get(ctx, op.OperationID)
		return err == nil && v.Status == schema.StatusRunning && len(v.AttemptLog) > 0
	}) {
		t.Fatal("the operation did not start its call within a minute")
	}
	proc.kill()
	sim.ClearFaults()
	proc.start(ctx)
	restarted := time.Now()
	// Well under the ack wait (60 s) and the lease's TTL (30 s).
	const within = 15 * time.Second
	var v client.Operation
	if !poll(ctx, within, 50*time.Millisecond, func() bool {
		v, err = c.Get(ctx, op.OperationID)
		return err == nil && v.Status.Terminal()
	}) {
		t.Fatalf("operation %s %v after the restart (attempts %d): not resumed at once", v.Status, within, v.Attempts)
	}
	t.Logf("%s %v after the restart", v.Status, time.Since(restarted).Round(time.Millisecond))
	if v.Status != schema.StatusSucceeded {
		t.Fatalf("status %s (%s: %s)", v.Status, v.LastErrorCategory, v.LastErrorMessage)
	}
	// The interrupted call, then a probe, then the call.
	if len(v.AttemptLog) != 3 || !v.AttemptLog[1].Probe || v.AttemptLog[2].Probe {
		t.Errorf("attempt log %+v: want the interrupted call, a probe, then the call", v.AttemptLog)
	}
	if posted := commentsPosted(t, sim, 10, op.OperationID); posted != 1 {
		t.Errorf("the comment was posted %d times, want once", posted)
	}
}
