package executor

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// At most MaxWaiters requests of an installation wait for their turn in
// the process; the next one is sent back to the queue at once, with a
// delay that leaves room for those ahead of it.
func TestPacerWaitersBounded(t *testing.T) {
	t.Parallel()
	p := newPacer(PacingConfig{MinInterval: time.Second, ContentLimits: []RateWindow{}, MaxInlineWait: 5 * time.Second, MaxWaiters: 1}, time.Now)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done, err := p.acquire(ctx, nil, nil, 3)
	if err != nil {
		t.Fatal(err)
	}
	done()
	waiting := make(chan error, 1)
	go func() {
		done, err := p.acquire(ctx, nil, nil, 3)
		if err == nil {
			done()
		}
		waiting <- err
	}()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		p.mu.Lock()
		n := p.insts[3].waiters
		p.mu.Unlock()
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the second request never waited")
		}
	}
	start := time.Now()
	_, err = p.acquire(ctx, nil, nil, 3)
	var rq paceRequeue
	if !errors.As(err, &rq) || time.Since(start) > 200*time.Millisecond {
		t.Fatalf("third request: %v after %v, want sent back at once", err, time.Since(start))
	}
	if rq.delay < time.Second {
		t.Errorf("sent back for %v, want at least the second's turn and its own", rq.delay)
	}
	if err := <-waiting; err != nil {
		t.Errorf("the waiting request: %v", err)
	}
}

// The waits go-github is shown are bounded at exactly MaxProviderWait:
// Retry-After and X-RateLimit-Reset just beyond it are brought back to it
// (go-github would otherwise refuse to send for longer than baton waits),
// and those within it are left alone.
func TestBoundWaitsAtMaxProviderWait(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	maxSecs := int64(MaxProviderWait / time.Second)
	reset := func(d int64) string { return strconv.FormatInt(now.Unix()+d, 10) }
	for _, c := range []struct {
		header, in, want string
	}{
		{"Retry-After", strconv.FormatInt(maxSecs, 10), strconv.FormatInt(maxSecs, 10)},
		{"Retry-After", strconv.FormatInt(maxSecs+1, 10), strconv.FormatInt(maxSecs, 10)},
		{"Retry-After", strconv.FormatInt(maxSecs*3/2, 10), strconv.FormatInt(maxSecs, 10)},
		{"X-Ratelimit-Reset", reset(maxSecs), reset(maxSecs)},
		{"X-Ratelimit-Reset", reset(maxSecs + 1), reset(maxSecs)},
		{"X-Ratelimit-Reset", reset(maxSecs * 3 / 2), reset(maxSecs)},
	} {
		h := http.Header{"Date": {now.Format(http.TimeFormat)}}
		h.Set(c.header, c.in)
		boundWaits(h, now)
		if got := h.Get(c.header); got != c.want {
			t.Errorf("%s %s: became %s, want %s", c.header, c.in, got, c.want)
		}
	}
}
