package app

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/sqlite"
)

// A replay whose caller gives up waiting for the dispatcher's loop (busy
// reading the ledger) still reaches it: the delivery is pending in the
// ledger from the moment Replay made it so, and the loop learns of
// pending deliveries only as they are recorded (the replayed one was
// recorded long before), so a replay the loop never took would stay
// pending, unhandled, until the next start.
func TestReplayReachesABusyDispatcher(t *testing.T) {
	t.Parallel()
	db := openHookDB(t, sqlite.Options{Synchronous: "NORMAL", ReadConns: 1})
	var broken atomic.Bool
	broken.Store(true)
	h := EventHandlerFunc{On: []string{"pull_request"}, Func: func(context.Context, Delivery) error {
		if broken.Load() {
			return Permanent(errors.New("not yet"))
		}
		return nil
	}}
	e := newDispatchEnv(t, db, nil, map[string]EventHandler{"h": h})
	e.start()
	ctx := hookCtx(t)
	e.record(ctx, "r1", "pull_request", "octo/a")
	e.waitState(ctx, "r1", DeliveryFailed)
	broken.Store(false)

	// The loop's next read of the ledger waits for the one read
	// connection, held here.
	rows, err := db.Query(ctx, `SELECT 1`)
	if err != nil {
		t.Fatal(err)
	}
	e.record(ctx, "r2", "pull_request", "octo/b") // the loop goes to read it
	time.Sleep(100 * time.Millisecond)
	rctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	err = e.disp.Replay(rctx, "r1")
	cancel()
	rows.Close()
	if err != nil {
		t.Errorf("Replay: %v (the delivery is pending in the ledger all the same)", err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	e.waitState(wctx, "r1", DeliveryHandled)
}
