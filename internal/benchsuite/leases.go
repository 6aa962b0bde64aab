package benchsuite

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/coordinator"
)

// LeasesDistinctKeys measures durable acquire+release pairs from 32
// holders, each on its own key.
func LeasesDistinctKeys(b *testing.B) {
	leasePairs(b, 32, func(g int) string { return fmt.Sprintf("issue:octo/app#%d", g) })
}

// LeasesOneKey measures acquire+release pairs from 8 holders contending
// for one key: a holder told lease_held asks again at once (held/pair
// counts those refusals).
func LeasesOneKey(b *testing.B) {
	leasePairs(b, 8, func(int) string { return "pull_request:octo/app#42" })
}

func leasePairs(b *testing.B, holders int, key func(g int) string) {
	db := openDB(b)
	c, err := coordinator.New(coordinator.Config{DB: db})
	if err != nil {
		fatalf(b, "%v", err)
	}
	ctx := context.Background()
	var (
		next, held atomic.Int64
		lat        latencies
		wg         sync.WaitGroup
	)
	before := db.Stats()
	resetTimer(b)
	for g := range holders {
		wg.Go(func() {
			owner := fmt.Sprintf("bench-holder-%d", g)
			var local []time.Duration
			defer func() { lat.add(local) }()
			for next.Add(1) <= int64(b.N) {
				t0 := time.Now()
				for {
					l, err := c.Acquire(ctx, key(g), owner, time.Minute)
					if errors.Is(err, coordinator.ErrLeaseHeld) {
						held.Add(1)
						continue
					}
					if err != nil {
						errorf(b, "acquire: %v", err)
						return
					}
					if err := c.Release(ctx, l); err != nil {
						errorf(b, "release: %v", err)
						return
					}
					break
				}
				local = append(local, time.Since(t0))
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	reportRate(b)
	lat.report(b)
	if holders > 1 && key(0) == key(1) {
		b.ReportMetric(float64(held.Load())/float64(b.N), "held/pair")
	}
	reportWriter(b, db, before)
}
