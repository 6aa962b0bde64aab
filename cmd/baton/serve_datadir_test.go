//go:build linux

package main

import (
	"bytes"
	"context"
	"io/fs"
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

// A database or a JetStream store baton cannot write (a copy restored as
// root into the data directory of a baton that runs as its own user) stops
// the start with a message naming what it cannot write, instead of a
// server that says it serves while every write fails, or a store said to
// be "not a directory". The test runs baton as nobody when it runs as
// root (who may write anything), as itself otherwise.
func TestServeRefusesADataDirectoryItCannotWrite(t *testing.T) {
	bin := cliBuildBaton(t)
	sim, err := ghsim.New(ghsim.Config{Limits: ghsim.Limits{PrimaryLimit: -1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := sim.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	root := os.Geteuid() == 0
	const nobody = 65534
	for _, tc := range []struct {
		name, notMine, want string
	}{
		{"database", "baton.db", "baton.db: baton cannot write it"},
		{"jetstream", "nats", "the embedded JetStream store " + "DATA/nats cannot be written"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			data := filepath.Join(dir, "data")
			db, err := sqlite.Open(context.Background(), filepath.Join(data, "baton.db"), sqlite.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(filepath.Join(data, "nats", "jetstream"), 0o700); err != nil {
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
			notMine := filepath.Join(data, tc.notMine)
			if root {
				// The data directory is nobody's, but for what is root's.
				for _, p := range []string{filepath.Dir(dir), dir, filepath.Dir(bin)} {
					if err := os.Chmod(p, 0o755); err != nil {
						t.Fatal(err)
					}
				}
				err := filepath.WalkDir(data, func(p string, d fs.DirEntry, err error) error {
					if err != nil || p == notMine || strings.HasPrefix(p, notMine+string(filepath.Separator)) {
						return err
					}
					return os.Chown(p, nobody, nobody)
				})
				if err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(filepath.Join(data, "baton.db"), 0o644); err != nil {
					t.Fatal(err)
				}
				cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
			} else if err := os.Chmod(notMine, 0o500); err != nil {
				t.Fatal(err)
			} else {
				defer os.Chmod(notMine, 0o700)
			}
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			want := strings.ReplaceAll(tc.want, "DATA", data)
			select {
			case err := <-done:
				if err == nil {
					t.Errorf("exit 0, want a failed start; stderr:\n%s", stderr.String())
				}
				if msg := stderr.String(); !strings.Contains(msg, want) {
					t.Errorf("stderr does not say %q:\n%s", want, msg)
				}
			case <-time.After(15 * time.Second):
				cmd.Process.Signal(syscall.SIGTERM)
				<-done
				t.Errorf("baton started on what it cannot write; stderr:\n%s", stderr.String())
			}
		})
	}
}
