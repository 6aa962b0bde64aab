package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/url"
	"os"
	"os/signal"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/baton-dev/baton/app"
	"github.com/baton-dev/baton/app/ghsim"
	"github.com/baton-dev/baton/app/mergequeue"
	"github.com/baton-dev/baton/executor"
	"github.com/baton-dev/baton/queue"
)

func init() { register(newServeCmd) }

// serveOptions are the flags of `baton serve`. Every flag also reads the
// environment variable BATON_<FLAG> (upper case, dashes as underscores)
// when it is not given on the command line.
type serveOptions struct {
	data, listen, publicURL                   string
	dev                                       bool
	githubURL, githubWebURL                   string
	appID                                     int64
	privateKey                                string
	webhookSecret, webhookSecretFile          string
	previousWebhookSecret, previousSecretFile string
	pacing                                    string
	// pacingGiven is whether --github-pacing (or its variable) was given:
	// without it, --dev runs unpaced.
	pacingGiven                                  bool
	natsURL, natsListen, natsCreds, natsNKey     string
	natsTLSCA, natsTLSCert, natsTLSKey, natsSync string
	natsReplicas                                 int
	workers                                      int
	leaseTTL, ackWait, shutdownTimeout           time.Duration
	retention                                    time.Duration
	reconcileInterval, reconcileMinAge           time.Duration
	synchronous                                  string
	logLevel, logFormat                          string
	mqLabel, mqChecks, mqMethod                  string
	mqGateTimeout                                time.Duration
}

func newServeCmd() *cobra.Command { return serveCmd(&serveOptions{}) }

// serveCmd is `baton serve`, its flags set into o.
func serveCmd(o *serveOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run baton: the API, the webhook receiver, the queue and the workers",
		Long: `Run baton: the HTTP API, the GitHub webhook receiver, the embedded NATS
JetStream queue and the workers that carry operations out on GitHub.

Data (the SQLite database, the JetStream store, the App's credentials) lives
in --data; one server at a time serves a data directory (a second is refused,
naming the first's process). Without App credentials (flags, or stored by the setup flow) baton
serves the setup page at /setup and runs no operations until it is restarted
as the App. At start baton asks GitHub who the App is (GET /app): credentials
GitHub refuses (another App's ID or key) or a --github-url that is not a
GitHub REST API stop it with a message saying which; GitHub not answering
does not (operations wait in the queue).

--dev runs a GitHub simulator in this process instead of GitHub, seeded with
installation 1 and repository octo/demo (pull requests #1–#3, issues
#10–#12, branch main), creates an admin token (revoking the one the
previous --dev start printed), writes <data>/dev.json and prints commands
to try. Nothing leaves the loopback interface: with --dev, --listen (and
--nats-listen or --nats, if given) must be a loopback address (127.0.0.1,
::1 or localhost). A data
directory is --dev's (it has dev.json) or GitHub's, never both: baton
refuses to start on the other kind, whose operations and tokens are not
this run's.

The merge queue merges pull requests labeled --merge-queue-label one at a
time, in order, once the checks of their head passed: the checks listed in
--merge-queue-checks, or else the required checks of the base branch's
protection (with none, every check reported on the head). A pull request
whose checks are still pending --merge-queue-gate-timeout after it joined
(or was pushed to) bounces, naming the checks it waited for, so that a check
that never reports does not hold the queue. A name reported both as a check
run and as a status needs both to pass. Do not make the queue's own status,
baton/queue, a required check of the branch protection: GitHub would refuse
every merge. It does not update branches:
where protection requires them up to date, a pull request behind its base
bounces.

Every flag can also be set with an environment variable: BATON_ and the
flag's name in upper case with underscores (--nats-listen: BATON_NATS_LISTEN).

SIGINT or SIGTERM stop baton gracefully: no new requests, calls to GitHub in
flight finish, operations waiting (a backoff, a pace) go back to the queue at
once, anything still running at --shutdown-timeout goes back too (leases
released; a call to GitHub still in flight is cut short, and its operation
checks GitHub first when it runs again), then exit 0. A second signal
cuts the wait short as the deadline would (a third ends baton at once, also
when the second came after the deadline). A
signal while baton is still starting stops the start, with exit 0 too.`,
		Example: `  baton serve --dev
  baton serve --data /var/lib/baton --listen 0.0.0.0:8080 --public-url https://baton.example.com
  baton serve --app-id 12345 --private-key app.pem --webhook-secret-file secret.txt
  baton serve --nats nats://10.0.0.5:4222,nats://10.0.0.6:4222 --nats-replicas 3`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runServe(cmd, o) },
	}
	f := cmd.Flags()
	f.StringVar(&o.data, "data", "./baton-data", "data directory")
	f.StringVar(&o.listen, "listen", "127.0.0.1:8080", "HTTP listen address")
	f.StringVar(&o.publicURL, "public-url", "", "URL GitHub and browsers reach baton at (default http://LISTEN)")
	f.BoolVar(&o.dev, "dev", false, "run with a GitHub simulator in this process (no GitHub account needed)")
	f.StringVar(&o.githubURL, "github-url", "", "GitHub REST API base (default https://api.github.com/; GHES: https://HOST/api/v3/)")
	f.StringVar(&o.githubWebURL, "github-web-url", "", "GitHub web address for the setup flow (default https://HOST for a --github-url of https://HOST/api/v3/, else https://github.com)")
	f.Int64Var(&o.appID, "app-id", 0, "GitHub App ID (default: the credentials stored by the setup flow)")
	f.StringVar(&o.privateKey, "private-key", "", "file holding the App's private key (PEM; default: the one the setup flow stored)")
	f.StringVar(&o.webhookSecret, "webhook-secret", "", "the App's webhook secret (prefer --webhook-secret-file or the environment)")
	f.StringVar(&o.webhookSecretFile, "webhook-secret-file", "", "file holding the App's webhook secret (default: the one the setup flow stored)")
	f.StringVar(&o.previousWebhookSecret, "previous-webhook-secret", "", "a second webhook secret accepted while rotating (prefer --previous-webhook-secret-file)")
	f.StringVar(&o.previousSecretFile, "previous-webhook-secret-file", "", "file holding a second webhook secret accepted while rotating")
	f.StringVar(&o.pacing, "github-pacing", "on", "pace each installation's mutating requests as GitHub asks (on|off; with --dev off unless given)")
	f.StringVar(&o.natsURL, "nats", "", "external NATS server or cluster URL(s); default: embedded")
	f.StringVar(&o.natsListen, "nats-listen", "", "let the embedded NATS server accept clients on this address, loopback or private: it has no authentication (e.g. 127.0.0.1:4222)")
	f.StringVar(&o.natsCreds, "nats-creds", "", "NATS credentials file (external server)")
	f.StringVar(&o.natsNKey, "nats-nkey", "", "NATS NKey seed file (external server)")
	f.StringVar(&o.natsTLSCA, "nats-tls-ca", "", "CA file to trust for the NATS server")
	f.StringVar(&o.natsTLSCert, "nats-tls-cert", "", "client certificate for the NATS server")
	f.StringVar(&o.natsTLSKey, "nats-tls-key", "", "client key for the NATS server")
	f.IntVar(&o.natsReplicas, "nats-replicas", 1, "stream replicas, 1–5 (more than 1 needs an external cluster)")
	f.StringVar(&o.natsSync, "nats-sync", "default", "embedded JetStream flush policy: default|always")
	f.IntVar(&o.workers, "workers", 32, "operations run at once, 1–4096")
	f.DurationVar(&o.leaseTTL, "lease-ttl", 30*time.Second, "TTL of an operation's resource lease (kept alive), 3s–5m")
	f.DurationVar(&o.ackWait, "ack-wait", 60*time.Second, "queue ack wait (must exceed --lease-ttl)")
	f.DurationVar(&o.reconcileInterval, "reconcile-interval", 30*time.Second, "how often operations missing from the queue (a failed publish) are found and published again")
	f.DurationVar(&o.reconcileMinAge, "reconcile-min-age", time.Minute, "how long after its last dispatch an unfinished operation may be published again by the reconciler")
	f.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 30*time.Second, "graceful shutdown deadline (positive)")
	f.DurationVar(&o.retention, "operation-retention", app.DefaultOperationRetention, "how long a finished operation's record is kept (at least 72h; 0 keeps them forever); then its idempotency key is free again")
	f.StringVar(&o.synchronous, "sqlite-synchronous", "FULL", "SQLite synchronous setting: FULL|EXTRA|NORMAL")
	f.StringVar(&o.mqLabel, "merge-queue-label", mergequeue.DefaultLabel, "label that puts a pull request in the merge queue (at most 50 characters)")
	f.StringVar(&o.mqChecks, "merge-queue-checks", "", "comma-separated check runs or status contexts a pull request needs before it merges (default: the base branch's required checks)")
	f.StringVar(&o.mqMethod, "merge-queue-method", mergequeue.DefaultMergeMethod, "how the merge queue merges: merge|squash|rebase")
	f.DurationVar(&o.mqGateTimeout, "merge-queue-gate-timeout", mergequeue.DefaultGateTimeout, "how long a queued pull request's required checks may stay pending (after it joined or was pushed to) before it bounces, 1m–24h")
	f.StringVar(&o.logLevel, "log-level", "info", "log level: debug|info|warn|error")
	f.StringVar(&o.logFormat, "log-format", "", "log format: json|console (default json; console with --dev)")
	cliUsageErrors(cmd)
	return cmd
}

// envFlags sets each flag not given on the command line from BATON_<NAME>.
func envFlags(fs *pflag.FlagSet) error {
	var errs []error
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Changed {
			return
		}
		name := "BATON_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(name); ok {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
			}
		}
	})
	return errors.Join(errs...)
}

// envNames maps each flag that BATON_<NAME> will set (not given on the
// command line) to that variable's name.
func envNames(fs *pflag.FlagSet) map[string]string {
	names := map[string]string{}
	fs.VisitAll(func(f *pflag.Flag) {
		name := "BATON_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if _, ok := os.LookupEnv(name); ok && !f.Changed {
			names[f.Name] = name
		}
	})
	return names
}

// flagRef matches a flag's name in a message.
var flagRef = regexp.MustCompile(`--[a-z][a-z0-9-]*`)

// envUsage is cliUsage(err), naming the variable that set each flag err
// names when the value came from the environment: the operator looks for
// it there, not on the command line.
func envUsage(err error, env map[string]string) error {
	var from []string
	seen := map[string]bool{}
	for _, ref := range flagRef.FindAllString(err.Error(), -1) {
		name := strings.TrimPrefix(ref, "--")
		if v, ok := env[name]; ok && !seen[name] {
			seen[name] = true
			from = append(from, ref+" from "+v)
		}
	}
	if len(from) > 0 {
		err = fmt.Errorf("%w (%s)", err, strings.Join(from, ", "))
	}
	return cliUsage(err)
}

func runServe(cmd *cobra.Command, o *serveOptions) error {
	env := envNames(cmd.Flags())
	if err := envFlags(cmd.Flags()); err != nil {
		return cliUsage(err)
	}
	o.noteGiven(cmd.Flags())
	cfg, err := o.config()
	if err != nil {
		return envUsage(err, env)
	}
	log, err := newLogger(o)
	if err != nil {
		return envUsage(err, env)
	}
	defer log.Sync() //nolint:errcheck // stderr
	cfg.Logger = log
	srv, err := app.NewServer(cfg)
	if err != nil {
		return envUsage(err, env)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := srv.Start(ctx); err != nil {
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			// SIGINT or SIGTERM while starting (GitHub slow to answer,
			// a queue slow to come up): a stop asked for, not a failure.
			log.Info("stopped while starting", zap.String("event", "shutdown"))
			return nil
		}
		return fmt.Errorf("start: %w", err)
	}
	if cfg.Dev {
		printDevGuide(cmd.OutOrStdout(), srv)
	} else {
		fmt.Fprintf(cmd.OutOrStdout(), "baton is serving on %s (data in %s)\n", srv.URL(), cfg.DataDir)
	}
	<-ctx.Done()
	// A second SIGINT or SIGTERM cuts the stop short, as the deadline
	// would: calls in flight are interrupted and their operations released
	// and sent back to the queue, to run at once after a restart. Ended by
	// the signal's default instead, baton would leave their leases held
	// and their messages unacknowledged until they expire. A third signal
	// ends the process at once.
	again := make(chan os.Signal, 1)
	signal.Notify(again, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(again)
	stop()
	log.Info("shutting down", zap.String("event", "shutdown"), zap.Duration("deadline", cfg.ShutdownTimeout))
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	stopped := make(chan struct{})
	defer close(stopped)
	go func() {
		select {
		case <-again:
			log.Warn("signalled again: cutting the shutdown short; work in flight goes back to the queue",
				zap.String("event", "shutdown_cut"))
			cancel()
		case <-sctx.Done():
			// The deadline has cut the stop short already, and what is
			// left (each part's close, bounded) may still take a while:
			// a signal now is the second all the same, and the next one
			// must end baton, not be swallowed.
			select {
			case <-again:
				log.Warn("signalled again: the shutdown deadline has passed; a further signal ends baton at once",
					zap.String("event", "shutdown_cut"))
			case <-stopped:
				return
			}
		case <-stopped:
			return
		}
		signal.Stop(again)
	}()
	if err := srv.Stop(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}

// noteGiven records which flags were given (on the command line or by
// their variables, once envFlags has run) where config needs to know.
func (o *serveOptions) noteGiven(fs *pflag.FlagSet) {
	o.pacingGiven = fs.Changed("github-pacing")
}

func (o *serveOptions) config() (app.Config, error) {
	cfg := app.Config{
		DataDir:               o.data,
		Listen:                o.listen,
		PublicURL:             o.publicURL,
		Dev:                   o.dev,
		GitHubURL:             o.githubURL,
		GitHubWebURL:          o.githubWebURL,
		AppID:                 o.appID,
		WebhookSecret:         o.webhookSecret,
		PreviousWebhookSecret: o.previousWebhookSecret,
		Workers:               o.workers,
		LeaseTTL:              o.leaseTTL,
		AckWait:               o.ackWait,
		ReconcileInterval:     o.reconcileInterval,
		ReconcileMinAge:       o.reconcileMinAge,
		ShutdownTimeout:       o.shutdownTimeout,
		OperationRetention:    o.retention,
		Synchronous:           o.synchronous,
		Queue: queue.Config{
			URL:             o.natsURL,
			ListenAddr:      o.natsListen,
			CredentialsFile: o.natsCreds,
			NKeySeedFile:    o.natsNKey,
			TLSCAFile:       o.natsTLSCA,
			TLSCertFile:     o.natsTLSCert,
			TLSKeyFile:      o.natsTLSKey,
			Replicas:        o.natsReplicas,
		},
	}
	// app.Config reads 0 as "the default": on the command line, where the
	// defaults are the flags', 0 and negative values are refused here.
	switch {
	case o.workers < 1 || o.workers > 4096:
		return cfg, fmt.Errorf("--workers must be between 1 and 4096, not %d", o.workers)
	case o.natsReplicas < 1 || o.natsReplicas > 5:
		return cfg, fmt.Errorf("--nats-replicas must be between 1 and 5, not %d", o.natsReplicas)
	case o.leaseTTL < executor.MinLeaseTTL || o.leaseTTL > executor.MaxLeaseTTL:
		return cfg, fmt.Errorf("--lease-ttl must be between 3s and 5m, not %v", o.leaseTTL)
	case o.ackWait <= o.leaseTTL:
		return cfg, fmt.Errorf("--ack-wait (%v) must exceed --lease-ttl (%v)", o.ackWait, o.leaseTTL)
	case o.shutdownTimeout <= 0:
		return cfg, fmt.Errorf("--shutdown-timeout must be positive, not %v", o.shutdownTimeout)
	case o.reconcileInterval <= 0 || o.reconcileMinAge <= 0:
		return cfg, errors.New("--reconcile-interval and --reconcile-min-age must be positive")
	}
	if _, _, err := net.SplitHostPort(o.listen); err != nil {
		return cfg, fmt.Errorf("--listen must be HOST:PORT, not %q", o.listen)
	}
	for _, u := range []struct{ flag, value string }{
		{"--github-url", o.githubURL}, {"--github-web-url", o.githubWebURL}, {"--public-url", o.publicURL},
	} {
		if u.value == "" {
			continue
		}
		if p, err := url.Parse(u.value); err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" || p.RawQuery != "" || p.Fragment != "" {
			return cfg, fmt.Errorf("%s must be an absolute http(s) URL without query, not %q", u.flag, u.value)
		}
	}
	switch strings.ToUpper(o.synchronous) {
	case "FULL", "EXTRA", "NORMAL":
	default:
		return cfg, fmt.Errorf("--sqlite-synchronous must be FULL, EXTRA or NORMAL, not %q", o.synchronous)
	}
	if o.retention == 0 {
		cfg.OperationRetention = -1 // kept forever
	} else if o.retention < 0 {
		return cfg, fmt.Errorf("--operation-retention must not be negative (0 keeps records forever), not %v", o.retention)
	}
	mq, err := o.mergeQueue()
	if err != nil {
		return cfg, err
	}
	cfg.MergeQueue = mq
	switch o.pacing {
	case "on", "true":
		on := true
		cfg.Pacing = &on
	case "off", "false":
		off := false
		cfg.Pacing = &off
	default:
		return cfg, fmt.Errorf("--github-pacing must be on or off, not %q", o.pacing)
	}
	if o.dev && !o.pacingGiven {
		cfg.Pacing = nil // the server's default: off with --dev
	}
	switch o.natsSync {
	case "default", "":
	case "always":
		cfg.Queue.SyncAlways = true
	default:
		return cfg, fmt.Errorf("--nats-sync must be default or always, not %q", o.natsSync)
	}
	if err := o.natsFlagsAgree(); err != nil {
		return cfg, err
	}
	if o.privateKey != "" {
		b, err := readSecretFile("private-key", o.privateKey)
		if err != nil {
			return cfg, err
		}
		if err := app.CheckAppPrivateKey(b); err != nil {
			return cfg, fmt.Errorf("--private-key %s: %w", o.privateKey, err)
		}
		cfg.PrivateKey = b
	}
	if cfg.WebhookSecret, err = secretFlag("webhook-secret", o.webhookSecret, o.webhookSecretFile); err != nil {
		return cfg, err
	}
	if cfg.PreviousWebhookSecret, err = secretFlag("previous-webhook-secret", o.previousWebhookSecret, o.previousSecretFile); err != nil {
		return cfg, err
	}
	// The queue reads these when it connects; a value that is not a
	// readable file is refused here, before anything opens, and without
	// the value in the message.
	for _, f := range []struct{ flag, path string }{
		{"nats-creds", o.natsCreds}, {"nats-nkey", o.natsNKey}, {"nats-tls-key", o.natsTLSKey},
	} {
		if f.path == "" {
			continue
		}
		if _, err := readSecretFile(f.flag, f.path); err != nil {
			return cfg, err
		}
	}
	if cfg.AppID != 0 && (len(cfg.PrivateKey) == 0 || cfg.WebhookSecret == "") {
		return cfg, errors.New("--app-id needs --private-key and --webhook-secret (or --webhook-secret-file)")
	}
	return cfg, nil
}

// natsFlagsAgree refuses the queue flags that do not go together, naming
// the flags (a usage error, exit 2) rather than leaving them to the queue,
// which would refuse them only once the start is under way, naming its
// own settings.
func (o *serveOptions) natsFlagsAgree() error {
	if o.natsURL == "" {
		if o.natsReplicas != 1 {
			return fmt.Errorf("--nats-replicas %d needs an external cluster (--nats): the embedded server holds one replica", o.natsReplicas)
		}
		for _, f := range []struct{ flag, value string }{
			{"--nats-creds", o.natsCreds}, {"--nats-nkey", o.natsNKey},
			{"--nats-tls-ca", o.natsTLSCA}, {"--nats-tls-cert", o.natsTLSCert}, {"--nats-tls-key", o.natsTLSKey},
		} {
			if f.value != "" {
				return fmt.Errorf("%s applies to an external server (--nats), not to the embedded one", f.flag)
			}
		}
		if o.natsListen != "" {
			host, _, err := net.SplitHostPort(o.natsListen)
			if err != nil {
				return fmt.Errorf("--nats-listen must be HOST:PORT, not %q", o.natsListen)
			}
			if err := queue.CheckListenAddr(o.natsListen); err != nil {
				return fmt.Errorf("--nats-listen %w", err)
			}
			// --dev promises nothing beyond the loopback interface, and
			// the embedded server has no authentication.
			if o.dev && !app.LoopbackHost(host) {
				return fmt.Errorf("--nats-listen %q: with --dev, nothing listens beyond the loopback interface (127.0.0.1, ::1 or localhost)", o.natsListen)
			}
		}
	} else {
		if o.natsListen != "" {
			return errors.New("--nats-listen applies to the embedded server, not to an external one (--nats)")
		}
		if o.dev {
			// --dev promises nothing beyond the loopback interface; and
			// a NATS shared with a real baton would have this one take
			// that baton's operations off the shared consumer.
			for _, u := range strings.Split(o.natsURL, ",") {
				u = strings.TrimSpace(u)
				if !strings.Contains(u, "://") {
					u = "nats://" + u
				}
				if p, err := url.Parse(u); err != nil || !app.LoopbackHost(p.Hostname()) {
					return fmt.Errorf("--nats %q: with --dev, baton talks to nothing beyond the loopback interface (a NATS server on 127.0.0.1, ::1 or localhost, or none: the embedded one)", o.natsURL)
				}
			}
		}
		if o.natsSync == "always" {
			return errors.New("--nats-sync always applies to the embedded server; with --nats, configure sync on the external server")
		}
	}
	if o.natsCreds != "" && o.natsNKey != "" {
		return errors.New("--nats-creds and --nats-nkey are exclusive: give one")
	}
	if (o.natsTLSCert == "") != (o.natsTLSKey == "") {
		return errors.New("--nats-tls-cert and --nats-tls-key go together")
	}
	return nil
}

// mergeQueue reads the merge queue's flags; app.NewServer refuses the
// settings the queue would.
func (o *serveOptions) mergeQueue() (app.MergeQueueConfig, error) {
	mq := app.MergeQueueConfig{Label: strings.TrimSpace(o.mqLabel), MergeMethod: o.mqMethod}
	if mq.Label == "" {
		return mq, errors.New("--merge-queue-label must not be empty")
	}
	if strings.TrimSpace(o.mqChecks) != "" {
		for _, c := range strings.Split(o.mqChecks, ",") {
			c = strings.TrimSpace(c)
			if c == "" {
				return mq, fmt.Errorf("--merge-queue-checks has an empty check name in %q (give names separated by commas)", o.mqChecks)
			}
			if c == mergequeue.DefaultStatusContext {
				return mq, fmt.Errorf("--merge-queue-checks must not name %s, the queue's own status (it is set only after the checks pass)", c)
			}
			if !slices.Contains(mq.RequiredChecks, c) {
				mq.RequiredChecks = append(mq.RequiredChecks, c)
			}
		}
	}
	if !slices.Contains(mergequeue.MergeMethods, mq.MergeMethod) {
		return mq, fmt.Errorf("--merge-queue-method must be merge, squash or rebase, not %q", mq.MergeMethod)
	}
	if o.mqGateTimeout < mergequeue.MinGateTimeout || o.mqGateTimeout > mergequeue.MaxGateTimeout {
		return mq, fmt.Errorf("--merge-queue-gate-timeout must be between 1m and 24h, not %v", o.mqGateTimeout)
	}
	mq.GateTimeout = o.mqGateTimeout
	return mq, nil
}

func newLogger(o *serveOptions) (*zap.Logger, error) {
	var level zapcore.Level
	if err := level.Set(o.logLevel); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	format := o.logFormat
	if format == "" {
		format = "json"
		if o.dev {
			format = "console"
		}
	}
	var zc zap.Config
	switch format {
	case "json":
		zc = zap.NewProductionConfig()
	case "console":
		zc = zap.NewDevelopmentConfig()
		zc.DisableStacktrace = true
	default:
		return nil, fmt.Errorf("--log-format must be json or console, not %q", format)
	}
	zc.Level = zap.NewAtomicLevelAt(level)
	// Every line about an operation is kept: an operator follows one
	// operation through its lines, and sampling would drop some under load.
	zc.Sampling = nil
	zc.OutputPaths, zc.ErrorOutputPaths = []string{"stderr"}, []string{"stderr"}
	return zc.Build()
}

func printDevGuide(w io.Writer, srv *app.Server) {
	d := srv.Dev()
	fmt.Fprintf(w, `
baton is running in development mode.

  API       %s
  GitHub    %s   (simulated: installation 1, repository octo/demo,
                 issues #10–#12, branch main, pull requests:
                 #1 head %s
                 #2 head %s
                 #3 head %s)
  token     %s   (admin; also in dev.json in the data directory)

Try it from another shell:

  export BATON_SERVER=%s
  export BATON_TOKEN=%s
  go run ./cmd/baton submit --key hello-1 --action github.issues.comment \
      --resource issue:octo/demo#10 --payload '{"body":"Hello from baton"}'
  go run ./cmd/baton status OPERATION_ID --wait
  go run ./cmd/baton ops

Stop with Ctrl-C.
`, d.Server, d.GitHub, ghsim.DemoHeadSHA(1), ghsim.DemoHeadSHA(2), ghsim.DemoHeadSHA(3), d.Token, d.Server, d.Token)
}

// secretFlag returns the secret of --NAME, or of --NAME-file (the file's
// content, trimmed): a secret given on the command line shows in ps, one
// in a file does not. Giving both is an error.
func secretFlag(name, value, file string) (string, error) {
	if file == "" {
		return value, nil
	}
	if value != "" {
		return "", fmt.Errorf("give --%s or --%s-file, not both", name, name)
	}
	b, err := readSecretFile(name+"-file", file)
	if err != nil {
		return "", err
	}
	secret := strings.TrimSpace(string(b))
	if secret == "" {
		return "", fmt.Errorf("--%s-file %s is empty", name, file)
	}
	return secret, nil
}

// readSecretFile reads the file that --flag names. Its error names the
// path only when something exists there: a secret given where the path of
// its file belongs (the PEM itself in BATON_PRIVATE_KEY, as other GitHub
// Apps take it, or a seed in BATON_NATS_NKEY) would otherwise be printed
// to the terminal or the journal.
func readSecretFile(flag, path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		return b, nil
	}
	if _, serr := os.Stat(path); serr != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, fmt.Errorf("--%s: %w (it takes the path of a file holding the secret, not the secret itself)", flag, err)
	}
	return nil, fmt.Errorf("--%s: %w", flag, err)
}
