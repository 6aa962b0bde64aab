package executor

import (
	"context"
	"sync"
	"time"

	"github.com/baton-dev/baton/queue"
)

// Nudger is implemented by dispatchers that can hand an operation to a
// worker at once even though the queue holds a delayed message for it
// (queue.Broker does). Cancel uses it when a queued operation is cancelled
// so that the next operation on its resource, which was waiting for it,
// runs now.
type Nudger interface {
	Nudge(ctx context.Context, operationID string) error
}

// signals hands out, by key, channels that are closed when the key is
// notified. The turnstile uses it to wake the operations waiting for a
// resource.
type signals struct {
	mu sync.Mutex
	m  map[string]chan struct{}
}

// watch gives key a new channel, in place of any it had, and returns it
// with a function that removes it unless it has been replaced.
func (w *signals) watch(key string) (<-chan struct{}, func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = make(map[string]chan struct{})
	}
	ch := make(chan struct{})
	w.m[key] = ch
	return ch, func() {
		w.mu.Lock()
		if w.m[key] == ch {
			delete(w.m, key)
		}
		w.mu.Unlock()
	}
}

// notifyIf closes key's channel, and removes it, if it is still ch.
func (w *signals) notifyIf(key string, ch <-chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if cur, ok := w.m[key]; ok && (<-chan struct{})(cur) == ch {
		close(cur)
		delete(w.m, key)
	}
}

// lookup returns key's channel, if it has one.
func (w *signals) lookup(key string) (<-chan struct{}, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	ch, ok := w.m[key]
	return ch, ok
}

// cancelSignals wakes the Process of an operation when Cancel is called
// for it in this process (other processes see the flag at the next
// boundary or poll). Every Process of the operation watching at once (a
// duplicate delivery beside the one that holds the lease) shares one
// channel, so that none of them takes the signal away from another.
type cancelSignals struct {
	mu sync.Mutex
	m  map[string]*cancelSignal
}

type cancelSignal struct {
	ch       chan struct{}
	watchers int
}

// watch returns the channel closed at the operation's next notify, and
// the function that stops watching it.
func (c *cancelSignals) watch(id string) (<-chan struct{}, func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[string]*cancelSignal)
	}
	sig, ok := c.m[id]
	if !ok {
		sig = &cancelSignal{ch: make(chan struct{})}
		c.m[id] = sig
	}
	sig.watchers++
	return sig.ch, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if sig.watchers--; sig.watchers == 0 && c.m[id] == sig {
			delete(c.m, id)
		}
	}
}

// notify closes the channel of every Process watching the operation.
func (c *cancelSignals) notify(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if sig, ok := c.m[id]; ok {
		close(sig.ch)
		delete(c.m, id)
	}
}

// turnstile knows which resources an operation of this process holds, so
// that the next operation on one of them can wait for it in memory (it
// usually finishes within milliseconds) instead of going back to the queue
// and waiting out a delay.
type turnstile struct{ held signals }

// enter records that key is held here and returns leave, which records
// that this holder left it and wakes its waiters. leave may be called more
// than once; it touches only this holder's turn, never that of the next
// holder of the key.
func (t *turnstile) enter(key string) (leave func()) {
	ch, _ := t.held.watch(key)
	return func() { t.held.notifyIf(key, ch) }
}

// wait waits, at most d, for key to be left if it is held here. It
// reports whether it was held here and has been left. The wait ends early
// when ctx ends or its queue consumer begins to stop (queue.Draining).
func (t *turnstile) wait(ctx context.Context, key string, d time.Duration) bool {
	ch, ok := t.held.lookup(key)
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
	case <-queue.Draining(ctx): // the worker is stopping: the queue has it
	}
	return false
}
