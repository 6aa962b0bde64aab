package app

import (
	"context"
	"testing"
	"time"

	"github.com/baton-dev/baton/schema"
)

// An operation waiting for its turn (its resource's lease held) while the
// App is uninstalled from its account and installed again runs on the
// installation that replaced the one it was submitted for: the account is
// the same, as is everything the submitter's token may act on.
func TestWaitingOperationRunsAfterReinstall(t *testing.T) {
	t.Parallel()
	e := newReinstallEnv(t)
	ctx := context.Background()
	ci := e.client(TokenSpec{Actor: "ci", Installations: []int64{1}})
	holder := e.client(TokenSpec{Actor: "holder", Installations: []int64{1}})
	g, err := holder.AcquireLease(ctx, "issue:octo/demo#10", "h", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	op, err := e.comment(ci, "waiting", "octo/demo")
	if err != nil || op.InstallationID != 1 {
		t.Fatalf("submit: %+v %v", op, err)
	}

	e.reinstallDemo()
	holder7 := e.client(TokenSpec{Actor: "holder", Installations: []int64{7}})
	if err := holder7.ReleaseLease(ctx, "issue:octo/demo#10", "h", g.Token); err != nil {
		t.Fatal(err)
	}
	done, err := ci.Wait(ctx, op.OperationID, 30*time.Second)
	if err != nil || done.Status != schema.StatusSucceeded || done.InstallationID != 7 {
		t.Fatalf("operation queued before the reinstall: %s installation %d %s %q (%v)", done.Status, done.InstallationID,
			done.LastErrorCategory, done.LastErrorMessage, err)
	}
}

// Operations waiting for their turn when their installation is suspended
// fail at once, without spending an attempt, and say why in words the
// user can act on (once: not "installation 1 is suspended: installation 1
// is suspended").
func TestWaitingOperationsFailWhenSuspended(t *testing.T) {
	t.Parallel()
	e := newReinstallEnv(t)
	ctx := context.Background()
	ci := e.client(TokenSpec{Actor: "ci", Installations: []int64{1}})
	holder := e.client(TokenSpec{Actor: "holder", Installations: []int64{1}})
	g, err := holder.AcquireLease(ctx, "issue:octo/demo#10", "h", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, key := range []string{"s1", "s2", "s3"} {
		op, err := e.comment(ci, key, "octo/demo")
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, op.OperationID)
	}
	if err := e.sim.SuspendInstallation(1, true); err != nil {
		t.Fatal(err)
	}
	e.waitSuspended("octo", "demo", true)
	if err := holder.ReleaseLease(ctx, "issue:octo/demo#10", "h", g.Token); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		d, err := ci.Wait(ctx, id, 30*time.Second)
		if err != nil || d.Status != schema.StatusFailed || d.Attempts != 0 ||
			d.LastErrorCategory != "installation_unavailable" || d.LastErrorMessage != "installation 1 is suspended" {
			t.Errorf("operation %s: %s attempts=%d %s %q (%v)", id, d.Status, d.Attempts, d.LastErrorCategory, d.LastErrorMessage, err)
		}
	}
	if n := len(e.sim.Effects()); n != 0 {
		t.Errorf("%d effects on GitHub", n)
	}
}
