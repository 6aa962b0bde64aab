//go:build linux

package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/baton-dev/baton/app/ghsim"
	"github.com/baton-dev/baton/internal/sqlite"
)

// A database baton cannot write (a copy restored as root into the data
// directory of a baton that runs as its own user) stops the start with a
// message naming the file, instead of a server that says it serves while
// every write fails. The test runs baton as nobody when it runs as root
// (who may write anything), as itself otherwise.
func TestServeRefusesADatabaseItCannotWrite(t *testing.T) {
	bin := cliBuildBaton(t)
	sim, err := ghsim.New(ghsim.Config{Limits: ghsim.Limits{PrimaryLimit: -1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := sim.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer sim.Close()

	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	db, err := sqlite.Open(context.Background(), filepath.Join(data, "baton.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(dir, "app.pem")
	if err := os.WriteFile(key, sim.PrivateKeyPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", "--data", data, "--listen", "127.0.0.1:0",
		"--github-url", sim.URL(), "--app-id", strconv.FormatInt(sim.AppID(), 10), "--private-key", key,
		"--webhook-secret", sim.WebhookSecret())
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	if os.Geteuid() == 0 {
		// The data directory is nobody's, the database root's.
		const nobody = 65534
		for _, p := range []string{filepath.Dir(dir), dir, filepath.Dir(bin)} {
			if err := os.Chmod(p, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chown(data, nobody, nobody); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(data, "baton.db"), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	} else if err := os.Chmod(filepath.Join(data, "baton.db"), 0o444); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil {
			t.Errorf("exit 0, want a failed start; stderr:\n%s", stderr.String())
		}
		if msg := stderr.String(); !strings.Contains(msg, "baton.db: baton cannot write it") {
			t.Errorf("stderr does not say the database cannot be written:\n%s", msg)
		}
	case <-time.After(15 * time.Second):
		cmd.Process.Signal(syscall.SIGTERM)
		<-done
		t.Errorf("baton started on a database it cannot write; stderr:\n%s", stderr.String())
	}
}
