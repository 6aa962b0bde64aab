package queue

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"embedded without data dir", Config{}, "DataDir"},
		{"embedded with replicas", Config{DataDir: "d", Replicas: 3}, "one replica"},
		{"embedded with credentials", Config{DataDir: "d", CredentialsFile: "c"}, "external server"},
		{"external with listen", Config{URL: "nats://x", ListenAddr: ":4222"}, "ListenAddr"},
		{"listen on every interface", Config{DataDir: "d", ListenAddr: "0.0.0.0:4222"}, "every interface"},
		{"listen on every v6 interface", Config{DataDir: "d", ListenAddr: "[::]:4222"}, "every interface"},
		{"listen on an empty host", Config{DataDir: "d", ListenAddr: ":4222"}, "every interface"},
		{"listen on 0, every interface to the C resolver", Config{DataDir: "d", ListenAddr: "0:4222"}, "not an IP address"},
		{"listen on a short address", Config{DataDir: "d", ListenAddr: "127.1:4222"}, "not an IP address"},
		{"external with sync", Config{URL: "nats://x", SyncAlways: true}, "SyncAlways"},
		{"short dedupe window", Config{DataDir: "d", DuplicateWindow: time.Minute}, "DuplicateWindow"},
		{"cert without key", Config{URL: "nats://x", TLSCertFile: "c"}, "TLSKeyFile"},
		{"creds and nkey", Config{URL: "nats://x", CredentialsFile: "c", NKeySeedFile: "n"}, "exclusive"},
		{"too many replicas", Config{URL: "nats://x", Replicas: 7}, "Replicas"},
		{"negative timeout", Config{DataDir: "d", PublishTimeout: -time.Second}, "PublishTimeout"},
	} {
		_, err := New(tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: New error = %v, want one mentioning %q", tc.name, err, tc.want)
		}
	}

	b, err := New(Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cfg  ConsumerConfig
		want string
	}{
		{"no handler", ConsumerConfig{}, "Handler"},
		{"short ack wait", ConsumerConfig{Handler: newRecorder().handle, AckWait: 100 * time.Millisecond}, "AckWait"},
		{"bad durable", ConsumerConfig{Handler: newRecorder().handle, Durable: "a.b"}, "Durable"},
		{"negative max ack pending", ConsumerConfig{Handler: newRecorder().handle, MaxAckPending: -1}, "MaxAckPending"},
	} {
		_, err := NewConsumer(b, tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: NewConsumer error = %v, want one mentioning %q", tc.name, err, tc.want)
		}
	}
	if _, err := NewReconciler(b, ReconcilerConfig{}); err == nil {
		t.Error("NewReconciler without functions: no error")
	}
}

func TestLifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, err := New(Config{DataDir: t.TempDir(), Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Ready(); !errors.Is(err, ErrNotRunning) {
		t.Errorf("Ready before Start = %v, want ErrNotRunning", err)
	}
	if err := b.Dispatch(ctx, "op"); !errors.Is(err, ErrNotRunning) {
		t.Errorf("Dispatch before Start = %v, want ErrNotRunning", err)
	}
	c, err := NewConsumer(b, ConsumerConfig{Handler: newRecorder().handle})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); !errors.Is(err, ErrNotRunning) {
		t.Errorf("consumer Start on a broker not started = %v, want ErrNotRunning", err)
	}
	if err := c.Stop(ctx); err != nil {
		t.Errorf("consumer Stop before Start = %v", err)
	}

	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Start(ctx); err == nil {
		t.Error("second Start: no error")
	}
	if err := b.Ready(); err != nil {
		t.Errorf("Ready = %v", err)
	}
	c2, err := NewConsumer(b, ConsumerConfig{Handler: newRecorder().handle, FetchWait: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := c2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c2.Ready(); err != nil {
		t.Errorf("consumer Ready = %v", err)
	}
	// The broker's Stop stops the consumer too.
	if err := b.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c2.Ready(); !errors.Is(err, ErrNotRunning) {
		t.Errorf("consumer Ready after broker Stop = %v, want ErrNotRunning", err)
	}
	if err := b.Stop(ctx); err != nil {
		t.Errorf("second Stop = %v", err)
	}
	if err := c2.Stop(ctx); err != nil {
		t.Errorf("consumer Stop after broker Stop = %v", err)
	}
	if err := b.Dispatch(ctx, "op"); !errors.Is(err, ErrNotRunning) {
		t.Errorf("Dispatch after Stop = %v, want ErrNotRunning", err)
	}
}

func TestListenAddr(t *testing.T) {
	t.Parallel()
	quiet := startBroker(t, "")
	if quiet.ListenURL() != "" {
		t.Errorf("ListenURL without ListenAddr = %q, want none", quiet.ListenURL())
	}

	b := startBroker(t, "", func(c *Config) { c.ListenAddr = "127.0.0.1:0" })
	url := b.ListenURL()
	if url == "" {
		t.Fatal("no ListenURL with ListenAddr set")
	}
	// An operator's client sees baton's streams.
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	dispatch(t, b, "seen-from-outside")
	msg, err := nc.Request("$JS.API.STREAM.INFO."+StreamOperations, nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(msg.Data), `"messages":1`) {
		t.Errorf("stream info from an outside client: %s", msg.Data)
	}
}

// Restarting the embedded server on the same data directory keeps the
// messages nobody acknowledged, and the streams are set up again without
// losing them.
func TestRestartKeepsUnacknowledged(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ids := opIDs("restart", 20)

	first, err := New(Config{DataDir: dir, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	dispatch(t, first, ids...)
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}

	b := startBroker(t, dir)
	if got := streamMsgs(t, b.sess.Load().ops); got != uint64(len(ids)) {
		t.Fatalf("after restart the stream holds %d messages, want %d", got, len(ids))
	}
	rec := newRecorder()
	startConsumer(t, b, ConsumerConfig{Handler: rec.handle})
	eventually(t, 10*time.Second, "every operation handled after restart", func() bool { return rec.seen() == len(ids) })
	for _, id := range ids {
		if n := rec.count(id); n != 1 {
			t.Errorf("%s handled %d times, want 1", id, n)
		}
	}
}

// A message sent back at once as its consumer stops — by its handler
// (drained) or by Stop's deadline — comes back at once after the embedded
// server restarts too, not once its AckWait has run out.
func TestSentBackAtStopSurvivesRestart(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		deadline time.Duration
		handler  func(ctx context.Context) Result
	}{
		{"handler gives it back", 10 * time.Second, func(ctx context.Context) Result {
			<-Draining(ctx)
			return RetryAfter(0)
		}},
		{"stop deadline", 200 * time.Millisecond, func(ctx context.Context) Result {
			<-ctx.Done()
			return Failed(ctx.Err())
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			first, err := New(Config{DataDir: dir, Logger: testLogger(t)})
			if err != nil {
				t.Fatal(err)
			}
			if err := first.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			started := make(chan struct{}, 1)
			c, err := NewConsumer(first, ConsumerConfig{AckWait: 5 * time.Minute, FetchWait: 100 * time.Millisecond,
				Handler: func(ctx context.Context, _ string) Result {
					started <- struct{}{}
					return tc.handler(ctx)
				}})
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			dispatch(t, first, "sent-back")
			select {
			case <-started:
			case <-time.After(5 * time.Second):
				t.Fatal("handler not called")
			}
			ctx, cancel := context.WithTimeout(context.Background(), tc.deadline)
			defer cancel()
			_ = c.Stop(ctx)
			if err := first.Close(); err != nil {
				t.Fatal(err)
			}

			b := startBroker(t, dir)
			rec := newRecorder()
			startConsumer(t, b, ConsumerConfig{AckWait: 5 * time.Minute, Handler: rec.handle})
			eventually(t, 10*time.Second, "redelivered after the restart", func() bool { return rec.count("sent-back") == 1 })
		})
	}
}

// A start asked to stop (baton signalled while it starts) does not wait
// out ConnectTimeout for an external server that accepts the connection
// and never answers: the start ends at once, with the context's error,
// which baton serve takes for a stop asked for, not a failure.
func TestStartEndsWithItsContextWhileConnecting(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 8)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c // held open, never answered
		}
	}()
	defer func() {
		ln.Close()
		for c := range accepted {
			c.Close()
		}
	}()
	b, err := New(Config{URL: "nats://" + ln.Addr().String(), ConnectTimeout: 20 * time.Second, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	start := time.Now()
	err = b.Start(ctx)
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Start took %v after its context ended", took)
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Start = %v, want context.Canceled", err)
	}
	_ = b.Stop(context.Background())
}

// An embedded JetStream that cannot start (its store is not a directory:
// a damaged data directory) is reported at once, naming the reason, not
// after ConnectTimeout: nats-server stops starting when it logs the fatal
// error, and would never become ready.
func TestStartReportsAFatalStoreErrorAtOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.MkdirAll(StoreDir(dir), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(StoreDir(dir), "jetstream"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := New(Config{DataDir: dir, ConnectTimeout: 20 * time.Second, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = b.Start(context.Background())
	took := time.Since(start)
	if err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("Start = %v, want the store's error", err)
	}
	if took > 5*time.Second {
		t.Errorf("Start took %v to report a fatal store error", took)
	}
	_ = b.Stop(context.Background())
}
