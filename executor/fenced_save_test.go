package executor

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/app/ghsim"
	"github.com/baton-dev/baton/coordinator"
	"github.com/baton-dev/baton/internal/sqlite"
	"github.com/baton-dev/baton/schema"
)

// A worker whose lease expired and was taken over by another holder
// writes nothing more to the record: its save (here the one that records
// a failed attempt and the wait before the next) is checked against the
// lease in the store, in the save's own transaction, and refused. The
// record stays as the new holder found it, and the worker gives the
// operation back to the queue.
func TestSaveAfterLeaseTakenOverIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "baton.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	clock := coordinator.NewFakeClock(time.Now())
	coord, err := coordinator.New(coordinator.Config{DB: db, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	sim, _ := newSim(t, ghsim.Config{})
	store := NewSQLiteStore(db, nil)
	sha := ghsim.DemoHeadSHA(3)
	var opID string
	res := schema.Resource{Type: "commit", ID: "octo/demo@" + sha}
	var (
		once    sync.Once
		before  schema.Record
		taken   *coordinator.Lease
		hookErr error
	)
	// When GitHub's answer to the first attempt (a 502) comes back, the
	// worker's lease has expired and another holder has taken the
	// resource; the worker's keepalive has not noticed yet (lateKeepAlive).
	base := newTransport()
	gh, err := NewGitHubClients(GitHubConfig{BaseURL: sim.URL(), AppID: sim.AppID(), PrivateKey: sim.PrivateKeyPEM(),
		Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			resp, err := base.RoundTrip(r)
			if r.Method == http.MethodPost && strings.Contains(r.URL.Path, "/statuses/") {
				once.Do(func() {
					if before, hookErr = store.Get(ctx, opID); hookErr != nil {
						return
					}
					clock.Advance(2 * time.Minute)
					taken, hookErr = coord.Acquire(ctx, res.Key(), "other-worker", time.Minute)
				})
			}
			return resp, err
		})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gh.Close)
	exec, err := New(Config{Store: store, Dispatcher: &nudgeRecorder{}, Leases: lateKeepAlive{coord}, GitHub: gh,
		LeaseTTL: time.Minute, Pacing: PacingConfig{Disabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sim.SetFault(ghsim.Fault{Route: "POST /repos/{owner}/{repo}/statuses/{sha}", Kind: ghsim.FaultStatus, Status: 502, Count: 1}); err != nil {
		t.Fatal(err)
	}
	rec, err := NewRecord("tester", schema.Submission{IdempotencyKey: "taken-over", Action: schema.ActionCreateStatus,
		Resource: res, Payload: []byte(`{"state":"success","context":"ci"}`), InstallationID: 1}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := store.Create(ctx, rec); err != nil {
		t.Fatal(err)
	}
	opID = rec.OperationID
	r := exec.Process(ctx, rec.OperationID)
	if hookErr != nil {
		t.Fatalf("taking the lease over: %v", hookErr)
	}
	if taken == nil {
		t.Fatal("no call reached GitHub")
	}
	if r.Kind != ResultRetry {
		t.Errorf("Process: %v (%v), want a retry later (its lease was lost)", r, r.Err)
	}
	after, err := store.Get(ctx, rec.OperationID)
	if err != nil {
		t.Fatal(err)
	}
	if after.Version != before.Version || after.Attempts != before.Attempts || len(after.AttemptLog) != len(before.AttemptLog) ||
		(len(after.AttemptLog) > 0 && !after.AttemptLog[len(after.AttemptLog)-1].EndedAt.IsZero()) || after.NextAttemptAt != nil {
		t.Errorf("record written by a worker that had lost its lease:\nbefore: version=%d attempts=%d log=%+v\nafter:  version=%d attempts=%d log=%+v next=%v",
			before.Version, before.Attempts, before.AttemptLog, after.Version, after.Attempts, after.AttemptLog, after.NextAttemptAt)
	}
	if st, err := coord.Check(ctx, res.Key()); err != nil || !st.Locked || st.Owner != "other-worker" || st.Token != taken.Token {
		t.Errorf("lease after the refused save: %+v (%v), want the new holder's", st, err)
	}
}
