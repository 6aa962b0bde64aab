package app

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
)

// A replay that reaches the dispatcher's loop after the worker recorded
// the delivery failed but before the loop took the worker's result (the
// redelivery GitHub was asked for arrives at that moment) is handled: the
// loop still knows the delivery then, and must not drop it when the
// result comes, or it stays pending, unhandled, until the next start,
// though the receiver answered "replayed".
func TestReplayBetweenFailureAndItsResult(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	h := EventHandlerFunc{On: []string{"pull_request"}, Func: func(context.Context, Delivery) error {
		if calls.Add(1) == 1 {
			return Permanent(errors.New("not yet"))
		}
		return nil
	}}
	// The worker is held where it logs the failure: after the ledger says
	// failed, before its result goes to the loop.
	entered, release := make(chan struct{}), make(chan struct{})
	var held atomic.Bool
	logger := zaptest.NewLogger(t, zaptest.WrapOptions(zap.Hooks(func(en zapcore.Entry) error {
		if en.Message == "delivery failed; giving up" && held.CompareAndSwap(false, true) {
			close(entered)
			<-release
		}
		return nil
	})))
	e := newDispatchEnv(t, nil, func(c *EventDispatcherConfig) { c.Logger = logger }, map[string]EventHandler{"h": h})
	e.start()
	ctx := hookCtx(t)
	e.record(ctx, "r1", "pull_request", "octo/a")
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("the delivery never failed")
	}
	if err := e.disp.Replay(ctx, "r1"); err != nil {
		close(release)
		t.Fatalf("Replay: %v", err)
	}
	close(release)
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	e.waitState(wctx, "r1", DeliveryHandled)
	if n := calls.Load(); n != 2 {
		t.Errorf("handler ran %d times, want 2", n)
	}
}
