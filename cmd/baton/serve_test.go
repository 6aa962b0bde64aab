package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/baton-dev/baton/app/ghsim"
)

// Every serve flag reads BATON_<FLAG>, and deploy/ENVIRONMENT.md lists
// every one of those variables.
func TestServeEnvironmentReference(t *testing.T) {
	ref, err := os.ReadFile(filepath.Join("..", "..", "deploy", "ENVIRONMENT.md"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := newServeCmd()
	n := 0
	for _, name := range flagNames(cmd) {
		if name == "help" {
			continue
		}
		n++
		env := "BATON_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
		if !strings.Contains(string(ref), "`"+env+"`") {
			t.Errorf("deploy/ENVIRONMENT.md does not list %s (--%s)", env, name)
		}
	}
	if n < 20 {
		t.Fatalf("only %d flags found", n)
	}
}

func TestServeEnvironmentSetsFlags(t *testing.T) {
	t.Setenv("BATON_LISTEN", "127.0.0.1:9999")
	t.Setenv("BATON_WORKERS", "7")
	t.Setenv("BATON_GITHUB_PACING", "off")
	cmd := newServeCmd()
	if err := cmd.Flags().Parse([]string{"--workers", "9"}); err != nil {
		t.Fatal(err)
	}
	if err := envFlags(cmd.Flags()); err != nil {
		t.Fatal(err)
	}
	if v, _ := cmd.Flags().GetString("listen"); v != "127.0.0.1:9999" {
		t.Errorf("listen = %s", v)
	}
	if v, _ := cmd.Flags().GetInt("workers"); v != 9 {
		t.Errorf("workers = %d: the command line must win over the environment", v)
	}
	t.Setenv("BATON_WORKERS", "many")
	cmd = newServeCmd()
	if err := envFlags(cmd.Flags()); err == nil || !strings.Contains(err.Error(), "BATON_WORKERS") {
		t.Errorf("a bad variable: %v", err)
	}
}

func TestServeUsageErrors(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"serve", "--github-pacing", "sometimes", "--data", dir},
		{"serve", "--nats-sync", "never", "--data", dir},
		{"serve", "--app-id", "5", "--data", dir},
		{"serve", "--log-level", "loud", "--data", dir},
		{"serve", "--dev", "--app-id", "5", "--private-key", "/dev/null", "--webhook-secret", "x", "--data", dir},
		{"serve", "--ack-wait", "5s", "--lease-ttl", "10s", "--data", dir},
		{"serve", "extra-argument"},
		{"serve", "--merge-queue-method", "octopus", "--data", dir},
		{"serve", "--merge-queue-checks", "ci,,lint", "--data", dir},
		{"serve", "--merge-queue-checks", "ci,baton/queue", "--data", dir},
		{"serve", "--merge-queue-label", strings.Repeat("l", 51), "--data", dir},
		{"serve", "--merge-queue-label", " ", "--data", dir},
		{"serve", "--operation-retention", "24h", "--data", dir},
		{"serve", "--operation-retention", "-72h", "--data", dir},
	} {
		if code := run(args); code != 2 {
			t.Errorf("baton %s: exit %d, want 2", strings.Join(args, " "), code)
		}
	}
}

// The merge queue's flags (or their variables) reach the server's Config.
func TestServeMergeQueueFlags(t *testing.T) {
	t.Setenv("BATON_MERGE_QUEUE_CHECKS", " ci , lint,ci")
	t.Setenv("BATON_MERGE_QUEUE_METHOD", "squash")
	t.Setenv("BATON_MERGE_QUEUE_LABEL", "from-the-environment")
	o := &serveOptions{}
	cmd := serveCmd(o)
	if err := cmd.Flags().Parse([]string{"--merge-queue-label", "ship-it"}); err != nil {
		t.Fatal(err)
	}
	if err := envFlags(cmd.Flags()); err != nil {
		t.Fatal(err)
	}
	cfg, err := o.config()
	if err != nil {
		t.Fatal(err)
	}
	mq := cfg.MergeQueue
	if mq.Label != "ship-it" || mq.MergeMethod != "squash" || !slices.Equal(mq.RequiredChecks, []string{"ci", "lint"}) {
		t.Errorf("merge queue settings: %+v", mq)
	}
	// The defaults: the queue's label and method, the branch's checks.
	o = &serveOptions{}
	cmd = serveCmd(o)
	if err := cmd.Flags().Parse(nil); err != nil {
		t.Fatal(err)
	}
	if cfg, err = o.config(); err != nil {
		t.Fatal(err)
	}
	if mq := cfg.MergeQueue; mq.Label != "baton:queue" || mq.MergeMethod != "merge" || mq.RequiredChecks != nil {
		t.Errorf("default merge queue settings: %+v", mq)
	}
	o = &serveOptions{}
	cmd = serveCmd(o)
	if err := cmd.Flags().Parse([]string{"--merge-queue-method", "fast-forward"}); err != nil {
		t.Fatal(err)
	}
	if _, err := o.config(); err == nil || !strings.Contains(err.Error(), "--merge-queue-method must be merge, squash or rebase") {
		t.Errorf("a bad method: %v", err)
	}
}

// --operation-retention reaches the server's Config; 0 keeps records
// forever.
func TestServeRetentionFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want time.Duration
	}{
		{nil, 30 * 24 * time.Hour},
		{[]string{"--operation-retention", "96h"}, 96 * time.Hour},
		{[]string{"--operation-retention", "0"}, -1},
	} {
		o := &serveOptions{}
		if err := serveCmd(o).Flags().Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		cfg, err := o.config()
		if err != nil || cfg.OperationRetention != tc.want {
			t.Errorf("%v: retention %v, %v; want %v", tc.args, cfg.OperationRetention, err, tc.want)
		}
	}
}

// parseServeFlags parses args as serve's flags, then sets each flag not
// given from its BATON_ variable.
func parseServeFlags(t *testing.T, args []string) (*serveOptions, *cobra.Command) {
	t.Helper()
	o := &serveOptions{}
	cmd := serveCmd(o)
	if err := cmd.Flags().Parse(args); err != nil {
		t.Fatal(err)
	}
	if err := envFlags(cmd.Flags()); err != nil {
		t.Fatal(err)
	}
	return o, cmd
}

func flagNames(cmd *cobra.Command) []string {
	var out []string
	cmd.Flags().VisitAll(func(f *pflag.Flag) { out = append(out, f.Name) })
	return out
}

func TestRootUsage(t *testing.T) {
	if code := run([]string{"no-such-command"}); code != 2 {
		t.Errorf("unknown command: exit %d, want 2", code)
	}
	if code := run([]string{"--no-such-flag"}); code != 2 {
		t.Errorf("unknown flag: exit %d, want 2", code)
	}
}

// Out-of-range numbers and durations are refused before anything starts,
// as usage errors, rather than read as app.Config's "default" (0) or
// refused by the executor at start (exit 1).
func TestServeFlagBounds(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--workers", "0"}, "--workers must be between 1 and 4096"},
		{[]string{"--workers", "4097"}, "--workers must be between 1 and 4096"},
		{[]string{"--nats-replicas", "0"}, "--nats-replicas must be between 1 and 5"},
		{[]string{"--nats-replicas", "6"}, "--nats-replicas must be between 1 and 5"},
		{[]string{"--lease-ttl", "2s"}, "--lease-ttl must be between 3s and 5m"},
		{[]string{"--lease-ttl", "0"}, "--lease-ttl must be between 3s and 5m"},
		{[]string{"--lease-ttl", "6m", "--ack-wait", "10m"}, "--lease-ttl must be between 3s and 5m"},
		{[]string{"--ack-wait", "0"}, "--ack-wait (0s) must exceed --lease-ttl"},
		{[]string{"--shutdown-timeout", "-1s"}, "--shutdown-timeout must be positive"},
		{[]string{"--shutdown-timeout", "0"}, "--shutdown-timeout must be positive"},
		{[]string{"--reconcile-interval", "0"}, "must be positive"},
		{[]string{"--reconcile-min-age", "-1s"}, "must be positive"},
		{[]string{"--github-url", "::bad"}, `--github-url must be an absolute http(s) URL without query, not "::bad"`},
		{[]string{"--github-url", "api.github.com"}, "--github-url must be an absolute http(s) URL"},
		{[]string{"--github-web-url", "ftp://github.example.com"}, "--github-web-url must be an absolute http(s) URL"},
		{[]string{"--public-url", "https://baton.example.com/?x=1"}, "--public-url must be an absolute http(s) URL without query"},
		{[]string{"--sqlite-synchronous", "OFF"}, `--sqlite-synchronous must be FULL, EXTRA or NORMAL, not "OFF"`},
		{[]string{"--merge-queue-checks", "ci,baton/queue"}, "--merge-queue-checks must not name baton/queue"},
	} {
		o := &serveOptions{}
		if err := serveCmd(o).Flags().Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		if _, err := o.config(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
	for _, args := range [][]string{
		{"--lease-ttl", "2s"},
		{"--lease-ttl", "5m1s", "--ack-wait", "10m"},
		{"--github-url", "::bad"},
		{"--sqlite-synchronous", "OFF"},
	} {
		args = append([]string{"serve", "--data", t.TempDir(), "--listen", "127.0.0.1:0"}, args...)
		if code := run(args); code != 2 {
			t.Errorf("baton %s: exit %d, want 2", strings.Join(args, " "), code)
		}
	}
	// The bounds themselves are accepted.
	o := &serveOptions{}
	if err := serveCmd(o).Flags().Parse([]string{"--workers", "1", "--lease-ttl", "3s", "--ack-wait", "4s", "--nats-replicas", "5",
		"--nats", "nats://10.0.0.5:4222", "--sqlite-synchronous", "normal", "--github-url", "https://ghes.example.com/api/v3/", "--public-url", "https://baton.example.com"}); err != nil {
		t.Fatal(err)
	}
	if _, err := o.config(); err != nil {
		t.Errorf("the bounds: %v", err)
	}
}

// The queue's flags that do not go together (an embedded server's with
// --nats, an external server's without it, --nats-listen on every
// interface) are a bad value like any other: exit 2 before anything opens,
// naming the flags, and the variable a value came from, as
// deploy/ENVIRONMENT.md says; not exit 1 from the queue halfway through the
// start, naming its Go settings (Replicas, ListenAddr).
func TestServeQueueFlagsDisagree(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(keyFile, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		env  [2]string
		want string
	}{
		{[]string{"--nats-replicas", "3"}, [2]string{}, "--nats-replicas 3 needs an external cluster (--nats)"},
		{nil, [2]string{"BATON_NATS_REPLICAS", "3"}, "--nats-replicas from BATON_NATS_REPLICAS"},
		{[]string{"--nats-listen", "0.0.0.0:4222"}, [2]string{}, "--nats-listen \"0.0.0.0:4222\" listens on every interface"},
		{nil, [2]string{"BATON_NATS_LISTEN", ":4222"}, "--nats-listen from BATON_NATS_LISTEN"},
		{[]string{"--nats-listen", "4222"}, [2]string{}, "--nats-listen must be HOST:PORT"},
		{[]string{"--dev", "--nats-listen", "10.0.0.5:4222"}, [2]string{}, "with --dev, nothing listens beyond the loopback interface"},
		{[]string{"--dev", "--nats", "nats://10.0.0.5:4222"}, [2]string{}, "with --dev, baton talks to nothing beyond the loopback interface"},
		{[]string{"--dev"}, [2]string{"BATON_NATS", "nats://127.0.0.1:4222,nats.example.com:4222"}, "--nats from BATON_NATS"},
		{[]string{"--nats-listen", "127.0.0.1:4222", "--nats", "nats://10.0.0.5:4222"}, [2]string{}, "--nats-listen applies to the embedded server"},
		{[]string{"--nats-sync", "always", "--nats", "nats://10.0.0.5:4222"}, [2]string{}, "--nats-sync always applies to the embedded server"},
		{[]string{"--nats-creds", keyFile}, [2]string{}, "--nats-creds applies to an external server (--nats)"},
		{[]string{"--nats-tls-ca", keyFile}, [2]string{}, "--nats-tls-ca applies to an external server (--nats)"},
		{[]string{"--nats", "nats://10.0.0.5:4222", "--nats-creds", keyFile, "--nats-nkey", keyFile}, [2]string{}, "--nats-creds and --nats-nkey are exclusive"},
		{[]string{"--nats", "nats://10.0.0.5:4222", "--nats-tls-key", keyFile}, [2]string{}, "--nats-tls-cert and --nats-tls-key go together"},
	} {
		t.Run(strings.Join(append(tc.args, tc.env[0]), " "), func(t *testing.T) {
			if tc.env[0] != "" {
				t.Setenv(tc.env[0], tc.env[1])
			}
			dir := filepath.Join(t.TempDir(), "data")
			o := &serveOptions{}
			cmd := serveCmd(o)
			if err := cmd.Flags().Parse(append([]string{"--data", dir, "--listen", "127.0.0.1:0"}, tc.args...)); err != nil {
				t.Fatal(err)
			}
			err := runServe(cmd, o)
			var ee *exitError
			if !errors.As(err, &ee) || ee.code != 2 || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v, want exit 2 saying %q", err, tc.want)
			}
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Errorf("the refused start made its data directory (%v)", err)
			}
		})
	}
}

// --merge-queue-gate-timeout (or its variable) reaches the merge queue's
// config; a value outside 1m–24h is a usage error.
func TestServeMergeQueueGateTimeoutFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  string
		want time.Duration
	}{
		{nil, "", time.Hour},
		{[]string{"--merge-queue-gate-timeout", "90m"}, "", 90 * time.Minute},
		{nil, "2h", 2 * time.Hour},
		{[]string{"--merge-queue-gate-timeout", "15m"}, "2h", 15 * time.Minute},
	} {
		if tc.env != "" {
			t.Setenv("BATON_MERGE_QUEUE_GATE_TIMEOUT", tc.env)
		}
		o, _ := parseServeFlags(t, tc.args)
		cfg, err := o.config()
		if err != nil {
			t.Fatalf("%v (env %q): %v", tc.args, tc.env, err)
		}
		if got := cfg.MergeQueue.GateTimeout; got != tc.want {
			t.Errorf("%v (env %q): gate timeout %v, want %v", tc.args, tc.env, got, tc.want)
		}
	}
	os.Unsetenv("BATON_MERGE_QUEUE_GATE_TIMEOUT")
	dir := t.TempDir()
	for _, v := range []string{"0", "-1h", "30s", "25h", "soon"} {
		args := []string{"serve", "--merge-queue-gate-timeout", v, "--data", dir}
		if code := run(args); code != 2 {
			t.Errorf("baton %s: exit %d, want 2", strings.Join(args, " "), code)
		}
	}
	o := &serveOptions{}
	cmd := serveCmd(o)
	if err := cmd.Flags().Parse([]string{"--merge-queue-gate-timeout", "0"}); err != nil {
		t.Fatal(err)
	}
	if _, err := o.config(); err == nil || !strings.Contains(err.Error(), "--merge-queue-gate-timeout must be between 1m and 24h") {
		t.Errorf("a gate timeout of 0: %v", err)
	}
}

// The secret accepted while rotating can come from a file, as the current
// one can: a secret on the command line shows in ps.
func TestServePreviousWebhookSecretFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "previous")
	if err := os.WriteFile(file, []byte("old-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o := &serveOptions{}
	if err := serveCmd(o).Flags().Parse([]string{"--previous-webhook-secret-file", file}); err != nil {
		t.Fatal(err)
	}
	cfg, err := o.config()
	if err != nil || cfg.PreviousWebhookSecret != "old-secret" {
		t.Errorf("previous secret %q, %v", cfg.PreviousWebhookSecret, err)
	}
	for _, args := range [][]string{
		{"--previous-webhook-secret-file", file, "--previous-webhook-secret", "x"},
		{"--previous-webhook-secret-file", filepath.Join(t.TempDir(), "missing")},
	} {
		o := &serveOptions{}
		if err := serveCmd(o).Flags().Parse(args); err != nil {
			t.Fatal(err)
		}
		if _, err := o.config(); err == nil || !strings.Contains(err.Error(), "--previous-webhook-secret") {
			t.Errorf("%v: %v", args, err)
		}
	}
}

// Credential files that cannot be the App's are refused as usage errors
// naming the flag and the file (config's errors exit 2), before anything
// is opened: a private key
// that is not PEM or not RSA, a webhook secret file that is empty.
func TestServeCredentialFileErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ecDER, err := x509.MarshalECPrivateKey(ec)
	if err != nil {
		t.Fatal(err)
	}
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	good := write("app.pem", pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(rsaKey)}))
	notPEM := write("not.pem", []byte("garbage\n"))
	ecPEM := write("ec.pem", pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: ecDER}))
	secret := write("secret", []byte("s3cret\n"))
	empty := write("empty", []byte(" \n"))
	data := filepath.Join(dir, "data")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--private-key", notPEM, "--webhook-secret-file", secret}, "--private-key " + notPEM + ": not a PEM file"},
		{[]string{"--private-key", ecPEM, "--webhook-secret-file", secret}, "--private-key " + ecPEM + ": not an RSA private key"},
		{[]string{"--private-key", good, "--webhook-secret-file", empty}, "--webhook-secret-file " + empty + " is empty"},
		{[]string{"--private-key", good, "--previous-webhook-secret-file", empty, "--webhook-secret-file", secret}, "--previous-webhook-secret-file " + empty + " is empty"},
	} {
		args := append([]string{"--app-id", "5", "--data", data, "--listen", "127.0.0.1:0", "--github-url", "http://127.0.0.1:1/"}, tc.args...)
		o := &serveOptions{}
		if err := serveCmd(o).Flags().Parse(args); err != nil {
			t.Fatal(err)
		}
		if _, err := o.config(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
	o := &serveOptions{}
	if err := serveCmd(o).Flags().Parse([]string{"--app-id", "5", "--private-key", good, "--webhook-secret-file", secret}); err != nil {
		t.Fatal(err)
	}
	if cfg, err := o.config(); err != nil || cfg.WebhookSecret != "s3cret" {
		t.Errorf("good credentials: %q, %v", cfg.WebhookSecret, err)
	}
}

// A secret given where the path of its file belongs (the PEM itself in
// BATON_PRIVATE_KEY, as other GitHub Apps take their key, a seed in
// BATON_NATS_NKEY) is refused as a usage error naming the flag, without
// printing the secret: the message goes to the terminal or the journal.
func TestServeSecretFileFlagsDoNotEchoTheValue(t *testing.T) {
	dir := t.TempDir()
	const pemKey = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA6KzDWFsW/wJvO5Vaz7SkBjQfqEN2upXizjmYG1IeULrevYZc\n-----END RSA PRIVATE KEY-----\n"
	for _, tc := range []struct{ env, value string }{
		{"BATON_PRIVATE_KEY", pemKey},
		{"BATON_WEBHOOK_SECRET_FILE", "s3cret-webhook-value"},
		{"BATON_PREVIOUS_WEBHOOK_SECRET_FILE", "0ld/s3cret+value"},
		{"BATON_NATS_NKEY", "SUACSSL3UAHUDXKFSNVUZRF5UHPMWZ6BFDTJ7M6USDXIEDNPPQYYYCU3VY"},
		{"BATON_NATS_CREDS", "-----BEGIN NATS USER JWT-----\neyJ0eXAiOiJKV1Qi\n------END NATS USER JWT------\n"},
		{"BATON_NATS_TLS_KEY", pemKey},
	} {
		t.Run(tc.env, func(t *testing.T) {
			t.Setenv(tc.env, tc.value)
			o := &serveOptions{}
			cmd := serveCmd(o)
			if err := cmd.Flags().Parse([]string{"--data", dir, "--listen", "127.0.0.1:0", "--nats", "nats://127.0.0.1:1"}); err != nil {
				t.Fatal(err)
			}
			flag := "--" + strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(tc.env, "BATON_")), "_", "-")
			err := runServe(cmd, o)
			var ee *exitError
			if !errors.As(err, &ee) || ee.code != 2 || !strings.Contains(err.Error(), flag+" from "+tc.env) {
				t.Fatalf("%v, want exit 2 naming %s from %s", err, flag, tc.env)
			}
			for _, line := range strings.Split(tc.value, "\n") {
				if len(line) > 8 && strings.Contains(err.Error(), line) {
					t.Errorf("the message prints the secret: %v", err)
				}
			}
		})
	}
	// A path that exists is named: it is not a secret, and it is what the
	// operator has to look at.
	o := &serveOptions{}
	if err := serveCmd(o).Flags().Parse([]string{"--private-key", dir}); err != nil {
		t.Fatal(err)
	}
	if _, err := o.config(); err == nil || !strings.Contains(err.Error(), dir) {
		t.Errorf("a directory as --private-key: %v, want its path named", err)
	}
}

// A bad value that came from a BATON_ variable is reported naming the
// variable beside the flag: the operator looks for it in the environment,
// not on the command line.
func TestServeUsageErrorNamesVariable(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("BATON_LEASE_TTL", "2s")
	t.Setenv("BATON_LISTEN", "nowhere")
	t.Setenv("BATON_RECONCILE_MIN_AGE", "-1s")
	for _, tc := range []struct {
		args      []string
		want, not string
	}{
		{[]string{"--data", dir}, "--lease-ttl from BATON_LEASE_TTL", ""},
		{[]string{"--data", dir, "--lease-ttl", "30s", "--reconcile-min-age", "1m"}, "--listen from BATON_LISTEN", "BATON_LEASE_TTL"},
		{[]string{"--data", dir, "--lease-ttl", "30s", "--listen", "127.0.0.1:0"}, "--reconcile-min-age from BATON_RECONCILE_MIN_AGE", "BATON_LISTEN"},
		{[]string{"--data", dir, "--lease-ttl", "1s", "--listen", "127.0.0.1:0"}, "--lease-ttl must be", "BATON_LEASE_TTL"},
	} {
		o := &serveOptions{}
		cmd := serveCmd(o)
		if err := cmd.Flags().Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		err := runServe(cmd, o)
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != 2 || !strings.Contains(err.Error(), tc.want) ||
			(tc.not != "" && strings.Contains(err.Error(), tc.not)) {
			t.Errorf("%v: %v, want exit 2 saying %q", tc.args, err, tc.want)
		}
	}
}

// SIGTERM while the server is starting (here GitHub slow to answer the
// start's check of the App) stops it at once, with exit 0: a stop asked
// for, not a failed start.
func TestServeSignalWhileStarting(t *testing.T) {
	sim, err := ghsim.New(ghsim.Config{Limits: ghsim.Limits{PrimaryLimit: -1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := sim.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	if _, err := sim.SetFault(ghsim.Fault{Route: "GET /app", Kind: ghsim.FaultLatency, Latency: time.Minute, Count: 1}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	key := filepath.Join(dir, "app.pem")
	if err := os.WriteFile(key, sim.PrivateKeyPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	code := make(chan int, 1)
	go func() {
		code <- run([]string{"serve", "--data", filepath.Join(dir, "data"), "--listen", "127.0.0.1:0",
			"--github-url", sim.URL(), "--app-id", strconv.FormatInt(sim.AppID(), 10), "--private-key", key,
			"--webhook-secret", sim.WebhookSecret(), "--log-level", "error"})
	}()
	// The check is in flight once the fault has fired; the signal handler
	// is installed before the start begins.
	for deadline := time.Now().Add(20 * time.Second); len(sim.Faults()) > 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the server did not ask GitHub for the App")
		}
	}
	start := time.Now()
	self, err := os.FindProcess(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if err := self.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-code:
		if c != 0 {
			t.Errorf("exit %d after SIGTERM while starting, want 0", c)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("stopped %s after SIGTERM", d)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop after SIGTERM")
	}
}

// --dev runs unpaced unless --github-pacing (or BATON_GITHUB_PACING) is
// given: then the value given reaches the server, as the flag's help says.
func TestServeDevPacingFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  string
		want string // "" for the server's default
	}{
		{[]string{"--dev"}, "", ""},
		{[]string{"--dev", "--github-pacing", "on"}, "", "true"},
		{[]string{"--dev", "--github-pacing", "off"}, "", "false"},
		{[]string{"--dev"}, "on", "true"},
		{nil, "", "true"},
		{[]string{"--github-pacing", "off"}, "", "false"},
	} {
		t.Run(strings.Join(tc.args, " ")+" "+tc.env, func(t *testing.T) {
			if tc.env != "" {
				t.Setenv("BATON_GITHUB_PACING", tc.env)
			}
			o, cmd := parseServeFlags(t, tc.args)
			o.noteGiven(cmd.Flags())
			cfg, err := o.config()
			if err != nil {
				t.Fatal(err)
			}
			got := ""
			if cfg.Pacing != nil {
				got = strconv.FormatBool(*cfg.Pacing)
			}
			if got != tc.want {
				t.Errorf("Pacing = %q, want %q", got, tc.want)
			}
		})
	}
}

// The defaults deploy/ENVIRONMENT.md gives are the flags' own: a default
// changed in the code cannot leave the reference behind.
func TestServeEnvironmentReferenceDefaults(t *testing.T) {
	ref, err := os.ReadFile(filepath.Join("..", "..", "deploy", "ENVIRONMENT.md"))
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{} // flag name → its row's default column
	for _, line := range strings.Split(string(ref), "\n") {
		cols := strings.Split(line, "|")
		if len(cols) < 5 || !strings.Contains(cols[1], "`BATON_") {
			continue
		}
		for _, name := range regexp.MustCompile("`--([a-z0-9-]+)`").FindAllStringSubmatch(cols[2], -1) {
			rows[name[1]] = cols[3]
		}
	}
	tick := regexp.MustCompile("`([^`]*)`")
	checked := 0
	newServeCmd().Flags().VisitAll(func(f *pflag.Flag) {
		if f.Name == "help" || f.DefValue == "" || f.DefValue == "0" {
			return // no default of its own: the table says what stands in
		}
		col, ok := rows[f.Name]
		if !ok {
			t.Errorf("deploy/ENVIRONMENT.md has no row for --%s", f.Name)
			return
		}
		checked++
		for _, m := range tick.FindAllStringSubmatch(col, -1) {
			if m[1] == f.DefValue {
				return
			}
			if f.Value.Type() == "duration" {
				want, _ := time.ParseDuration(f.DefValue)
				if got, err := time.ParseDuration(m[1]); err == nil && got == want {
					return
				}
			}
		}
		t.Errorf("deploy/ENVIRONMENT.md gives --%s the default %q; the flag's is %q", f.Name, strings.TrimSpace(col), f.DefValue)
	})
	if checked < 15 {
		t.Fatalf("only %d defaults checked", checked)
	}
}
