package app

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/baton-dev/baton/app/client"
)

// waitSuspended waits until the server's registry answers owner/name with
// its installation suspended (or, with want false, in force).
func (e *reinstallEnv) waitSuspended(owner, name string, want bool) {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := e.srv.installs.InstallationOf(context.Background(), owner, name)
		if errors.Is(err, ErrInstallationUnavailable) == want {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%s/%s: %v, want suspended %v", owner, name, err, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A lease held over the API when its repository's installation is
// suspended can still be renewed, checked and given back by its holder:
// a lease touches nothing at GitHub, and a release refused would keep the
// resource from the operations queued on it for up to the lease's TTL
// after the installation is unsuspended. A new one is not granted while
// the installation is suspended.
func TestLeaseOfSuspendedInstallationRenewsAndReleases(t *testing.T) {
	t.Parallel()
	e := newReinstallEnv(t)
	ctx := context.Background()
	c := e.client(TokenSpec{Actor: "deploy", Installations: []int64{1}})
	const key = "issue:octo/demo#10"
	g, err := c.AcquireLease(ctx, key, "job", 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.sim.SuspendInstallation(1, true); err != nil {
		t.Fatal(err)
	}
	e.waitSuspended("octo", "demo", true)

	var ce *client.Error
	if _, err := c.AcquireLease(ctx, "issue:octo/demo#11", "job", time.Minute); !errors.As(err, &ce) || ce.Status != http.StatusForbidden {
		t.Errorf("acquire while suspended: %v, want 403", err)
	}
	if _, err := c.RenewLease(ctx, key, "job", g.Token, 10*time.Minute); err != nil {
		t.Errorf("renew while suspended: %v", err)
	}
	if st, err := c.CheckLease(ctx, key); err != nil || !st.Locked {
		t.Errorf("check while suspended: %+v %v", st, err)
	}
	if err := c.ReleaseLease(ctx, key, "job", g.Token); err != nil {
		t.Fatalf("release while suspended: %v", err)
	}
	if err := e.sim.SuspendInstallation(1, false); err != nil {
		t.Fatal(err)
	}
	e.waitSuspended("octo", "demo", false)
	if st, err := c.CheckLease(ctx, key); err != nil || st.Locked {
		t.Errorf("the lease after the unsuspend: %+v %v, want free", st, err)
	}

	// Another account's token is told nothing more than before.
	if _, err := e.sim.AddRepo("acme", "site", 3); err != nil {
		t.Fatal(err)
	}
	e.waitInstallation("acme", "site", 3)
	if err := e.sim.SuspendInstallation(1, true); err != nil {
		t.Fatal(err)
	}
	e.waitSuspended("octo", "demo", true)
	acme := e.client(TokenSpec{Actor: "deploy", Installations: []int64{3}})
	_, err = acme.CheckLease(ctx, key)
	wantForbidden(t, "acme's token checking octo's lease", err)
	if err := acme.ReleaseLease(ctx, key, "job", g.Token); !errors.As(err, &ce) || ce.Status != http.StatusForbidden ||
		ce.Message != errMayNotActOn("octo/demo").Error() {
		t.Errorf("acme's token releasing octo's lease: %v, want the 403 of a repository it may not act on", err)
	}
}
