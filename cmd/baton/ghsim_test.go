package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bradleyfalzon/ghinstallation/v2"
	"github.com/google/go-github/v62/github"

	"github.com/baton-dev/baton/app/client"
)

// syncBuffer is a bytes.Buffer safe for the command's writes and the
// test's reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startGhsim runs `baton ghsim --listen 127.0.0.1:0 --dir dir` until the
// test ends and returns its ghsim.json.
func startGhsim(t *testing.T, dir string, args ...string) (ghsimFile, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := newGhsimCmd()
	out := &syncBuffer{}
	cmd.SetOut(out)
	cmd.SetArgs(append([]string{"--listen", "127.0.0.1:0", "--dir", dir}, args...))
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	stop := func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("baton ghsim: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("baton ghsim did not stop")
		}
	}
	path := filepath.Join(dir, ghsimFileName)
	deadline := time.Now().Add(20 * time.Second)
	for {
		var f ghsimFile
		if b, err := os.ReadFile(path); err == nil && json.Unmarshal(b, &f) == nil && f.URL != "" && bytes.Contains([]byte(out.String()), []byte(f.URL)) {
			return f, stop
		}
		select {
		case err := <-done:
			cancel()
			t.Fatalf("baton ghsim exited: %v\n%s", err, out.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			stop()
			t.Fatalf("no %s after 20s; output:\n%s", path, out.String())
		}
	}
}

func TestGhsimCommand(t *testing.T) {
	dir := t.TempDir()
	info, stop := startGhsim(t, dir, "--secondary-limit", "2", "--secondary-retry-after", "on")
	if info.AppID != 1 || info.WebhookSecret == "" || info.InstallationID != 1 || info.Repository != "octo/demo" {
		t.Fatalf("ghsim.json = %+v", info)
	}
	st, err := os.Stat(info.PrivateKeyFile)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, %v", st, err)
	}
	pemBytes, _ := os.ReadFile(info.PrivateKeyFile)

	// Authenticate as the App from ghsim.json alone: real JWT, real token.
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	itr, err := ghinstallation.New(tr, info.AppID, info.InstallationID, pemBytes)
	if err != nil {
		t.Fatal(err)
	}
	itr.BaseURL = info.URL
	gh, err := github.NewClient(&http.Client{Transport: itr}).WithEnterpriseURLs(info.URL, info.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	pr, _, err := gh.PullRequests.Get(ctx, "octo", "demo", 1)
	if err != nil || pr.GetState() != "open" {
		t.Fatalf("pull request 1 = %v, %v", pr, err)
	}
	for i := range 2 {
		if _, _, err := gh.Issues.CreateComment(ctx, "octo", "demo", 10, &github.IssueComment{Body: github.String("hi")}); err != nil {
			t.Fatalf("comment %d: %v", i, err)
		}
	}
	_, resp, err := gh.Issues.CreateComment(ctx, "octo", "demo", 10, &github.IssueComment{Body: github.String("one too many")})
	if resp == nil || resp.StatusCode != http.StatusForbidden || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("third comment with --secondary-limit 2: %v", err)
	}
	tr.CloseIdleConnections()
	stop()

	// A restart on the same directory keeps the key and the secret.
	info2, stop2 := startGhsim(t, dir)
	defer stop2()
	pem2, _ := os.ReadFile(info2.PrivateKeyFile)
	if !bytes.Equal(pemBytes, pem2) || info2.WebhookSecret != info.WebhookSecret {
		t.Error("restart changed the App's key or webhook secret")
	}
}

func TestGhsimCommandRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--listen", "0.0.0.0:0"},
		{"--secondary-retry-after", "sometimes"},
		{"--rate-limit-status", "500"},
	} {
		cmd := newGhsimCmd()
		cmd.SetOut(&bytes.Buffer{})
		cmd.SetErr(&bytes.Buffer{})
		cmd.SetArgs(append([]string{"--dir", t.TempDir()}, args...))
		if err := cmd.ExecuteContext(context.Background()); err == nil {
			t.Errorf("baton ghsim %v succeeded", args)
		}
	}
}

func TestGhsimCommandRejectsZeroRateLimit(t *testing.T) {
	cmd := newGhsimCmd()
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetErr(&bytes.Buffer{})
	dir := t.TempDir()
	cmd.SetArgs([]string{"--dir", dir, "--rate-limit", "0"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // a simulator that started runs until then
	defer cancel()
	err := cmd.ExecuteContext(ctx)
	if err == nil || !strings.Contains(err.Error(), "--rate-limit 0") {
		t.Errorf("baton ghsim --rate-limit 0 = %v, want an error naming the flag", err)
	}
	if _, err := os.Stat(filepath.Join(dir, ghsimFileName)); err == nil {
		t.Error("ghsim.json written though the flags were refused")
	}
}

// `baton ghsim --help` says what it does, with examples, and that
// --rate-limit 0 is refused.
func TestGhsimHelp(t *testing.T) {
	cmd := newGhsimCmd()
	if cmd.Example == "" {
		t.Fatal("baton ghsim has no examples")
	}
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--help"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Examples:", "baton ghsim --dir", "baton serve", "--github-url", "0 is refused"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("baton ghsim --help does not say %q:\n%s", want, out.String())
		}
	}
}

// serveChildArgs, when set, makes TestGhsimServeChild run `baton` with
// these arguments (JSON) in a child process of the test binary, so that the
// test can stop it with SIGTERM as an operator would.
const serveChildArgs = "BATON_TEST_SERVE_CHILD_ARGS"

func TestGhsimServeChild(t *testing.T) {
	raw := os.Getenv(serveChildArgs)
	if raw == "" {
		t.Skip("runs only as the child process of TestServeAgainstGhsim")
	}
	var args []string
	if err := json.Unmarshal([]byte(raw), &args); err != nil {
		t.Fatal(err)
	}
	os.Exit(run(args))
}

// `baton serve`, given what `baton ghsim` wrote to DIR/ghsim.json,
// authenticates as the simulated App and learns its installation: the
// development loop the README describes, end to end.
func TestServeAgainstGhsim(t *testing.T) {
	ghDir := t.TempDir()
	info, stop := startGhsim(t, ghDir)
	defer stop()

	data := t.TempDir()
	secretFile := filepath.Join(t.TempDir(), "webhook-secret")
	if err := os.WriteFile(secretFile, []byte(info.WebhookSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args, _ := json.Marshal([]string{"serve", "--data", data, "--listen", "127.0.0.1:0",
		"--github-url", info.URL, "--app-id", strconv.FormatInt(info.AppID, 10),
		"--private-key", info.PrivateKeyFile, "--webhook-secret-file", secretFile,
		"--log-level", "warn", "--shutdown-timeout", "10s"})
	child := exec.Command(os.Args[0], "-test.run=^TestGhsimServeChild$", "-test.count=1")
	child.Env = append(os.Environ(), serveChildArgs+"="+string(args))
	var stdout, stderr syncBuffer
	child.Stdout, child.Stderr = &stdout, &stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- child.Wait() }()
	defer func() {
		_ = child.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("baton serve exited: %v\n%s", err, stderr.String())
			}
		case <-time.After(30 * time.Second):
			_ = child.Process.Kill()
			t.Error("baton serve did not stop within 30s of SIGTERM")
		}
	}()

	serving := regexp.MustCompile(`baton is serving on (http://\S+)`)
	var url string
	deadline := time.Now().Add(60 * time.Second)
	for url == "" {
		if m := serving.FindStringSubmatch(stdout.String()); m != nil {
			url = m[1]
			break
		}
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("baton serve exited: %v\nstdout: %s\nstderr: %s", err, stdout.String(), stderr.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("baton serve not serving after 60s\nstdout: %s\nstderr: %s", stdout.String(), stderr.String())
		}
	}

	r := cliRun(t, "", "token", "create", "--actor", "ops", "--admin", "--data", data)
	if r.code != 0 {
		t.Fatalf("token create: %+v", r)
	}
	c, err := client.New(url, client.WithToken(strings.TrimSpace(r.stdout)))
	if err != nil {
		t.Fatal(err)
	}
	var last []client.Installation
	deadline = time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		list, err := c.Installations(ctx)
		cancel()
		if err == nil {
			last = list
			for _, in := range list {
				if in.ID == info.InstallationID && in.Account == "octo" && slices.Contains(in.Repositories, info.Repository) && !in.Suspended {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("baton serve does not know installation %d with %s after 60s: %+v, %v\nstderr: %s",
				info.InstallationID, info.Repository, last, err, stderr.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Bad usage of ghsim exits 2, as every command's does, and touches no DIR.
func TestGhsimUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"extra-argument"},
		{"--no-such-flag"},
		{"--rate-limit", "0"},
		{"--rate-limit-status", "500"},
		{"--secondary-retry-after", "sometimes"},
		{"--token-ttl", "-1s"},
		{"--token-ttl", "0"},
		{"--secondary-limit", "-3"},
		{"--secondary-limit", "10", "--secondary-window", "0"},
		{"--app-id", "0"},
		{"--app-id", "-3"},
		{"--listen", "0.0.0.0:0"},
		{"--listen", "nowhere"},
	} {
		dir := filepath.Join(t.TempDir(), "ghsim")
		args := append([]string{"ghsim", "--listen", "127.0.0.1:0", "--dir", dir}, args...)
		if code := run(args); code != 2 {
			t.Errorf("baton %s: exit %d, want 2", strings.Join(args, " "), code)
		}
		if _, err := os.Stat(dir); err == nil {
			t.Errorf("baton %s created DIR", strings.Join(args, " "))
		}
	}
}
