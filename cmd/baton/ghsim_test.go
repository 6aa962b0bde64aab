package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/bradleyfalzon/ghinstallation/v2"
	"github.com/google/go-github/v62/github"
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
