package executor

import (
	"context"
	"sync"
	"time"
)

// RateWindow is a limit of Limit requests in any Window.
type RateWindow struct {
	Limit  int
	Window time.Duration
}

// PacingConfig shapes how fast baton sends mutating requests to GitHub for
// one installation, as GitHub asks integrators to: at most one mutating
// request per MinInterval, and content-creating requests under GitHub's
// published secondary limits.
type PacingConfig struct {
	// Disabled turns pacing off (benchmarks, the simulator in --dev).
	Disabled bool
	// MinInterval spaces the mutating requests of one installation.
	// Defaults to 1s; negative means no spacing.
	MinInterval time.Duration
	// ContentLimits bound content-creating requests of one installation.
	// Defaults to 80 a minute and 500 an hour.
	ContentLimits []RateWindow
	// MaxInlineWait is the longest a worker waits for its turn while
	// holding its place; a longer wait sends the operation back to the
	// queue so the worker can serve other installations. Defaults to 2s.
	MaxInlineWait time.Duration
	// MaxWaiters is how many workers may wait inline for one installation
	// at once; the others send their operations back to the queue, so that
	// workers remain for other installations. Defaults to 16.
	MaxWaiters int
}

func (c *PacingConfig) fill() {
	if c.MinInterval == 0 {
		c.MinInterval = time.Second
	}
	if c.ContentLimits == nil {
		c.ContentLimits = []RateWindow{{80, time.Minute}, {500, time.Hour}}
	}
	if c.MaxInlineWait == 0 {
		c.MaxInlineWait = 2 * time.Second
	}
	if c.MaxWaiters == 0 {
		c.MaxWaiters = 16
	}
}

// pacer keeps each installation's pace. Requests are spaced (see spacing),
// and each window is also enforced exactly: a request occupies a slot of the
// content windows from the moment it is allowed until Window after its
// response came back: GitHub counts the request when it arrives, which is
// between those two moments, so GitHub never sees more than Limit in any
// Window however long the request took.
type pacer struct {
	cfg PacingConfig
	now func() time.Time
	// minInterval spaces the mutating requests of an installation strictly
	// (GitHub asks for a second between them).
	minInterval time.Duration
	// interval and tolerance spread content-creating requests over their
	// shortest window instead of sending a burst and then holding back: a
	// generic cell rate algorithm with one request per interval on average
	// and a little catch-up (tolerance) after a request came late. The
	// windows themselves are still enforced exactly (see earliest).
	interval, tolerance time.Duration
	// spacing estimates the time between two requests, for requeue delays.
	spacing time.Duration

	// sweepEvery is how often acquire forgets the installations whose
	// pace holds nothing any more (see sweepLocked).
	sweepEvery time.Duration

	mu    sync.Mutex
	insts map[int64]*installationPace
	swept time.Time // the last sweep
}

type installationPace struct {
	last    time.Time    // start of the last mutating request
	tat     time.Time    // theoretical arrival time of the next request (GCRA)
	slots   []*time.Time // end times of recent requests; far future = in flight
	waiters int
}

func newPacer(cfg PacingConfig, now func() time.Time) *pacer {
	cfg.fill()
	p := &pacer{cfg: cfg, now: now, minInterval: max(cfg.MinInterval, 0), insts: make(map[int64]*installationPace)}
	shortest := RateWindow{}
	for _, w := range cfg.ContentLimits {
		if w.Limit > 0 && (shortest.Window == 0 || w.Window < shortest.Window) {
			shortest = w
		}
	}
	if shortest.Limit > 0 {
		p.interval = shortest.Window / time.Duration(shortest.Limit)
		p.tolerance = 2 * p.interval
	}
	p.spacing = max(p.minInterval, p.interval)
	p.sweepEvery = max(p.longest(), p.minInterval)
	if p.sweepEvery <= 0 {
		p.sweepEvery = time.Minute
	}
	return p
}

// longest is the longest content window: how long a request's slot counts.
func (p *pacer) longest() time.Duration {
	longest := time.Duration(0)
	for _, w := range p.cfg.ContentLimits {
		longest = max(longest, w.Window)
	}
	return longest
}

// sweepLocked forgets, at most once per sweepEvery, the installations
// whose pace no longer holds anything back: no worker waiting, no request
// in flight or still counting in a window, the spacing after the last
// request over, and no catch-up owed. A fresh pace would decide the same,
// so nothing is lost; without it the map would keep every installation
// served since the start (uninstalled ones too) with up to a window's
// worth of slots each, for as long as the server runs. Called with p.mu
// held.
func (p *pacer) sweepLocked(now time.Time) {
	if now.Sub(p.swept) < p.sweepEvery {
		return
	}
	p.swept = now
	for inst, ip := range p.insts {
		p.earliest(ip, now) // drops the slots that no longer count
		if ip.waiters == 0 && len(ip.slots) == 0 &&
			(ip.last.IsZero() || !ip.last.Add(p.minInterval).After(now)) &&
			!ip.tat.After(now.Add(-p.tolerance)) {
			delete(p.insts, inst)
		}
	}
}

// errPaceRequeue is returned by acquire when the wait is too long to hold a
// worker: the caller sends the operation back to the queue for delay.
type paceRequeue struct{ delay time.Duration }

func (p paceRequeue) Error() string { return "installation pace: wait " + p.delay.String() }

// acquire waits for the installation's next turn to send a mutating
// request and returns the function to call once the response is back
// (calling it again does nothing). A
// wait longer than MaxInlineWait, or with too many workers already
// waiting, is returned as paceRequeue instead; so is the rest of a wait
// when drain is closed (the worker begins to stop). The wait ends early,
// with context.Canceled, when cancelled is closed (nil: never).
func (p *pacer) acquire(ctx context.Context, cancelled, drain <-chan struct{}, inst int64) (done func(), err error) {
	if p == nil || p.cfg.Disabled {
		return func() {}, nil
	}
	waiting := false
	defer func() {
		if waiting {
			p.mu.Lock()
			p.insts[inst].waiters--
			p.mu.Unlock()
		}
	}()
	for {
		p.mu.Lock()
		now := p.now()
		if !waiting {
			p.sweepLocked(now) // never the entry of a waiter: it has one
		}
		ip := p.insts[inst]
		if ip == nil {
			ip = &installationPace{}
			p.insts[inst] = ip
		}
		at := p.earliest(ip, now)
		if !at.After(now) {
			end := new(time.Time)
			*end = farFuture
			ip.slots = append(ip.slots, end)
			ip.last = now
			// A request that came late (a worker woke up late, an
			// operation was not ready) leaves credit for up to tolerance,
			// so the average rate holds; the windows bound any catch-up.
			ip.tat = maxTime(ip.tat, now.Add(-p.tolerance)).Add(p.interval)
			p.mu.Unlock()
			return func() {
				// Once only: the caller also defers it, so that a panic
				// during the call (recovered by the queue's consumer)
				// does not leave the slot in flight, and the window
				// full, until the process restarts.
				p.mu.Lock()
				if end.Equal(farFuture) {
					*end = p.now()
				}
				p.mu.Unlock()
			}, nil
		}
		wait := at.Sub(now)
		if wait > p.cfg.MaxInlineWait || (!waiting && ip.waiters >= p.cfg.MaxWaiters) {
			delay := wait + time.Duration(ip.waiters)*max(p.spacing, 10*time.Millisecond)
			p.mu.Unlock()
			return nil, paceRequeue{delay: delay}
		}
		if !waiting {
			waiting = true
			ip.waiters++
		}
		p.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-cancelled:
			t.Stop()
			return nil, context.Canceled
		case <-drain:
			t.Stop()
			return nil, paceRequeue{delay: max(at.Sub(p.now()), time.Millisecond)}
		case <-t.C:
		}
	}
}

// admit says, before an operation takes its lease, whether acquire would
// send it back to the queue: it returns that delay, or 0 if the operation
// should go ahead. Deciding before the lease spares the two writes of a
// lease taken only to be given back.
func (p *pacer) admit(inst int64) time.Duration {
	if p == nil || p.cfg.Disabled {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	ip := p.insts[inst]
	if ip == nil {
		return 0
	}
	now := p.now()
	at := p.earliest(ip, now)
	if !at.After(now) {
		return 0
	}
	wait := at.Sub(now)
	if wait > p.cfg.MaxInlineWait || ip.waiters >= p.cfg.MaxWaiters {
		return wait + time.Duration(ip.waiters)*max(p.spacing, 10*time.Millisecond)
	}
	return 0
}

var farFuture = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// earliest returns when the installation may send next. Called with p.mu
// held; it also forgets slots older than the longest window.
func (p *pacer) earliest(ip *installationPace, now time.Time) time.Time {
	longest := p.longest()
	keep := ip.slots[:0]
	for _, end := range ip.slots {
		if end.Add(longest).After(now) {
			keep = append(keep, end)
		}
	}
	clear(ip.slots[len(keep):])
	ip.slots = keep

	var at time.Time
	if !ip.last.IsZero() {
		at = ip.last.Add(p.minInterval)
	}
	if p.interval > 0 {
		at = maxTime(at, ip.tat)
	}
	for _, w := range p.cfg.ContentLimits {
		// Slots still counting in this window, newest last.
		var ends []time.Time
		for _, end := range ip.slots {
			if end.Add(w.Window).After(now) {
				ends = append(ends, *end)
			}
		}
		if len(ends) < w.Limit {
			continue
		}
		// The window has room again when the oldest of the last Limit
		// slots leaves it. In-flight slots (far future) never leave.
		oldest := ends[len(ends)-w.Limit]
		for _, e := range ends[len(ends)-w.Limit:] {
			if e.Before(oldest) {
				oldest = e
			}
		}
		free := oldest.Add(w.Window)
		if oldest.Equal(farFuture) {
			// Limit requests are in flight: look again shortly.
			free = now.Add(20 * time.Millisecond)
		}
		if free.After(at) {
			at = free
		}
	}
	return at
}

// pauses holds the waits GitHub imposed on whole installations (rate
// limits): every worker checks them before working for the installation.
type pauses struct {
	mu    sync.Mutex
	until map[int64]time.Time
}

func newPauses() *pauses { return &pauses{until: make(map[int64]time.Time)} }

// set extends the installation's pause to until (never shortens it) and
// reports whether that began a pause (none was in force at now): what an
// operator is told of, once, rather than of every extension. It also
// forgets the pauses that have ended by now: remaining does too, but only
// for the installations still asked about (not an uninstalled one).
func (p *pauses) set(inst int64, now, until time.Time) (began bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, u := range p.until {
		if !u.After(now) {
			delete(p.until, id)
		}
	}
	_, inForce := p.until[inst]
	if until.After(p.until[inst]) {
		p.until[inst] = until
		return !inForce
	}
	return false
}

// remaining returns how long the installation is still paused.
func (p *pauses) remaining(inst int64, now time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	u, ok := p.until[inst]
	if !ok {
		return 0
	}
	if !u.After(now) {
		delete(p.until, inst)
		return 0
	}
	return u.Sub(now)
}
