package proof

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/app"
	"github.com/baton-dev/baton/app/client"
	"github.com/baton-dev/baton/internal/sqlite"
)

// TestLeaseCheckReadsEveryLease: the runs' "no lease left held" check
// reads the whole leases table, so a lease on a key outside the workload's
// 50 resources (another issue or branch of the repository) is found too,
// and a released one is not.
func TestLeaseCheckReadsEveryLease(t *testing.T) {
	ctx := context.Background()
	p := newInProcess(t)
	c := p.client(t, p.token(t, app.TokenSpec{Actor: "alice", Installations: []int64{1}}))
	db, err := sqlite.Open(ctx, filepath.Join(p.dir, app.DatabaseFile), sqlite.Options{ReadConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	held, expired, err := leasesInDatabase(ctx, db)
	if err != nil || len(held) != 0 || expired != 0 {
		t.Fatalf("before any lease: held %v, expired %d, err %v", held, expired, err)
	}
	keys := []string{"issue:octo/demo#999", "ref:octo/demo:heads/elsewhere"}
	var grants []client.LeaseGrant
	for _, k := range keys {
		g, err := c.AcquireLease(ctx, k, "job", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		grants = append(grants, g)
	}
	held, _, err = leasesInDatabase(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range grants {
		k := g.Key
		if !slices.ContainsFunc(held, func(h string) bool { return strings.HasPrefix(h, k+" held by ") }) {
			t.Errorf("lease %s is held but the check found only %v", k, held)
		}
	}
	if err := c.ReleaseLease(ctx, keys[0], "job", grants[0].Token); err != nil {
		t.Fatal(err)
	}
	held, _, err = leasesInDatabase(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	if len(held) != 1 || !strings.HasPrefix(held[0], keys[1]+" held by ") {
		t.Errorf("after releasing %s the check found %v; want only %s", keys[0], held, keys[1])
	}
}
