package app

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/baton-dev/baton/internal/sqlite"
)

// installationCreated is installation.created as GitHub sends it for an
// account (a user or an organisation: login and type; an enterprise: slug
// and target_type).
func installationCreated(id, accountID int64, account string) Delivery {
	acc := `{"id":` + strconv.FormatInt(accountID, 10) + `,"login":"` + account + `","type":"Organization"}`
	target := "Organization"
	if strings.HasPrefix(account, "enterprise-") {
		acc = `{"id":` + strconv.FormatInt(accountID, 10) + `,"slug":"` + account + `","name":"` + account + `"}`
		target = "Enterprise"
	}
	p := `{"action":"created","installation":{"id":` + strconv.FormatInt(id, 10) + `,"account":` + acc +
		`,"target_type":"` + target + `","permissions":{},"events":[]},"repositories":[]}`
	return Delivery{ID: "created-" + strconv.FormatInt(id, 10), Event: "installation", Action: "created", Payload: []byte(p)}
}

func wantSameAccount(t *testing.T, in *Installations, ids []int64, want ...int64) {
	t.Helper()
	got, err := in.SameAccountInstallations(context.Background(), ids)
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("SameAccountInstallations(%v) = %v, %v; want %v", ids, got, err, want)
	}
}

// The registry follows an account by its ID only: not by login, not to
// an enterprise whose ID is the same number as an organisation's, not
// through an installation whose account it has not recorded; and the
// account of an installation, once recorded, never changes.
func TestSameAccountInstallations(t *testing.T) {
	t.Parallel()
	ctx := hookCtx(t)
	db := openHookDB(t, sqlite.Options{})
	in, err := NewInstallations(InstallationsConfig{DB: db})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []Delivery{
		installationCreated(1, 42, "octo"),
		installationCreated(2, 43, "acme"),
		installationCreated(3, 42, "enterprise-big"), // an enterprise numbered as octo
		installationCreated(4, 44, "octo"),           // another account that took the login
	} {
		if err := in.HandleEvent(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	wantSameAccount(t, in, []int64{1}, 1)
	wantSameAccount(t, in, []int64{3}, 3)
	wantSameAccount(t, in, []int64{99}, 99) // not known (yet): itself

	// Uninstalled and installed again (a removal and the new installation's
	// creation), and a rename: the binding follows.
	deleted := `{"action":"deleted","installation":{"id":1,"account":{"id":42,"login":"octo","type":"Organization"},"permissions":{},"events":[]}}`
	if err := in.HandleEvent(ctx, Delivery{ID: "d1", Event: "installation", Action: "deleted", Payload: []byte(deleted)}); err != nil {
		t.Fatal(err)
	}
	if err := in.HandleEvent(ctx, installationCreated(5, 42, "octo-renamed")); err != nil {
		t.Fatal(err)
	}
	wantSameAccount(t, in, []int64{1}, 1, 5)
	wantSameAccount(t, in, []int64{5}, 1, 5)
	wantSameAccount(t, in, []int64{2, 5}, 1, 2, 5)
	wantSameAccount(t, in, []int64{4}, 4)
	wantSameAccount(t, in, []int64{3}, 3)

	// GitHub naming another account for a known installation (it never
	// does) does not move the installation's binding.
	moved := installationCreated(2, 42, "acme")
	moved.ID = "moved"
	if err := in.HandleEvent(ctx, moved); err != nil {
		t.Fatal(err)
	}
	wantSameAccount(t, in, []int64{2}, 2)

	// An installation removed before baton recorded account IDs (its
	// row has none) is bound by its ID alone.
	if err := db.Write(ctx, func(tx *sqlite.Tx) error {
		_, err := tx.Exec(`INSERT INTO installations (id, account, account_type, deleted_at, updated_at) VALUES (6, 'octo', 'Organization', 1, 1)`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	wantSameAccount(t, in, []int64{6}, 6)
}
