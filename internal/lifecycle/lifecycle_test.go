package lifecycle

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

func TestWait(t *testing.T) {
	var wg sync.WaitGroup
	release := make(chan struct{})
	wg.Go(func() { <-release })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := Wait(ctx, &wg); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait with a goroutine still running = %v, want the deadline", err)
	}
	close(release)
	if err := Wait(context.Background(), &wg); err != nil {
		t.Fatalf("Wait after the goroutine ended = %v", err)
	}
}
