package proof

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/baton-dev/baton/app/ghsim"
	"github.com/baton-dev/baton/executor"
)

var (
	buildOnce sync.Once
	buildPath string
	buildErr  error
)

// batonBinary builds cmd/baton once per test run (with -race when the
// tests run with it, so the server's own races are caught too) and returns
// its path.
func batonBinary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		root, err := filepath.Abs("..")
		if err != nil {
			buildErr = err
			return
		}
		if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
			buildErr = fmt.Errorf("module root not found above the test's directory: %w", err)
			return
		}
		out := filepath.Join(binDir, "baton")
		args := []string{"build", "-o", out}
		if raceEnabled {
			args = append(args, "-race")
		}
		args = append(args, "./cmd/baton")
		cmd := exec.Command("go", args...)
		cmd.Dir = root
		if b, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/baton: %v\n%s", err, b)
			return
		}
		buildPath = out
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildPath
}

// freePort returns a loopback port nobody listens on at the moment.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// childEnv is the test's environment without BATON_* variables, so that
// nothing but the flags the test gives shapes the child.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "BATON_") {
			env = append(env, kv)
		}
	}
	return env
}

// poll calls cond every interval until it returns true or timeout passes.
func poll(ctx context.Context, timeout, interval time.Duration, cond func() bool) bool {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if cond() {
			return true
		}
		select {
		case <-ctx.Done():
			return cond()
		case <-t.C:
		}
	}
}

// batonProcess is `baton serve` running as a child process, which the
// test kills with SIGKILL and starts again on the same data directory.
type batonProcess struct {
	t       testing.TB
	bin     string
	args    []string
	addr    string
	logPath string

	mu       sync.Mutex
	cmd      *exec.Cmd
	exited   chan struct{}
	killing  bool
	unwanted []string // exits the test did not cause
	starts   int
	kills    int
}

func newBatonProcess(t testing.TB, bin, addr, logPath string, args ...string) *batonProcess {
	p := &batonProcess{t: t, bin: bin, addr: addr, logPath: logPath, args: args}
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("last lines of baton's log (%s):\n%s", logPath, tailFile(logPath, 40))
		}
		if dir := os.Getenv("BATON_PROOF_KEEP"); dir != "" {
			// Keep the whole log for a post-mortem.
			dst := filepath.Join(dir, strings.NewReplacer("/", "_").Replace(t.Name())+"-baton.log")
			if b, err := os.ReadFile(logPath); err == nil {
				_ = os.WriteFile(dst, b, 0o644)
				t.Logf("baton's log kept in %s", dst)
			}
		}
	})
	return p
}

func (p *batonProcess) url() string { return "http://" + p.addr }

// start starts the server and returns once it answers /readyz, or fails
// the test after a minute.
func (p *batonProcess) start(ctx context.Context) {
	p.t.Helper()
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		p.t.Fatal(err)
	}
	cmd := exec.Command(p.bin, append([]string{"serve", "--listen", p.addr}, p.args...)...)
	cmd.Env = childEnv()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		p.t.Fatal(err)
	}
	exited := make(chan struct{})
	p.mu.Lock()
	p.cmd, p.exited, p.killing = cmd, exited, false
	p.starts++
	p.mu.Unlock()
	go func() {
		err := cmd.Wait()
		logf.Close()
		p.mu.Lock()
		if !p.killing {
			p.unwanted = append(p.unwanted, fmt.Sprintf("baton exited by itself: %v", err))
		}
		p.mu.Unlock()
		close(exited)
	}()
	if !p.waitReady(ctx, time.Minute) {
		p.t.Fatalf("baton did not become ready within a minute (start %d); log:\n%s", p.starts, tailFile(p.logPath, 40))
	}
}

// waitReady polls /readyz until it answers 200.
func (p *batonProcess) waitReady(ctx context.Context, timeout time.Duration) bool {
	hc := &http.Client{Timeout: 2 * time.Second}
	return poll(ctx, timeout, 50*time.Millisecond, func() bool {
		p.mu.Lock()
		exited := p.exited
		p.mu.Unlock()
		select {
		case <-exited:
			return false
		default:
		}
		resp, err := hc.Get(p.url() + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// kill sends SIGKILL and waits for the process to be gone. Safe when it
// is not running.
func (p *batonProcess) kill() {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	if cmd == nil {
		p.mu.Unlock()
		return
	}
	p.killing = true
	p.cmd = nil
	p.mu.Unlock()
	if err := cmd.Process.Signal(syscall.SIGKILL); err == nil {
		p.mu.Lock()
		p.kills++
		p.mu.Unlock()
	}
	<-exited
}

// problems lists what went wrong with the process beyond the test's
// doing: exits it did not cause, and data races the race detector found.
func (p *batonProcess) problems() []string {
	p.mu.Lock()
	out := append([]string(nil), p.unwanted...)
	p.mu.Unlock()
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return out
	}
	if bytes.Contains(b, []byte("WARNING: DATA RACE")) {
		out = append(out, "the race detector reported a data race in baton (see "+p.logPath+")")
	}
	if bytes.Contains(b, []byte("panic: ")) {
		out = append(out, "baton panicked (see "+p.logPath+")")
	}
	return out
}

// tailFile returns the last n lines of a file.
func tailFile(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// createToken runs `baton token create` on the data directory and returns
// the token it printed.
func createToken(t testing.TB, bin, dataDir string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"token", "create", "--data", dataDir, "--json"}, args...)...)
	cmd.Env = childEnv()
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("baton token create %v: %v\n%s", args, err, ee.Stderr)
		}
		t.Fatal(err)
	}
	var v struct {
		Token string `json:"token"`
	}
	if err := json.Unmarshal(out, &v); err != nil || v.Token == "" {
		t.Fatalf("baton token create printed %q: %v", out, err)
	}
	return v.Token
}

// natsProcess is an external nats-server with JetStream, killed and
// restarted by the test.
type natsProcess struct {
	t       testing.TB
	bin     string
	dir     string
	port    int
	logPath string
	cmd     *exec.Cmd
	kills   int
}

// natsServerBinary finds nats-server, or skips the test — unless CI is
// set, where its absence is a failure.
func natsServerBinary(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("nats-server not found in PATH (CI is set): %v", err)
		}
		t.Skip("nats-server is not installed (apt-get install nats-server)")
	}
	return bin
}

func (n *natsProcess) url() string { return "nats://127.0.0.1:" + strconv.Itoa(n.port) }

func (n *natsProcess) start(ctx context.Context) {
	n.t.Helper()
	logf, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		n.t.Fatal(err)
	}
	defer logf.Close()
	n.cmd = exec.Command(n.bin, "-js", "-sd", n.dir, "-a", "127.0.0.1", "-p", strconv.Itoa(n.port))
	n.cmd.Stdout, n.cmd.Stderr = logf, logf
	if err := n.cmd.Start(); err != nil {
		n.t.Fatal(err)
	}
	ok := poll(ctx, 30*time.Second, 20*time.Millisecond, func() bool {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(n.port), 100*time.Millisecond)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	if !ok {
		n.t.Fatalf("nats-server did not accept connections within 30s:\n%s", tailFile(n.logPath, 20))
	}
}

func (n *natsProcess) kill() {
	if n.cmd != nil && n.cmd.Process != nil {
		if err := n.cmd.Process.Signal(syscall.SIGKILL); err == nil {
			n.kills++
		}
		_ = n.cmd.Wait()
		n.cmd = nil
	}
}

// appFiles writes the simulated App's private key and webhook secret into
// dir, for baton serve's --private-key and --webhook-secret-file.
func appFiles(t testing.TB, sim *ghsim.Sim, dir string) (keyFile, secretFile string) {
	t.Helper()
	keyFile, secretFile = filepath.Join(dir, "app.pem"), filepath.Join(dir, "webhook-secret")
	if err := os.WriteFile(keyFile, sim.PrivateKeyPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(secretFile, []byte(sim.WebhookSecret()), 0o600); err != nil {
		t.Fatal(err)
	}
	return keyFile, secretFile
}

// commentsPosted counts the comments on octo/demo#n that carry
// operation id's marker.
func commentsPosted(t testing.TB, sim *ghsim.Sim, n int, id string) int {
	t.Helper()
	is, err := sim.Issue("octo", "demo", n)
	if err != nil {
		t.Fatal(err)
	}
	posted := 0
	for _, cm := range is.Comments {
		if strings.Contains(cm.Body, executor.CommentMarker(id)) {
			posted++
		}
	}
	return posted
}
