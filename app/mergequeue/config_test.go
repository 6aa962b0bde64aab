package mergequeue_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-github/v62/github"

	"github.com/baton-dev/baton/app/mergequeue"
	"github.com/baton-dev/baton/coordinator"
	"github.com/baton-dev/baton/executor"
	"github.com/baton-dev/baton/internal/sqlite"
	"github.com/baton-dev/baton/schema"
)

// ops stands in for the executor where a test needs none of its work.
type ops struct{}

func (ops) Submit(context.Context, string, schema.Submission) (schema.Record, bool, error) {
	return schema.Record{}, false, nil
}
func (ops) Get(context.Context, string) (schema.Record, error) {
	return schema.Record{}, schema.ErrNotFound
}
func (ops) Cancel(context.Context, string) (schema.Record, error) {
	return schema.Record{}, schema.ErrNotFound
}
func (ops) List(context.Context, executor.ListFilter) ([]schema.Record, string, error) {
	return nil, "", nil
}

// minimalConfig returns a valid Config of the required fields only, on a
// new database.
func minimalConfig(t *testing.T) mergequeue.Config {
	t.Helper()
	db, err := sqlite.Open(context.Background(), t.TempDir()+"/baton.db", sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	coord, err := coordinator.New(coordinator.Config{DB: db})
	if err != nil {
		t.Fatal(err)
	}
	return mergequeue.Config{DB: db, Leases: coord, Operations: ops{},
		GitHub: func(int64) (*github.Client, error) { return github.NewClient(nil), nil }}
}

func TestConfigIsValidatedInNew(t *testing.T) {
	t.Parallel()
	good := minimalConfig(t)
	if _, err := mergequeue.New(good); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for name, c := range map[string]struct {
		mod  func(*mergequeue.Config)
		want string
	}{
		"no DB":             {func(c *mergequeue.Config) { c.DB = nil }, "no DB"},
		"no leases":         {func(c *mergequeue.Config) { c.Leases = nil }, "no Leases"},
		"no operations":     {func(c *mergequeue.Config) { c.Operations = nil }, "no Operations"},
		"no GitHub":         {func(c *mergequeue.Config) { c.GitHub = nil }, "no GitHub"},
		"merge method":      {func(c *mergequeue.Config) { c.MergeMethod = "octopus" }, "MergeMethod"},
		"long label":        {func(c *mergequeue.Config) { c.Label = strings.Repeat("l", 51) }, "Label"},
		"own status needed": {func(c *mergequeue.Config) { c.RequiredChecks = []string{"ci", "baton/queue"} }, "RequiredChecks"},
		"short TTL":         {func(c *mergequeue.Config) { c.LeaseTTL = time.Second }, "LeaseTTL"},
		"stale before TTL":  {func(c *mergequeue.Config) { c.StaleLeaseAfter = 10 * time.Second }, "StaleLeaseAfter"},
		"busy delay":        {func(c *mergequeue.Config) { c.BusyDelay = time.Hour }, "BusyDelay"},
		"interval":          {func(c *mergequeue.Config) { c.ReconcileInterval = time.Millisecond }, "ReconcileInterval"},
		"concurrency":       {func(c *mergequeue.Config) { c.ReconcileConcurrency = -1 }, "ReconcileConcurrency"},
	} {
		cfg := good
		c.mod(&cfg)
		if _, err := mergequeue.New(cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// Start and Stop follow baton's lifecycle: Stop is safe before Start and
// twice; Start after Stop fails.
func TestLifecycle(t *testing.T) {
	t.Parallel()
	cfg := minimalConfig(t)
	q, err := mergequeue.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := q.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := q.Start(ctx); err == nil {
		t.Fatal("Start after Stop")
	}
	q2, _ := mergequeue.New(cfg)
	if err := q2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := q2.Start(ctx); err == nil {
		t.Fatal("Start twice")
	}
	for range 2 {
		if err := q2.Stop(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// An outcome arriving after Stop is left to the next reconcile.
	q2.OnOperationFinished(schema.Record{Action: schema.ActionMerge, IdempotencyKey: "merge:octo/demo#1@abc", Actor: "github:1",
		InstallationID: 1, Resource: schema.Resource{Type: "pull_request", ID: "octo/demo#1"}, Status: schema.StatusSucceeded})
}
