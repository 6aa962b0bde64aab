package executor

import (
	"context"
	"errors"
	"sort"
	"sync"
	"testing"
	"time"
)

// No window of the configured length ever holds more than Limit requests
// as the server would count them (at arrival, between start and end), and
// the achieved rate is close to the ceiling.
func TestPacerKeepsUnderContentLimit(t *testing.T) { // measures a rate: not parallel
	const (
		limit  = 10
		window = 200 * time.Millisecond
		total  = 60
	)
	ceiling := float64(limit) / window.Seconds()
	// A loaded machine (other packages' tests run meanwhile) can only
	// slow the requests down: a rate short of the ceiling is measured
	// again, a few times, before it counts against the pacer. A window
	// holding too many requests, or a rate above the ceiling, fails at
	// once.
	for try := 1; ; try++ {
		rate := measurePacedRate(t, limit, window, total)
		if rate > ceiling*1.1 {
			t.Fatalf("achieved %.1f/s against a ceiling of %.1f/s", rate, ceiling)
		}
		if rate >= ceiling*0.8 {
			return
		}
		if try == 3 {
			t.Fatalf("achieved %.1f/s against a ceiling of %.1f/s, %d times", rate, ceiling, try)
		}
		t.Logf("achieved %.1f/s against a ceiling of %.1f/s; measuring again", rate, ceiling)
	}
}

// measurePacedRate sends total requests of 5 ms through a pacer of limit
// requests per window from 8 goroutines, fails t if a window holds more
// than limit, and returns the rate achieved.
func measurePacedRate(t *testing.T, limit int, window time.Duration, total int) float64 {
	t.Helper()
	p := newPacer(PacingConfig{MinInterval: -1, ContentLimits: []RateWindow{{limit, window}},
		MaxInlineWait: time.Minute, MaxWaiters: 100}, time.Now)
	var (
		mu     sync.Mutex
		starts []time.Time
		ends   []time.Time
		wg     sync.WaitGroup
	)
	begin := time.Now()
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				if len(starts) >= total {
					mu.Unlock()
					return
				}
				mu.Unlock()
				done, err := p.acquire(context.Background(), nil, nil, 7)
				if err != nil {
					t.Error(err)
					return
				}
				s := time.Now()
				time.Sleep(5 * time.Millisecond) // the request's round trip
				e := time.Now()
				done()
				mu.Lock()
				starts, ends = append(starts, s), append(ends, e)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(begin)
	// A server counting at any moment between start and end: the worst
	// case for us is counting each request at its end. Check every window
	// that starts at some request's end.
	sort.Slice(ends, func(i, j int) bool { return ends[i].Before(ends[j]) })
	sort.Slice(starts, func(i, j int) bool { return starts[i].Before(starts[j]) })
	for _, from := range ends {
		n := 0
		for _, s := range starts {
			if !s.Before(from) && s.Before(from.Add(window)) {
				n++
			}
		}
		if n > limit {
			t.Fatalf("%d requests started within %v after a response", n, window)
		}
	}
	return float64(len(starts)) / elapsed.Seconds()
}

func TestPacerSendsLongWaitsBack(t *testing.T) {
	t.Parallel()
	p := newPacer(PacingConfig{MinInterval: 10 * time.Second, MaxInlineWait: time.Second}, time.Now)
	done, err := p.acquire(context.Background(), nil, nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	done()
	_, err = p.acquire(context.Background(), nil, nil, 1)
	var rq paceRequeue
	if !errors.As(err, &rq) || rq.delay < 9*time.Second {
		t.Fatalf("second acquire = %v, want a requeue of about 10s", err)
	}
	if w := p.admit(1); w < 9*time.Second {
		t.Errorf("admit = %v", w)
	}
	// Another installation is not held back.
	if _, err := p.acquire(context.Background(), nil, nil, 2); err != nil {
		t.Errorf("other installation: %v", err)
	}
}

// A wait for the installation's turn ends at once when the operation's
// cancellation channel closes (context.Canceled) or its worker begins to
// stop (a requeue for the rest of the wait), and gives its place back: the
// next caller waits its turn, not behind a phantom waiter.
func TestPacerWaitEnds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		want func(error) bool
	}{
		{"cancelled", func(err error) bool { return errors.Is(err, context.Canceled) }},
		{"draining", func(err error) bool {
			var rq paceRequeue
			return errors.As(err, &rq) && rq.delay > 5*time.Second && rq.delay <= 10*time.Second
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := newPacer(PacingConfig{MinInterval: 10 * time.Second, MaxInlineWait: time.Minute, MaxWaiters: 1}, time.Now)
			done, err := p.acquire(context.Background(), nil, nil, 1)
			if err != nil {
				t.Fatal(err)
			}
			done()
			ch := make(chan struct{})
			time.AfterFunc(50*time.Millisecond, func() { close(ch) })
			cancelled, drain := ch, (<-chan struct{})(nil)
			if tc.name == "draining" {
				cancelled, drain = nil, ch
			}
			start := time.Now()
			if _, err := p.acquire(context.Background(), cancelled, drain, 1); !tc.want(err) {
				t.Fatalf("acquire = %v", err)
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("the wait outlived its end by %v", took)
			}
			p.mu.Lock()
			waiters := p.insts[1].waiters
			p.mu.Unlock()
			if waiters != 0 {
				t.Errorf("%d waiters left behind", waiters)
			}
		})
	}
}

func TestPauses(t *testing.T) {
	t.Parallel()
	p := newPauses()
	now := time.Now()
	p.set(1, now, now.Add(90*time.Second))
	p.set(1, now, now.Add(10*time.Second)) // never shortened
	if r := p.remaining(1, now); r != 90*time.Second {
		t.Errorf("remaining = %v", r)
	}
	if r := p.remaining(2, now); r != 0 {
		t.Errorf("other installation paused %v", r)
	}
	if r := p.remaining(1, now.Add(2*time.Minute)); r != 0 {
		t.Errorf("after the pause: %v", r)
	}
}

// The pauses of installations nobody asks about any more (uninstalled, or
// quiet) are forgotten once over, so the map holds the installations
// paused now, not every one ever rate-limited since the start.
func TestPausesForgetEnded(t *testing.T) {
	t.Parallel()
	p := newPauses()
	now := time.Now()
	for inst := int64(1); inst <= 1000; inst++ {
		p.set(inst, now, now.Add(time.Minute))
	}
	later := now.Add(2 * time.Minute)
	p.set(5000, later, later.Add(time.Minute))
	p.mu.Lock()
	n := len(p.until)
	p.mu.Unlock()
	if n != 1 {
		t.Errorf("%d pauses kept after all but one ended, want 1", n)
	}
	if r := p.remaining(5000, later); r != time.Minute {
		t.Errorf("the pause in force: remaining %v", r)
	}
}
