package queue

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
)

// crashChildEnv, when set to a data directory, makes the test binary run
// runCrashChild instead of the tests.
const crashChildEnv = "BATON_QUEUE_CRASH_CHILD_DIR"

const crashAckWait = 2 * time.Second

var crashOps = []string{"crash-0", "crash-1", "crash-2"}

// runCrashChild is the process the crash test kills: an embedded server,
// three operations dispatched and held by running handlers. It prints
// "ready" once all three are in hand, then waits to be killed.
func runCrashChild(dir string) {
	fail := func(err error) {
		fmt.Println("error:", err)
		os.Exit(2)
	}
	b, err := New(Config{DataDir: dir, Logger: zap.NewNop()})
	if err != nil {
		fail(err)
	}
	ctx := context.Background()
	if err := b.Start(ctx); err != nil {
		fail(err)
	}
	var held sync.WaitGroup
	held.Add(len(crashOps))
	c, err := NewConsumer(b, ConsumerConfig{
		Concurrency: len(crashOps),
		AckWait:     crashAckWait,
		Handler: func(ctx context.Context, _ string) Result {
			held.Done()
			<-ctx.Done()
			return Failed(ctx.Err())
		},
	})
	if err != nil {
		fail(err)
	}
	if err := c.Start(ctx); err != nil {
		fail(err)
	}
	for _, id := range crashOps {
		if err := b.Dispatch(ctx, id); err != nil {
			fail(err)
		}
	}
	held.Wait()
	fmt.Println("ready")
	select {}
}

// SIGKILL of a process running the embedded server while handlers hold
// messages: after a restart on the same data directory, every unacknowledged
// message is delivered again within about AckWait.
func TestCrashRedelivers(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	timeout := time.After(30 * time.Second)
wait:
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("child exited before holding its operations")
			}
			if l == "ready" {
				break wait
			}
			if strings.HasPrefix(l, "error:") {
				t.Fatalf("child: %s", l)
			}
		case <-timeout:
			t.Fatal("child not ready in 30s")
		}
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL: nothing is shut down
		t.Fatal(err)
	}
	_ = cmd.Wait()
	for range lines {
	}

	restarted := time.Now()
	b := startBroker(t, dir)
	var mu sync.Mutex
	got := map[string]time.Duration{}
	startConsumer(t, b, ConsumerConfig{
		AckWait: crashAckWait,
		Handler: func(_ context.Context, id string) Result {
			mu.Lock()
			got[id] = time.Since(restarted)
			mu.Unlock()
			return Done()
		},
	})
	eventually(t, 4*crashAckWait, "every held operation redelivered", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == len(crashOps)
	})
	mu.Lock()
	t.Logf("redelivered after restart: %v (AckWait %s)", got, crashAckWait)
	mu.Unlock()
	eventually(t, 5*time.Second, "acknowledged", func() bool { return streamMsgs(t, b.sess.Load().ops) == 0 })
}
