package executor

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/baton-dev/baton/schema"
)

// panickingTransport panics on the first comment it is asked to post,
// the way a bug in the call path would, and sends the rest on.
type panickingTransport struct {
	next     http.RoundTripper
	panicked atomic.Bool
	done     chan struct{}
}

func (p *panickingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/comments") && p.panicked.CompareAndSwap(false, true) {
		close(p.done)
		panic("boom in the call path")
	}
	return p.next.RoundTrip(r)
}

// A panic while an operation holds its resource's lease releases the
// lease at once: the resource is not blocked until the lease's TTL runs
// out, and the operation, sent back as a failure, runs again (probing
// first: the panicked call may have been sent) and posts once.
func TestPanicUnderTheLeaseReleasesIt(t *testing.T) {
	t.Parallel()
	pt := &panickingTransport{done: make(chan struct{})}
	core, logs := observer.New(zap.InfoLevel)
	s := newStack(t, stackOptions{
		logger: zap.New(core),
		// A TTL far longer than the test waits for the lease to go.
		exec:      Config{LeaseTTL: 2 * time.Minute},
		transport: func(next http.RoundTripper) http.RoundTripper { pt.next = next; return pt },
	})
	rec := s.submit(t, "panic", schema.ActionComment, issue(10), `{"body":"secret-body"}`)
	select {
	case <-pt.done:
	case <-time.After(20 * time.Second):
		t.Fatal("the comment was never posted")
	}
	key := issue(10).Key()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err := s.coord.Check(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		if !st.Locked {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("lease on %s still held %v after the panic: %+v", key, 5*time.Second, st)
		}
		time.Sleep(20 * time.Millisecond)
	}
	got := s.await(t, rec.OperationID, 30*time.Second)
	if got.Status != schema.StatusSucceeded {
		t.Fatalf("status=%s %s %s", got.Status, got.LastErrorCategory, got.LastErrorMessage)
	}
	n := 0
	for _, e := range s.sim.Effects() {
		if e.Method == "POST" && strings.HasSuffix(e.Path, "/issues/10/comments") {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d comments posted, want 1", n)
	}
	panics := logs.FilterFieldKey("event").FilterField(zap.String("event", "operation_panicked")).All()
	if len(panics) != 1 || panics[0].ContextMap()["operationId"] != rec.OperationID {
		t.Errorf("want one operation_panicked entry for the operation, got %+v", panics)
	}
	for _, e := range logs.All() {
		for k, v := range e.ContextMap() {
			if strings.Contains(fmt.Sprint(v), "secret-body") || strings.Contains(fmt.Sprint(v), "boom in the call path") {
				t.Errorf("log %q field %s holds the payload or the panic's value: %v", e.Message, k, v)
			}
		}
	}
}
