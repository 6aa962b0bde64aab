package coordinator

import (
	"context"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/sqlite"
)

// The history keeps the last HistoryLimit events of a key, oldest first,
// and the table is trimmed so that it does not grow without bound.
func TestHistoryKeepsTheLast200(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	b.store.trimEvery = 1 // trim on every acquisition, to count exactly
	ctx := context.Background()
	var tokens []int64
	for i := range 150 {
		l := mustAcquire(t, b.c, testKey, "op", time.Minute)
		tokens = append(tokens, l.Token)
		if i%2 == 0 {
			if err := b.c.Release(ctx, l); err != nil {
				t.Fatal(err)
			}
		} else {
			b.clock.Advance(time.Minute) // the next acquisition takes it over
		}
	}
	mustAcquire(t, b.c, "other", "op", time.Minute) // another key's events are its own
	h, err := b.c.History(ctx, testKey)
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != HistoryLimit {
		t.Fatalf("%d events, want %d", len(h), HistoryLimit)
	}
	n := len(h)
	if h[n-1].Kind != EventAcquired || h[n-1].Token != tokens[149] ||
		h[n-2].Kind != EventReleased || h[n-2].Token != tokens[148] ||
		h[n-3].Kind != EventPreempted || h[n-3].Token != tokens[148] || h[n-3].PreviousToken != tokens[147] {
		t.Errorf("newest events %+v", h[n-3:])
	}
	for i := 1; i < len(h); i++ {
		if h[i].Token < h[i-1].Token || h[i].At.Before(h[i-1].At) {
			t.Fatalf("events out of order at %d: %+v then %+v", i, h[i-1], h[i])
		}
	}
	var rows int
	if err := b.db.QueryRow(ctx, `SELECT COUNT(*) FROM lease_history WHERE key = ?`, testKey).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows > HistoryLimit+1 { // an acquisition trims, its release may add one
		t.Errorf("%d rows stored for the key, want at most %d", rows, HistoryLimit+1)
	}
}

// Each kind of event carries what a person debugging needs.
func TestHistoryEvents(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	ctx := context.Background()
	a := mustAcquire(t, b.c, testKey, "op-a", 10*time.Second)
	if err := b.c.Release(ctx, a); err != nil {
		t.Fatal(err)
	}
	b.clock.Advance(time.Second)
	c := mustAcquire(t, b.c, testKey, "op-c", 10*time.Second)
	b.clock.Advance(12 * time.Second)
	d := mustAcquire(t, b.c, testKey, "op-d", 10*time.Second)
	b.clock.Advance(45 * time.Second)
	if _, err := b.c.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	h, err := b.c.History(ctx, testKey)
	if err != nil {
		t.Fatal(err)
	}
	want := []Event{
		{Kind: EventAcquired, At: epoch, Owner: "op-a", Token: a.Token, TTL: 10 * time.Second},
		{Kind: EventReleased, At: epoch, Owner: "op-a", Token: a.Token},
		{Kind: EventAcquired, At: epoch.Add(time.Second), Owner: "op-c", Token: c.Token, TTL: 10 * time.Second},
		{Kind: EventPreempted, At: epoch.Add(13 * time.Second), Owner: "op-d", Token: d.Token, TTL: 10 * time.Second,
			PreviousOwner: "op-c", PreviousToken: c.Token, ExpiredFor: 2 * time.Second},
		{Kind: EventForceReleased, At: epoch.Add(58 * time.Second), Owner: "op-d", Token: d.Token, TTL: 10 * time.Second,
			ExpiredFor: 35 * time.Second},
	}
	if len(h) != len(want) {
		t.Fatalf("history %+v", h)
	}
	for i := range want {
		if !h[i].At.Equal(want[i].At) {
			t.Errorf("event %d at %v, want %v", i, h[i].At, want[i].At)
		}
		h[i].At = want[i].At
		if h[i] != want[i] {
			t.Errorf("event %d = %+v, want %+v", i, h[i], want[i])
		}
	}
}

// PruneHistory deletes the histories of keys idle since the cut that hold
// no lease, and keeps the others whole.
func TestPruneHistory(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	ctx := context.Background()
	release := func(key string) {
		t.Helper()
		if err := b.c.Release(ctx, mustAcquire(t, b.c, key, "op", time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	// Idle keys, more than one chunk of them, around the others.
	var idle []string
	for i := range 7 {
		idle = append(idle, "idle-"+string(rune('a'+i)))
		release(idle[i])
	}
	release("busy")                                  // idle too, then used again below
	mustAcquire(t, b.c, "held", "op", 2*time.Minute) // held (then expired) but never released
	b.clock.Advance(time.Hour)
	cut := b.clock.Now()
	b.clock.Advance(time.Hour)
	release("busy")
	release("recent")

	count := func(key string) (n int) {
		t.Helper()
		if err := b.db.QueryRow(ctx, `SELECT COUNT(*) FROM lease_history WHERE key = ?`, key).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	n, err := b.store.pruneHistory(ctx, cut, 3, 2)
	if err != nil || n != int64(len(idle)) {
		t.Errorf("pruneHistory = %d, %v; want %d", n, err, len(idle))
	}
	for _, key := range idle {
		if c := count(key); c != 0 {
			t.Errorf("%s keeps %d events", key, c)
		}
	}
	for key, want := range map[string]int{"busy": 4, "held": 1, "recent": 2} {
		if c := count(key); c != want {
			t.Errorf("%s keeps %d events, want %d", key, c, want)
		}
	}
	if n, err := b.c.PruneHistory(ctx, cut); err != nil || n != 0 {
		t.Errorf("second PruneHistory = %d, %v", n, err)
	}
	// Once released, the held key's history goes with a later cut, and
	// so does every other.
	if err := b.db.Write(ctx, func(tx *sqlite.Tx) error {
		_, err := tx.Exec(`DELETE FROM leases WHERE key = 'held'`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if n, err := b.c.PruneHistory(ctx, b.clock.Now().Add(time.Second)); err != nil || n != 3 {
		t.Errorf("PruneHistory of everything = %d, %v; want 3", n, err)
	}
}
