package app

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/app/ghsim"
)

// --dev and GitHub never share a data directory: --dev on a server's
// directory would carry out its queued operations on the simulator,
// recording them succeeded, never to run on GitHub; a server on a --dev
// directory would honour the admin token --dev printed. Each is refused
// before anything opens, and the refused start changes nothing.
func TestServerDevAndGitHubDataDirectoriesApart(t *testing.T) {
	t.Parallel()
	sim := startDemoSim(t, ghsim.Config{Limits: ghsim.Limits{PrimaryLimit: -1}})
	gh := Config{GitHubURL: sim.URL(), AppID: sim.AppID(), PrivateKey: sim.PrivateKeyPEM(),
		WebhookSecret: sim.WebhookSecret(), Listen: "127.0.0.1:0"}
	run := func(cfg Config) error { return startAndStop(t, cfg) }

	serverDir := t.TempDir()
	cfg := gh
	cfg.DataDir = serverDir
	if err := run(cfg); err != nil {
		t.Fatal(err)
	}
	err := run(Config{Dev: true, DataDir: serverDir, Listen: "127.0.0.1:0"})
	if err == nil || !strings.Contains(err.Error(), "holds a database that --dev did not make") {
		t.Errorf("--dev on a server's data directory: %v", err)
	}
	if _, err := os.Stat(filepath.Join(serverDir, DevFile)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the refused --dev left %s: %v", DevFile, err)
	}
	if err := run(cfg); err != nil {
		t.Errorf("the server again after a refused --dev: %v", err)
	}

	devDir := t.TempDir()
	if err := run(Config{Dev: true, DataDir: devDir, Listen: "127.0.0.1:0"}); err != nil {
		t.Fatal(err)
	}
	cfg.DataDir = devDir
	if err := run(cfg); err == nil || !strings.Contains(err.Error(), "is one of --dev") {
		t.Errorf("a server on a --dev data directory: %v", err)
	}
	if err := run(Config{Dev: true, DataDir: devDir, Listen: "127.0.0.1:0"}); err != nil {
		t.Errorf("--dev again on its own directory: %v", err)
	}
}

// A --dev directory whose database was removed (to start afresh) still
// has dev.json: a server for GitHub is refused it at once, not accepted
// on its first start (making a database beside dev.json) and refused at
// its next.
func TestServerRefusesADevDirectoryWithoutItsDatabase(t *testing.T) {
	t.Parallel()
	sim := startDemoSim(t, ghsim.Config{Limits: ghsim.Limits{PrimaryLimit: -1}})
	dir := t.TempDir()
	dev := Config{Dev: true, DataDir: dir, Listen: "127.0.0.1:0"}
	gh := Config{GitHubURL: sim.URL(), AppID: sim.AppID(), PrivateKey: sim.PrivateKeyPEM(),
		WebhookSecret: sim.WebhookSecret(), Listen: "127.0.0.1:0", DataDir: dir}
	run := func(cfg Config) error { return startAndStop(t, cfg) }
	if err := run(dev); err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(dir, DatabaseFile+"*"))
	if err != nil || len(files) == 0 {
		t.Fatalf("database files: %v %v", files, err)
	}
	for _, f := range files {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 2 {
		if err := run(gh); err == nil || !strings.Contains(err.Error(), "is one of --dev") {
			t.Errorf("start %d of a server on a --dev directory without its database: %v", i+1, err)
		}
	}
	if err := run(dev); err != nil {
		t.Errorf("--dev again on its directory: %v", err)
	}
}

// Each --dev start prints a new admin token and revokes the one the start
// before printed (the one in dev.json), so that restarts do not pile up
// admin tokens that stay valid. Other tokens of the directory stay.
func TestDevStartRevokesTheEarlierDevToken(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	start := func() *Server {
		srv, err := startOn(t, Config{Dev: true, DataDir: dir, Listen: "127.0.0.1:0"})
		if err != nil {
			t.Fatal(err)
		}
		return srv
	}
	srv := start()
	first := srv.Dev().Token
	other, _, err := srv.tokens.CreateToken(ctx, TokenSpec{Actor: "dev", Admin: true})
	if err != nil {
		t.Fatal(err)
	}
	stopServer(t, srv)

	srv = start()
	defer stopServer(t, srv)
	second := srv.Dev().Token
	if second == "" || second == first || readDevToken(filepath.Join(dir, DevFile)) != second {
		t.Fatalf("second start's token %q, dev.json's %q, first %q", second, readDevToken(filepath.Join(dir, DevFile)), first)
	}
	if _, err := srv.tokens.Authenticate(ctx, first); err == nil {
		t.Error("the first start's dev token is still valid after the second start")
	}
	for name, tok := range map[string]string{"the second start's": second, "one made by hand": other} {
		if _, err := srv.tokens.Authenticate(ctx, tok); err != nil {
			t.Errorf("%s token refused: %v", name, err)
		}
	}
	tokens, err := srv.tokens.ListTokens(ctx)
	if err != nil {
		t.Fatal(err)
	}
	valid := 0
	for _, tk := range tokens {
		if !tk.Revoked() {
			valid++
		}
	}
	if valid != 2 {
		t.Errorf("%d valid tokens, want 2", valid)
	}
}

// startOn starts a server on cfg; the error is the start's.
func startOn(t *testing.T, cfg Config) (*Server, error) {
	t.Helper()
	srv, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return srv, srv.Start(context.Background())
}

// stopServer stops a started server, within 20 s.
func stopServer(t *testing.T, srv *Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := srv.Stop(ctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
}

// startAndStop starts a server on cfg and stops it again: the error is
// the start's.
func startAndStop(t *testing.T, cfg Config) error {
	t.Helper()
	srv, err := startOn(t, cfg)
	if err != nil {
		return err
	}
	stopServer(t, srv)
	return nil
}
