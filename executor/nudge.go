package executor

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Nudger is implemented by dispatchers that can hand an operation to a
// worker at once even though the queue holds a delayed message for it
// (queue.Broker does).
type Nudger interface {
	Nudge(ctx context.Context, operationID string) error
}

// waitlist remembers operations sent back because their resource was busy
// (its lease held, or an older operation on it unfinished), so that the
// moment the resource is freed they are nudged instead of waiting out the
// busy delay. It is a best effort in memory: an operation it forgets still
// comes back after the delay.
type waitlist struct {
	nudger Nudger
	log    *zap.Logger

	mu      sync.Mutex
	waiting map[string]map[string]struct{} // resource key → operation IDs
	size    int

	ch       chan string
	quit     chan struct{}
	done     chan struct{}
	startOne sync.Once
	stopOne  sync.Once
	started  bool
}

// Bounds of the waitlist's memory.
const (
	maxWaitingPerResource = 64
	maxWaiting            = 16384
)

func newWaitlist(n Nudger, log *zap.Logger) *waitlist {
	return &waitlist{nudger: n, log: log, waiting: make(map[string]map[string]struct{}),
		ch: make(chan string, 4096), quit: make(chan struct{}), done: make(chan struct{})}
}

func (w *waitlist) start() {
	if w.nudger == nil {
		return
	}
	w.startOne.Do(func() {
		w.mu.Lock()
		w.started = true
		w.mu.Unlock()
		go w.run()
	})
}

func (w *waitlist) stop(ctx context.Context) error {
	w.mu.Lock()
	started := w.started
	w.mu.Unlock()
	if !started {
		return nil
	}
	w.stopOne.Do(func() { close(w.quit) })
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// wait records that operationID waits for resource key.
func (w *waitlist) wait(key, operationID string) {
	if w.nudger == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	ids := w.waiting[key]
	if ids == nil {
		ids = make(map[string]struct{})
		w.waiting[key] = ids
	}
	if _, ok := ids[operationID]; ok || len(ids) >= maxWaitingPerResource || w.size >= maxWaiting {
		return
	}
	ids[operationID] = struct{}{}
	w.size++
}

// freed nudges the operations waiting for resource key.
func (w *waitlist) freed(key string) {
	if w.nudger == nil {
		return
	}
	w.mu.Lock()
	ids := w.waiting[key]
	delete(w.waiting, key)
	w.size -= len(ids)
	w.mu.Unlock()
	for id := range ids {
		select {
		case w.ch <- id:
		default: // full: it comes back after the busy delay anyway
		}
	}
}

func (w *waitlist) run() {
	defer close(w.done)
	for {
		select {
		case <-w.quit:
			return
		case id := <-w.ch:
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if err := w.nudger.Nudge(ctx, id); err != nil {
				w.log.Debug("nudge failed", zap.String(LogEvent, "nudge_failed"), zap.String(LogOperationID, id), zap.Error(err))
			}
			cancel()
		}
	}
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
