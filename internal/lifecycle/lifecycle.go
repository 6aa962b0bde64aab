// Package lifecycle holds what baton's long-running components share to
// stop: waiting for their goroutines within the caller's deadline.
package lifecycle

import (
	"context"
	"sync"
)

// Wait waits for wg, or returns ctx's error if ctx ends first (the
// goroutines are then left to finish on their own).
func Wait(ctx context.Context, wg *sync.WaitGroup) error {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
