package main

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/baton-dev/baton/app"
	"github.com/baton-dev/baton/app/ghsim"
)

func init() { register(newGhsimCmd) }

// ghsimOptions are the flags of `baton ghsim`.
type ghsimOptions struct {
	listen              string
	dir                 string
	appID               int64
	rateLimit           int
	primaryStatus       int
	secondaryLimit      int
	secondaryWindow     time.Duration
	secondaryRetryAfter string
	tokenTTL            time.Duration
	webhookURL          string
	webhookSecret       string
	seed                bool
}

// ghsimFile is DIR/ghsim.json: what a `baton serve` needs to act as the
// simulated App.
type ghsimFile struct {
	URL            string `json:"url"`
	AppID          int64  `json:"appId"`
	PrivateKeyFile string `json:"privateKeyFile"`
	WebhookSecret  string `json:"webhookSecret"`
	InstallationID int64  `json:"installationId,omitempty"`
	Repository     string `json:"repository,omitempty"`
	AdminURL       string `json:"adminUrl"`
}

const (
	ghsimFileName = "ghsim.json"
	ghsimKeyName  = "ghsim-app.pem"
)

func newGhsimCmd() *cobra.Command {
	o := ghsimOptions{}
	cmd := &cobra.Command{
		Use:   "ghsim",
		Short: "Run the GitHub simulator (for developing against baton offline)",
		Long: `Run baton's GitHub simulator: GitHub's REST API subset that baton uses,
GitHub App authentication (App JWT → installation token), rate limits,
injectable faults, webhooks and an admin API under /_ghsim/.

It seeds installation 1 of the App with repository octo/demo (open pull
requests #1–#3, issues #10–#12, a main branch) and writes DIR/ghsim.json:
{"url", "appId", "privateKeyFile", "webhookSecret", ...}, everything a
baton server needs to authenticate as the App. The App's private key is
kept in DIR (mode 0600) and reused on the next start; the simulated
GitHub's state is not. It runs until interrupted (SIGINT or SIGTERM).

A baton server then runs as the simulated App with the flags that file
gives (see the second example), and scripts shape the simulated GitHub
through the admin API (adminUrl in ghsim.json; see the third example).`,
		Example: `  baton ghsim --dir ./ghsim-data
  BATON_WEBHOOK_SECRET="$(jq -r .webhookSecret ghsim-data/ghsim.json)" baton serve \
      --github-url "$(jq -r .url ghsim-data/ghsim.json)" \
      --app-id "$(jq -r .appId ghsim-data/ghsim.json)" \
      --private-key "$(jq -r .privateKeyFile ghsim-data/ghsim.json)"
  curl -X POST "$(jq -r .adminUrl ghsim-data/ghsim.json)repos/octo/demo/issues" -d '{"title": "flaky test"}'
  baton ghsim --listen 127.0.0.1:9000 --rate-limit 100 --secondary-limit 5 --secondary-retry-after on
  baton ghsim --webhook-url http://127.0.0.1:8080/webhooks/github --rate-limit -1`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runGhsim(ctx, o, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.listen, "listen", "127.0.0.1:0", "loopback address to listen on (port 0 picks a free port)")
	f.StringVar(&o.dir, "dir", "./ghsim-data", "directory for ghsim.json and the App's private key")
	f.Int64Var(&o.appID, "app-id", 1, "ID of the simulated GitHub App")
	f.IntVar(&o.rateLimit, "rate-limit", 5000, "primary rate limit: requests per installation per hour (-1: unlimited; 0 is refused)")
	f.IntVar(&o.primaryStatus, "rate-limit-status", 403, "status of a request over the primary limit: 403 or 429")
	f.IntVar(&o.secondaryLimit, "secondary-limit", 0, "secondary rate limit: content-creating requests per installation per window (0: off)")
	f.DurationVar(&o.secondaryWindow, "secondary-window", time.Minute, "window of the secondary rate limit")
	f.StringVar(&o.secondaryRetryAfter, "secondary-retry-after", "off", "Retry-After of a secondary-limit refusal: off, on (the time until the window has room) or SECONDS")
	f.DurationVar(&o.tokenTTL, "token-ttl", time.Hour, "lifetime of installation access tokens")
	f.StringVar(&o.webhookURL, "webhook-url", "", "URL the App's webhook deliveries are sent to (none if empty)")
	f.StringVar(&o.webhookSecret, "webhook-secret", "", "webhook secret (default: the one in DIR/ghsim.json, or a new random one)")
	f.BoolVar(&o.seed, "seed", true, "seed installation 1 with the octo/demo repository")
	cliUsageErrors(cmd)
	return cmd
}

// runGhsim runs the simulator until ctx ends.
func runGhsim(ctx context.Context, o ghsimOptions, out io.Writer) error {
	// The flags are checked before DIR or the App's key is touched.
	if o.rateLimit == 0 {
		return cliUsage(errors.New("--rate-limit 0 would refuse every request: give a positive limit, or -1 for unlimited"))
	}
	if o.primaryStatus != 403 && o.primaryStatus != 429 {
		return cliUsage(fmt.Errorf("--rate-limit-status must be 403 or 429, not %d", o.primaryStatus))
	}
	if o.tokenTTL <= 0 {
		return cliUsage(fmt.Errorf("--token-ttl must be positive, not %v", o.tokenTTL))
	}
	if o.secondaryLimit < 0 {
		return cliUsage(fmt.Errorf("--secondary-limit must not be negative (0 turns it off), not %d", o.secondaryLimit))
	}
	if o.secondaryLimit > 0 && o.secondaryWindow <= 0 {
		return cliUsage(fmt.Errorf("--secondary-window must be positive, not %v", o.secondaryWindow))
	}
	retryAfter, err := ghsim.ParseRetryAfter(o.secondaryRetryAfter)
	if err != nil {
		return cliUsage(fmt.Errorf("--secondary-retry-after: %w", err))
	}
	if o.appID < 1 {
		// The simulator would take 0 for its default, 1.
		return cliUsage(fmt.Errorf("--app-id must be positive, not %d", o.appID))
	}
	host, _, err := net.SplitHostPort(o.listen)
	if err != nil {
		return cliUsage(fmt.Errorf("--listen must be HOST:PORT, not %q", o.listen))
	}
	if !app.LoopbackHost(host) {
		return cliUsage(fmt.Errorf("--listen must be a loopback address (127.0.0.1, ::1 or localhost): the admin API has no authentication; not %q", o.listen))
	}
	dir, err := filepath.Abs(o.dir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	keyFile := filepath.Join(dir, ghsimKeyName)
	key, err := loadOrCreateKey(keyFile)
	if err != nil {
		return err
	}
	secret := o.webhookSecret
	if secret == "" {
		secret = previousWebhookSecret(filepath.Join(dir, ghsimFileName))
	}
	sim, err := ghsim.New(ghsim.Config{
		Addr: o.listen, AppID: o.appID, PrivateKey: key, TokenTTL: o.tokenTTL,
		WebhookURL: o.webhookURL, WebhookSecret: secret,
		Limits: ghsim.Limits{
			PrimaryLimit: o.rateLimit, PrimaryStatus: o.primaryStatus,
			SecondaryLimit: o.secondaryLimit, SecondaryWindow: o.secondaryWindow, SecondaryRetryAfter: retryAfter,
		},
	})
	if err != nil {
		return err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = sim.Stop(stopCtx)
	}()
	info := ghsimFile{
		URL: sim.URL(), AppID: sim.AppID(), PrivateKeyFile: keyFile, WebhookSecret: sim.WebhookSecret(),
		AdminURL: sim.URL() + "/_ghsim/",
	}
	if o.seed {
		if err := sim.SeedDemo(); err != nil {
			return fmt.Errorf("seed: %w", err)
		}
		info.InstallationID = ghsim.DemoInstallationID
		info.Repository = ghsim.DemoOwner + "/" + ghsim.DemoRepo
	}
	if err := sim.Start(ctx); err != nil {
		return err
	}
	if err := writeFileAtomic(filepath.Join(dir, ghsimFileName), info, 0o600); err != nil {
		return err
	}
	fmt.Fprintf(out, "GitHub simulator listening on %s\n", sim.URL())
	fmt.Fprintf(out, "  App ID %d; credentials in %s\n", info.AppID, filepath.Join(dir, ghsimFileName))
	if o.seed {
		fmt.Fprintf(out, "  installation %d: %s (pull requests #1-#3, issues #10-#12)\n", info.InstallationID, info.Repository)
	}
	fmt.Fprintf(out, "  admin API: %s\n", info.AdminURL)
	<-ctx.Done()
	return nil
}

// loadOrCreateKey reads the App's key from path, or creates it (mode 0600).
func loadOrCreateKey(path string) (*rsa.PrivateKey, error) {
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		block, _ := pem.Decode(b)
		if block == nil {
			return nil, fmt.Errorf("%s: no PEM block", path)
		}
		key, err := x509.ParsePKCS1PrivateKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return key, nil
	case !errors.Is(err, fs.ErrNotExist):
		return nil, err
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	data := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return nil, err
	}
	return key, nil
}

func previousWebhookSecret(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	var f ghsimFile
	if json.Unmarshal(b, &f) != nil {
		return ""
	}
	return f.WebhookSecret
}

// writeFileAtomic writes v as JSON to path through a temporary file, so a
// reader never sees half a file.
func writeFileAtomic(path string, v any, mode os.FileMode) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
