package mergequeue_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/app/mergequeue"
)

// The scenario on 20 repositories at once, one of them with its lease
// held by another holder all along: the other 19 go through the whole
// scenario meanwhile (no repository waits on another's lease), and the
// blocked one, whose deliveries waited, catches up once the lease is
// free.
func TestTwentyRepositoriesAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStack(t, stackOptions{})
	const repos = 20
	blocked := fmt.Sprintf("many-%02d", 0)
	lease, err := s.coord.Acquire(ctx, mergequeue.LeaseKey("octo", blocked), "someone-else", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	keep, stop := s.coord.KeepAlive(ctx, lease)
	defer stop()

	var others, all sync.WaitGroup
	others.Add(repos - 1)
	all.Add(repos)
	for i := range repos {
		name := fmt.Sprintf("many-%02d", i)
		gt := goTester{t: t, name: name}
		o := scenarioOptions{within: 2 * time.Minute, poll: 250 * time.Millisecond}
		if name == blocked {
			o.afterLabels = func() {
				others.Wait()
				if keep.Err() != nil {
					gt.Fatalf("the blocking lease was lost: %v", context.Cause(keep))
				}
				if n := len(s.entries(gt, name)); n != 0 {
					gt.Fatalf("%d entries while the lease was held by another", n)
				}
				stop()
				if err := s.coord.Release(ctx, lease); err != nil {
					gt.Fatal(err)
				}
			}
		}
		go func() {
			defer all.Done()
			if name != blocked {
				defer others.Done()
			}
			scenario(gt, s, name, o)
		}()
	}
	all.Wait()
}
