package benchsuite

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// Percentile is nearest-rank: sorted[ceil(n·p)-1]. With values 1..n ms the
// rank is the value itself.
func TestPercentile(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		n        int
		p50, p99 int // ranks, 1-based
	}{
		{1, 1, 1},
		{2, 1, 2},
		{100, 50, 99},
		{160, 80, 159}, // rounding n·p (158.4) would give the 158th
		{1000, 500, 990},
		{150, 75, 149}, // 148.5: rounding half up gives 149 too, ceil must not give 150
		{199, 100, 198},
	} {
		sorted := make([]time.Duration, c.n)
		for i := range sorted {
			sorted[i] = time.Duration(i+1) * time.Millisecond
		}
		if got, want := Percentile(sorted, 0.50), time.Duration(c.p50)*time.Millisecond; got != want {
			t.Errorf("n=%d: p50 %v, want %v", c.n, got, want)
		}
		if got, want := Percentile(sorted, 0.99), time.Duration(c.p99)*time.Millisecond; got != want {
			t.Errorf("n=%d: p99 %v, want %v", c.n, got, want)
		}
		if got, want := percentileMs(sorted, 0.99), float64(c.p99); got != want {
			t.Errorf("n=%d: percentileMs p99 %v, want %v", c.n, got, want)
		}
	}
	if got := Percentile(nil, 0.99); got != 0 {
		t.Errorf("no values: %v", got)
	}
}

// A benchmark whose ops could not all be made (spread failed it) does not
// wait minutes for their completions, which will never come: it reports
// the failure at once.
func TestAwaitAllAfterFailedOps(t *testing.T) {
	never := make(chan struct{})
	start := time.Now()
	r := runOne(Benchmark{Name: "e2e", Op: "an op", Func: func(b *testing.B) {
		spread(b, 4, nil, func(i int) error {
			if i == 0 {
				return errors.New("the disk is full")
			}
			return nil
		})
		if awaitAll(b, never, time.Minute, func() string { return "timed out" }) {
			t.Error("awaitAll saw every op done")
		}
	}})
	if took := time.Since(start); took > 10*time.Second || !strings.Contains(r.Err, "the disk is full") {
		t.Errorf("after %v: %+v", took, r)
	}
}
