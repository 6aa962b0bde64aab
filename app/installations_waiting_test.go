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

	if err := e.sim.DeleteInstallation(1); err != nil {
		t.Fatal(err)
	}
	e.waitInstallation("octo", "demo", 0)
	if err := e.sim.AddInstallation(7, "octo"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.sim.AddRepo("octo", "demo", 7); err != nil {
		t.Fatal(err)
	}
	e.waitInstallation("octo", "demo", 7)
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
