package coordinator

import (
	"context"
	"slices"
	"sync"
	"time"
)

// FakeClock is a [Clock] whose time moves only when told to. Timers fire
// when Advance or Set moves the time past them. Tests of baton use it to
// pass a lease's expiry or a renewal interval without sleeping, and
// [FakeClock.WaitTimers] to learn when a goroutine has armed the timer it
// is about to wait on.
type FakeClock struct {
	mu      sync.Mutex
	now     time.Time
	timers  map[*fakeTimer]struct{} // armed, not fired or stopped
	changed chan struct{}           // closed and replaced whenever timers changes
}

var _ Clock = (*FakeClock)(nil)

// NewFakeClock returns a fake clock reading start.
func NewFakeClock(start time.Time) *FakeClock {
	return &FakeClock{now: start, timers: make(map[*fakeTimer]struct{}), changed: make(chan struct{})}
}

// Now returns the fake time.
func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the time forward by d and fires every timer that falls due,
// earliest first.
func (c *FakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.setLocked(c.now.Add(d))
	c.mu.Unlock()
}

// Set moves the time to t (which may be earlier: a wall clock set back) and
// fires every timer that falls due.
func (c *FakeClock) Set(t time.Time) {
	c.mu.Lock()
	c.setLocked(t)
	c.mu.Unlock()
}

func (c *FakeClock) setLocked(t time.Time) {
	c.now = t
	var due []*fakeTimer
	for ft := range c.timers {
		if !ft.when.After(t) {
			due = append(due, ft)
		}
	}
	slices.SortFunc(due, func(a, b *fakeTimer) int { return a.when.Compare(b.when) })
	for _, ft := range due {
		c.fireLocked(ft)
	}
	if len(due) > 0 {
		c.signalLocked()
	}
}

// Timers returns the times at which the armed timers will fire, earliest
// first.
func (c *FakeClock) Timers() []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]time.Time, 0, len(c.timers))
	for ft := range c.timers {
		out = append(out, ft.when)
	}
	slices.SortFunc(out, time.Time.Compare)
	return out
}

// WaitTimers waits until ready, given the armed timers' firing times
// (earliest first), returns true, or ctx ends.
func (c *FakeClock) WaitTimers(ctx context.Context, ready func(when []time.Time) bool) error {
	for {
		c.mu.Lock()
		ch := c.changed
		c.mu.Unlock()
		if ready(c.Timers()) {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// BlockUntil waits until at least n timers are armed, or ctx ends.
func (c *FakeClock) BlockUntil(ctx context.Context, n int) error {
	return c.WaitTimers(ctx, func(w []time.Time) bool { return len(w) >= n })
}

// NewTimer implements Clock.
func (c *FakeClock) NewTimer(d time.Duration) Timer {
	ft := &fakeTimer{c: c, ch: make(chan time.Time, 1)}
	c.mu.Lock()
	c.armLocked(ft, d)
	c.mu.Unlock()
	return ft
}

func (c *FakeClock) armLocked(ft *fakeTimer, d time.Duration) {
	ft.when = c.now.Add(d)
	if d <= 0 {
		c.fireLocked(ft)
	} else {
		c.timers[ft] = struct{}{}
	}
	c.signalLocked()
}

func (c *FakeClock) fireLocked(ft *fakeTimer) {
	delete(c.timers, ft)
	select {
	case ft.ch <- c.now:
	default:
	}
}

func (c *FakeClock) signalLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

type fakeTimer struct {
	c    *FakeClock
	ch   chan time.Time
	when time.Time // guarded by c.mu
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	return t.stopLocked()
}

func (t *fakeTimer) stopLocked() bool {
	_, armed := t.c.timers[t]
	if armed {
		delete(t.c.timers, t)
		t.c.signalLocked()
	}
	select { // no stale value after Stop, as with time.Timer since Go 1.23
	case <-t.ch:
	default:
	}
	return armed
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	armed := t.stopLocked()
	t.c.armLocked(t, d)
	return armed
}
