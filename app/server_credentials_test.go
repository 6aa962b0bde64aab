package app

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/baton-dev/baton/app/ghsim"
	"github.com/baton-dev/baton/queue"
)

// Credentials GitHub refuses, or a URL that is not GitHub's API, stop the
// start with a message that says which, before baton serves and reports
// itself ready; it leaves the data directory free. GitHub not answering at
// all does not stop the start: operations wait in the queue for it.
func TestServerStartChecksAppCredentials(t *testing.T) {
	t.Parallel()
	sim := startDemoSim(t, ghsim.Config{Limits: ghsim.Limits{PrimaryLimit: -1}})
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	otherKey := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	// A base URL that sends everything elsewhere (http:// to https://, say).
	redirecting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, sim.URL()+r.URL.Path, http.StatusMovedPermanently)
	}))
	t.Cleanup(redirecting.Close)
	good := Config{GitHubURL: sim.URL(), AppID: sim.AppID(), PrivateKey: sim.PrivateKeyPEM(), WebhookSecret: sim.WebhookSecret()}
	for name, tc := range map[string]struct {
		change func(*Config)
		want   []string
	}{
		"another app's id":     {func(c *Config) { c.AppID = sim.AppID() + 41 }, []string{"refused the credentials", "401"}},
		"another app's key":    {func(c *Config) { c.PrivateKey = otherKey }, []string{"refused the credentials", "401"}},
		"not a github api":     {func(c *Config) { c.GitHubURL = sim.URL() + "/not/github/" }, []string{"GitHub REST API", "404", "--github-url"}},
		"a url that redirects": {func(c *Config) { c.GitHubURL = redirecting.URL }, []string{"redirect", "301", sim.URL(), "--github-url"}},
	} {
		cfg := good
		tc.change(&cfg)
		cfg.DataDir, cfg.Listen = t.TempDir(), "127.0.0.1:0"
		srv, err := NewServer(cfg)
		if err != nil {
			t.Fatal(err)
		}
		err = srv.Start(context.Background())
		if err == nil {
			_ = srv.Stop(context.Background())
			t.Errorf("%s: the server started", name)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not say %q", name, err, w)
			}
		}
		if strings.Contains(err.Error(), "PRIVATE KEY") || strings.Contains(err.Error(), sim.WebhookSecret()) {
			t.Errorf("%s: the error shows a secret: %q", name, err)
		}
		// Everything it opened was closed: the directory serves again.
		again := good
		again.DataDir = cfg.DataDir
		startServer(t, again)
	}

	// GitHub unreachable: the server starts (and says so in its log).
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + l.Addr().String()
	l.Close()
	cfg := good
	cfg.GitHubURL = down
	startServer(t, cfg)
}

// A database file that is not one (overwritten, a wrong restore) stops
// the start with an error naming the file, and leaves it as it was.
func TestServerStartNamesCorruptDatabase(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, DatabaseFile)
	garbage := []byte(strings.Repeat("not a database ", 2000))
	if err := os.WriteFile(db, garbage, 0o600); err != nil {
		t.Fatal(err)
	}
	srv, err := NewServer(Config{DataDir: dir, Listen: "127.0.0.1:0", PublicURL: "https://baton.example.com"})
	if err != nil {
		t.Fatal(err)
	}
	err = srv.Start(context.Background())
	if err == nil {
		_ = srv.Stop(context.Background())
		t.Fatal("the server started on a file that is not a database")
	}
	if !strings.Contains(err.Error(), db) || !strings.Contains(err.Error(), "not a database") {
		t.Errorf("error %q does not name %s as not a database", err, db)
	}
	if b, err := os.ReadFile(db); err != nil || string(b) != string(garbage) {
		t.Errorf("the file was changed: %v", err)
	}
}

// An embedded JetStream store that cannot be loaded (a consumer's state
// file damaged) stops the start with an error naming the store and what
// to do; moved aside, the server starts again on the same database.
func TestServerStartNamesDamagedQueueStore(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := Config{Dev: true, DataDir: dir, Listen: "127.0.0.1:0"}
	first, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := first.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	state, err := filepath.Glob(filepath.Join(queue.StoreDir(dir), "jetstream", "*", "streams", queue.StreamOperations, "obs", "*", "o.dat"))
	if err != nil || len(state) != 1 {
		t.Fatalf("consumer state files: %v %v", state, err)
	}
	if err := os.WriteFile(state[0], []byte(strings.Repeat("\xff damaged ", 30)), 0o600); err != nil {
		t.Fatal(err)
	}
	second, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = second.Start(context.Background())
	if err == nil {
		_ = second.Stop(context.Background())
		t.Fatal("the server started on a damaged queue store")
	}
	if !strings.Contains(err.Error(), queue.StoreDir(dir)) || !strings.Contains(err.Error(), "move it aside") {
		t.Errorf("error %q does not say what to do", err)
	}
	if err := os.Rename(queue.StoreDir(dir), queue.StoreDir(dir)+".damaged"); err != nil {
		t.Fatal(err)
	}
	startServer(t, cfg)
}
