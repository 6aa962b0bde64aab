package queue

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// natsServerBinary finds the nats-server binary, or skips the test — unless
// CI is set, where its absence is a failure.
func natsServerBinary(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("nats-server not found in PATH (CI is set): %v", err)
		}
		t.Skip("nats-server not installed (apt-get install nats-server); skipping the external-server test")
	}
	return bin
}

// externalServer runs nats-server with JetStream storing in dir on port,
// and can kill and restart it.
type externalServer struct {
	t    *testing.T
	bin  string
	dir  string
	port int
	cmd  *exec.Cmd
}

func (s *externalServer) url() string { return "nats://127.0.0.1:" + strconv.Itoa(s.port) }

func (s *externalServer) start() {
	s.t.Helper()
	s.cmd = exec.Command(s.bin, "-js", "-sd", s.dir, "-a", "127.0.0.1", "-p", strconv.Itoa(s.port))
	if testing.Verbose() {
		s.cmd.Stderr = os.Stderr
	}
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	eventually(s.t, 10*time.Second, "nats-server accepting connections", func() bool {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(s.port), 100*time.Millisecond)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
}

func (s *externalServer) kill() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(syscall.SIGKILL)
		_ = s.cmd.Wait()
		s.cmd = nil
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// An external nats-server killed (SIGKILL) and restarted mid-stream: the
// client reconnects, dispatches during the outage fail visibly, and with
// the reconciler every operation reaches the handler.
func TestExternalServerKilledAndRestarted(t *testing.T) {
	t.Parallel()
	srv := &externalServer{t: t, bin: natsServerBinary(t), dir: t.TempDir(), port: freePort(t)}
	srv.start()
	t.Cleanup(srv.kill)

	b, err := New(Config{URL: srv.url(), ReconnectWait: 50 * time.Millisecond, PublishTimeout: time.Second, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = b.Stop(ctx)
	})

	store := newFakeStore()
	rec := newRecorder()
	startConsumer(t, b, ConsumerConfig{
		AckWait: 2 * time.Second,
		Handler: func(ctx context.Context, id string) Result {
			store.finish(id)
			return rec.handle(ctx, id)
		},
	})
	r, err := NewReconciler(b, ReconcilerConfig{
		Candidates:     store.candidates,
		MarkDispatched: store.markDispatched,
		Interval:       200 * time.Millisecond,
		MinAge:         time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}

	// The executor's part: record, dispatch, mark dispatched on success.
	var failed int
	submit := func(id string) {
		store.add(id, time.Now())
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := b.Dispatch(ctx, id); err != nil {
			failed++
			return
		}
		_ = store.markDispatched(ctx, []string{id}, time.Now())
	}
	n := 0
	next := func() string { n++; return fmt.Sprintf("ext-%04d", n) }

	for range 150 {
		submit(next())
	}
	srv.kill()
	for range 50 {
		submit(next())
	}
	if failed == 0 {
		t.Error("no dispatch failed while the server was down")
	}
	if err := b.Ready(); err == nil {
		t.Error("Ready while the server is down: nil")
	}
	srv.start()
	eventually(t, 10*time.Second, "client reconnected", func() bool { return b.Ready() == nil })
	for range 150 {
		submit(next())
	}
	eventually(t, 30*time.Second, "every operation handled", func() bool { return store.pending() == 0 })
	if rec.seen() != n {
		t.Errorf("%d of %d operations reached the handler", rec.seen(), n)
	}
	t.Logf("%d operations, %d dispatches failed during the outage, %d republished by the reconciler, %d handler calls",
		n, failed, b.Stats().Republished, rec.total())
}
