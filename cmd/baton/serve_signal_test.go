package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/baton-dev/baton/app"
)

// A second SIGTERM while baton stops, waiting for a call to GitHub in
// flight, cuts the stop short as --shutdown-timeout would: exit 0 at once,
// the operation released and sent back, so that it runs as soon as baton
// starts again, not once its lease and its message have expired.
func TestServeSecondSignalCutsTheStopShort(t *testing.T) {
	// The test binary outlives what baton does with a second signal.
	keep := make(chan os.Signal, 4)
	signal.Notify(keep, syscall.SIGTERM)
	defer signal.Stop(keep)
	data := filepath.Join(t.TempDir(), "data")
	args := []string{"serve", "--dev", "--data", data, "--listen", "127.0.0.1:0", "--shutdown-timeout", "2m", "--log-level", "error"}
	code := make(chan int, 1)
	go func() { code <- run(args) }()
	dev := waitDevInfo(t, data, "")

	do := func(method, url, token, body string) (int, []byte) {
		t.Helper()
		req, err := http.NewRequest(method, url, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	if st, b := do("POST", dev.GitHub+"/_ghsim/faults", "",
		`{"route":"POST /repos/{owner}/{repo}/issues/{number}/comments","kind":"latency","latencyMs":120000,"count":1}`); st != http.StatusCreated && st != http.StatusOK {
		t.Fatalf("fault: %d %s", st, b)
	}
	st, b := do("POST", dev.Server+"/v1/operations", dev.Token,
		`{"idempotencyKey":"k","action":"github.issues.comment","resource":{"type":"issue","id":"octo/demo#10"},"payload":{"body":"hi"}}`)
	var op struct {
		OperationID string `json:"operationId"`
		Status      string `json:"status"`
	}
	if err := json.Unmarshal(b, &op); err != nil || st != http.StatusCreated {
		t.Fatalf("submit: %d %s", st, b)
	}
	// The call is in flight once the fault has fired (and left the list).
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		_, b := do("GET", dev.GitHub+"/_ghsim/faults", "", "")
		if strings.TrimSpace(string(b)) == "[]" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the comment was not posted: %s", b)
		}
	}
	self, err := os.FindProcess(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if err := self.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// The stop has begun once the API no longer listens.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		resp, err := http.Get(dev.Server + "/healthz")
		if err != nil {
			break
		}
		resp.Body.Close()
		if time.Now().After(deadline) {
			t.Fatal("the API still answers after SIGTERM")
		}
	}
	select {
	case c := <-code:
		t.Fatalf("exit %d before the call in flight finished", c)
	case <-time.After(200 * time.Millisecond):
	}
	if err := self.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-code:
		if c != 0 {
			t.Errorf("exit %d after a second SIGTERM, want 0", c)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a second SIGTERM did not cut the stop short")
	}

	// Started again, baton runs the operation at once: its lease was
	// released and its message given back.
	go func() { code <- run(args) }()
	dev = waitDevInfo(t, data, dev.Token)
	st, b = do("GET", dev.Server+"/v1/operations/"+op.OperationID+"?wait=20s", dev.Token, "")
	if err := json.Unmarshal(b, &op); err != nil || st != http.StatusOK || op.Status != "succeeded" {
		t.Errorf("after the restart: %d %s, want succeeded", st, b)
	}
	if err := self.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-code:
		if c != 0 {
			t.Errorf("exit %d", c)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop")
	}
}

// waitDevInfo waits for the dev.json a `serve --dev` on data writes, with
// a token other than old.
func waitDevInfo(t *testing.T, data, old string) app.DevInfo {
	t.Helper()
	var dev app.DevInfo
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		b, err := os.ReadFile(filepath.Join(data, app.DevFile))
		if err == nil && json.Unmarshal(b, &dev) == nil && dev.Token != "" && dev.Token != old {
			return dev
		}
		if time.Now().After(deadline) {
			t.Fatal("serve --dev did not write dev.json")
		}
	}
}

// Once --shutdown-timeout has passed, what is left of the stop (each
// part's close, bounded) can still take seconds when the store does not
// answer; a signal then must still count: the next one ends baton at
// once, as --help promises, rather than being swallowed until the stop
// is over.
func TestServeSignalsAfterTheDeadlineEndBaton(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	args, _ := json.Marshal([]string{"serve", "--dev", "--data", data, "--listen", "127.0.0.1:0",
		"--shutdown-timeout", "1s", "--log-level", "error"})
	child := exec.Command(os.Args[0], "-test.run=^TestGhsimServeChild$", "-test.count=1")
	child.Env = append(os.Environ(), serveChildArgs+"="+string(args))
	var stderr syncBuffer
	child.Stderr = &stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- child.Wait() }()
	defer func() {
		_ = child.Process.Kill()
		<-exited
	}()
	dev := waitDevInfo(t, data, "")

	post := func(url, token, body string) []byte {
		t.Helper()
		req, err := http.NewRequest("POST", url, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode >= 300 {
			t.Fatalf("POST %s: %d %s", url, resp.StatusCode, b)
		}
		return b
	}
	post(dev.GitHub+"/_ghsim/faults", "",
		`{"route":"POST /repos/{owner}/{repo}/issues/{number}/comments","kind":"latency","latencyMs":120000,"count":1}`)
	post(dev.Server+"/v1/operations", dev.Token,
		`{"idempotencyKey":"k","action":"github.issues.comment","resource":{"type":"issue","id":"octo/demo#10"},"payload":{"body":"hi"}}`)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		resp, err := http.Get(dev.GitHub + "/_ghsim/faults")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.TrimSpace(string(b)) == "[]" {
			break // the call is in flight
		}
		if time.Now().After(deadline) {
			t.Fatalf("the comment was not posted: %s", b)
		}
	}

	// The store stops answering: the operation cut short at the deadline
	// cannot be released, and the stop's last parts wait on the store.
	db, err := sql.Open("sqlite", "file:"+filepath.Join(data, app.DatabaseFile)+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(context.Background(), "BEGIN EXCLUSIVE"); err != nil {
		t.Fatal(err)
	}
	defer conn.ExecContext(context.Background(), "ROLLBACK") //nolint:errcheck

	if err := child.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		exited <- err
		t.Skipf("the stop ended within its deadline (%v): nothing left to interrupt", err)
	case <-time.After(2500 * time.Millisecond): // past the 1s deadline and the workers' grace
	}
	for range 2 {
		if err := child.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	select {
	case err := <-exited:
		exited <- err
	case <-time.After(3 * time.Second):
		t.Fatalf("baton still runs 3s after a third SIGTERM (the deadline had passed)\n%s", stderr.String())
	}
}
