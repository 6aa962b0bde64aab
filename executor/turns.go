package executor

import (
	"context"
	"sync"
	"time"
)

// Nudger is implemented by dispatchers that can hand an operation to a
// worker at once even though the queue holds a delayed message for it
// (queue.Broker does). Cancel uses it when a queued operation is cancelled
// so that the next operation on its resource, which was waiting for it,
// runs now.
type Nudger interface {
	Nudge(ctx context.Context, operationID string) error
}

// turnstile knows which resources an operation of this process holds, so
// that the next operation on one of them can wait for it in memory (it
// usually finishes within milliseconds) instead of going back to the queue
// and waiting out a delay.
type turnstile struct {
	mu   sync.Mutex
	held map[string]chan struct{}
}

// enter records that key is held here; leave must follow.
func (t *turnstile) enter(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.held == nil {
		t.held = make(map[string]chan struct{})
	}
	t.held[key] = make(chan struct{})
}

// leave records that key is no longer held here and wakes its waiters.
func (t *turnstile) leave(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if ch, ok := t.held[key]; ok {
		close(ch)
		delete(t.held, key)
	}
}

// wait waits, at most d, for key to be left if it is held here. It
// reports whether it was held here and has been left.
func (t *turnstile) wait(ctx context.Context, key string, d time.Duration) bool {
	t.mu.Lock()
	ch, ok := t.held[key]
	t.mu.Unlock()
	if !ok {
		return false
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ch:
		return true
	case <-timer.C:
	case <-ctx.Done():
	}
	return false
}
