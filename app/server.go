package app

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/google/go-github/v62/github"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/zap"

	"github.com/baton-dev/baton/app/ghsim"
	"github.com/baton-dev/baton/coordinator"
	"github.com/baton-dev/baton/executor"
	"github.com/baton-dev/baton/internal/sqlite"
	"github.com/baton-dev/baton/queue"
	"github.com/baton-dev/baton/schema"
)

// DatabaseFile is the name of baton's SQLite database in the data
// directory. `baton token` opens the same file.
const DatabaseFile = "baton.db"

// Config configures a Server: everything `baton serve` has a flag for.
type Config struct {
	// DataDir holds the database, the embedded JetStream store and the App
	// credentials. Defaults to ./baton-data.
	DataDir string
	// Listen is the HTTP address. Defaults to 127.0.0.1:8080.
	Listen string
	// PublicURL is where GitHub and browsers reach baton (the setup flow
	// and the App's webhook URL). Defaults to http://<Listen>.
	PublicURL string

	// GitHubURL is GitHub's REST API base. Defaults to
	// https://api.github.com/ (GitHub Enterprise Server:
	// https://HOST/api/v3/).
	GitHubURL string
	// GitHubWebURL is GitHub's web address, for the setup flow. Defaults
	// to https://HOST when GitHubURL is a GitHub Enterprise Server's
	// (https://HOST/api/v3/), else to https://github.com.
	GitHubWebURL string
	// AppID, PrivateKey and WebhookSecret are the GitHub App's
	// credentials. When AppID is zero they are read from the data
	// directory (stored by the setup flow), a PrivateKey or WebhookSecret
	// given taking the place of the stored one (a rotation); if there are
	// none, baton serves the setup page and runs no operations until
	// restarted as the App.
	AppID         int64
	PrivateKey    []byte
	WebhookSecret string
	// PreviousWebhookSecret is also accepted while rotating the secret.
	PreviousWebhookSecret string
	// Pacing spaces each installation's mutating requests as GitHub asks
	// of integrators. Defaults to on, and to off with Dev; a value given is
	// honoured with Dev too (to try pacing against the simulator).
	Pacing *bool

	// Queue configures JetStream (embedded by default). DataDir and
	// Logger are filled in.
	Queue queue.Config
	// Workers is how many operations run at once. Defaults to 32.
	Workers int
	// AckWait is the queue's ack wait. Defaults to 60s; it must exceed
	// LeaseTTL.
	AckWait time.Duration
	// LeaseTTL is the TTL of the lease an operation holds on its resource.
	// Defaults to 30s.
	LeaseTTL time.Duration
	// ReconcileInterval is how often the queue's reconciler looks for
	// operations the stream should hold but does not (a publish that
	// failed or was lost) and publishes them again. Defaults to the
	// queue's default (30s).
	ReconcileInterval time.Duration
	// ReconcileMinAge is how long after its last dispatch an unfinished
	// operation becomes a candidate of the reconciler. Defaults to the
	// queue's default (1m).
	ReconcileMinAge time.Duration
	// Synchronous is SQLite's synchronous setting. Defaults to FULL.
	Synchronous string
	// ShutdownTimeout bounds the graceful shutdown. Defaults to 30s.
	ShutdownTimeout time.Duration
	// OperationRetention is how long the record of a finished operation
	// (succeeded, failed or cancelled) is kept after it finished; older
	// ones are deleted at start and every hour, and their idempotency
	// keys may then be used again. Unfinished operations are kept
	// whatever their age. The lease history of a key nobody has held for
	// as long goes too. Defaults to DefaultOperationRetention (30 days);
	// negative keeps records forever; at least MinOperationRetention.
	OperationRetention time.Duration

	// MergeQueue configures the merge queue: its label, the checks its
	// gate requires, its merge method and its gate timeout. Zero values
	// take the queue's defaults; NewServer refuses settings the queue
	// would.
	MergeQueue MergeQueueConfig

	// Dev starts a GitHub simulator in this process on a loopback port,
	// seeded with installation 1 and octo/demo, and runs baton as its App
	// with pacing off. Start then creates an admin token and writes
	// <data>/dev.json. Listen must then be a loopback address.
	Dev bool

	// Logger defaults to zap.NewNop().
	Logger *zap.Logger
}

// DevInfo is what --dev writes to <data>/dev.json: how to reach the
// server and its simulated GitHub.
type DevInfo struct {
	Server        string `json:"server"`
	Token         string `json:"token"`
	GitHub        string `json:"github"`
	WebhookSecret string `json:"webhookSecret"`
}

// Server is baton: the store, the coordinator, the queue, the executor,
// the webhook machinery and the HTTP API, wired together.
type Server struct {
	cfg Config
	log *zap.Logger
	reg *prometheus.Registry

	db         *sqlite.DB
	coord      *coordinator.Coordinator
	store      *executor.SQLiteStore
	broker     *queue.Broker
	exec       *executor.Executor
	consumer   *queue.Consumer
	reconciler *queue.Reconciler
	gh         *executor.GitHubClients
	tokens     *TokenStore
	ledger     *DeliveryLedger
	dispatcher *EventDispatcher
	installs   *Installations
	recovery   *Recovery
	api        *API
	http       *http.Server
	listener   net.Listener
	sim        *ghsim.Sim
	dev        *DevInfo

	// finished are told of every operation that ends (the merge queue's
	// OnOperationFinished); startMergeQueue adds to them before the
	// consumer runs operations.
	finished []func(schema.Record)

	mu      sync.Mutex
	started bool
	stopped bool
	serveWG sync.WaitGroup
	stops   []func(context.Context) error
}

// NewServer checks cfg and fills its defaults. Nothing is opened until
// Start.
func NewServer(cfg Config) (*Server, error) {
	cfg.DataDir = cmp.Or(cfg.DataDir, "./baton-data")
	cfg.Listen = cmp.Or(cfg.Listen, "127.0.0.1:8080")
	cfg.Workers = cmp.Or(cfg.Workers, 32)
	cfg.AckWait = cmp.Or(cfg.AckWait, 60*time.Second)
	cfg.LeaseTTL = cmp.Or(cfg.LeaseTTL, 30*time.Second)
	cfg.ShutdownTimeout = cmp.Or(cfg.ShutdownTimeout, 30*time.Second)
	cfg.OperationRetention = cmp.Or(cfg.OperationRetention, DefaultOperationRetention)
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if err := cfg.MergeQueue.check(); err != nil {
		return nil, err
	}
	if cfg.Workers < 1 || cfg.Workers > 4096 {
		return nil, fmt.Errorf("workers must be between 1 and 4096, not %d", cfg.Workers)
	}
	if cfg.ReconcileInterval < 0 || cfg.ReconcileMinAge < 0 {
		return nil, errors.New("the reconciler's interval and minimum age must not be negative")
	}
	if cfg.OperationRetention >= 0 && cfg.OperationRetention < MinOperationRetention {
		return nil, fmt.Errorf("the operation retention must be at least %v (GitHub redelivers webhooks up to three days back), not %v",
			MinOperationRetention, cfg.OperationRetention)
	}
	if cfg.AckWait <= cfg.LeaseTTL {
		return nil, fmt.Errorf("the queue's ack wait (%v) must exceed the lease TTL (%v)", cfg.AckWait, cfg.LeaseTTL)
	}
	if cfg.Dev && (cfg.AppID != 0 || cfg.GitHubURL != "") {
		return nil, errors.New("--dev runs its own simulated GitHub: do not give App credentials or a GitHub URL with it")
	}
	if cfg.AppID < 0 {
		return nil, errors.New("the App ID must be positive")
	}
	if cfg.AppID > 0 && (len(cfg.PrivateKey) == 0 || cfg.WebhookSecret == "") {
		return nil, errors.New("an App ID needs the App's private key and webhook secret")
	}
	host, _, err := net.SplitHostPort(cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen address %q: %w", cfg.Listen, err)
	}
	if cfg.Dev && !LoopbackHost(host) {
		// --dev prints an admin token and writes it to dev.json: it is
		// for one machine, and promises nothing beyond the loopback
		// interface.
		return nil, fmt.Errorf("--dev listens on the loopback interface only (127.0.0.1, ::1 or localhost), not %q", cfg.Listen)
	}
	return &Server{cfg: cfg, log: cfg.Logger}, nil
}

// LoopbackHost reports whether a listen address's host is a loopback
// interface: "localhost" or a loopback IP (an empty host is every
// interface).
func LoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Start opens everything and serves HTTP. It returns once the server
// accepts requests; on an error, what it started is stopped again.
func (s *Server) Start(ctx context.Context) (err error) {
	s.mu.Lock()
	if s.started {
		s.mu.Unlock()
		return errors.New("server already started")
	}
	s.started = true
	s.mu.Unlock()
	defer func() {
		if err != nil {
			sctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
			defer cancel()
			_ = s.stopAll(sctx)
		}
	}()
	cfg := &s.cfg
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	unlock, err := lockDataDir(cfg.DataDir)
	if err != nil {
		return err
	}
	s.onStop(func(context.Context) error { return unlock() })
	// Listen next: a taken address fails before anything else opens.
	s.listener, err = net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Listen, err)
	}
	s.onStop(func(context.Context) error {
		if s.http == nil {
			return s.listener.Close()
		}
		return nil
	})
	s.reg = prometheus.NewRegistry()
	s.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	// The store.
	if err := checkDevDataDir(cfg.DataDir, cfg.Dev); err != nil {
		return err
	}
	dbPath := filepath.Join(cfg.DataDir, DatabaseFile)
	if err := checkWritable(dbPath); err != nil {
		return err
	}
	s.db, err = sqlite.Open(ctx, dbPath, sqlite.Options{Synchronous: cfg.Synchronous, Logger: s.log})
	if err != nil {
		// Name the file: "file is not a database" or "schema version
		// newer" is about this one, which the operator may restore.
		return fmt.Errorf("database %s: %w", dbPath, err)
	}
	s.onStop(func(context.Context) error { return s.db.Close() })
	s.coord, err = coordinator.New(coordinator.Config{DB: s.db, Logger: s.log, Registerer: s.reg})
	if err != nil {
		return err
	}
	if err := s.coord.Start(ctx); err != nil {
		return err
	}
	s.onStop(s.coord.Stop)
	s.store = executor.NewSQLiteStore(s.db, nil)

	// GitHub: the simulator in --dev, given credentials, or stored ones.
	if err := s.github(ctx); err != nil {
		return err
	}

	// The queue.
	qcfg := cfg.Queue
	qcfg.DataDir, qcfg.Logger = cfg.DataDir, s.log
	s.broker, err = queue.New(qcfg)
	if err != nil {
		return err
	}
	if err := s.broker.Start(ctx); err != nil {
		return s.queueStartErr(err)
	}
	s.onStop(s.broker.Stop)
	s.reg.MustRegister(newQueueCollector(s.broker))

	// Installations and webhooks.
	installsCfg := InstallationsConfig{DB: s.db, Logger: s.log}
	if s.gh != nil {
		installsCfg.App, installsCfg.Installation, installsCfg.OnChange = s.gh.App(), s.gh.Installation, s.gh.Forget
	}
	s.installs, err = NewInstallations(installsCfg)
	if err != nil {
		return err
	}
	s.tokens, err = NewTokenStore(s.db, TokenStoreConfig{Logger: s.log, Accounts: s.installs})
	if err != nil {
		return err
	}
	s.ledger, err = NewDeliveryLedger(s.db, nil)
	if err != nil {
		return err
	}
	s.dispatcher, err = NewEventDispatcher(EventDispatcherConfig{Ledger: s.ledger, Logger: s.log, Registerer: s.reg})
	if err != nil {
		return err
	}
	if err := s.dispatcher.Subscribe("installations", s.installs); err != nil {
		return err
	}

	// The executor.
	pacing := cfg.Pacing == nil || *cfg.Pacing
	if cfg.Dev && cfg.Pacing == nil {
		pacing = false
	}
	s.exec, err = executor.New(executor.Config{
		Store:         s.store,
		Dispatcher:    s.broker,
		Leases:        s.coord,
		GitHub:        s.gh,
		Installations: s.installs,
		LeaseTTL:      cfg.LeaseTTL,
		Pacing:        executor.PacingConfig{Disabled: !pacing},
		Logger:        s.log,
		Registerer:    s.reg,
		OnFinished:    s.onFinished,
	})
	if err != nil {
		return err
	}
	if err := s.exec.Start(ctx); err != nil {
		return err
	}
	s.onStop(s.exec.Stop)
	s.startPruner()

	// The HTTP API.
	leases, err := NewCoordinatorLeases(s.coord)
	if err != nil {
		return err
	}
	s.api, err = NewAPI(APIConfig{
		Operations:    s.exec,
		Leases:        leases,
		DeadLetters:   s.broker,
		Installations: s.installs,
		Tokens:        s.tokens,
		Readiness:     s.readiness(),
		Gatherer:      s.reg,
		Registerer:    s.reg,
		Logger:        s.log,
	})
	if err != nil {
		return err
	}
	if s.gh != nil {
		recv, err := NewWebhookReceiver(WebhookConfig{Ledger: s.ledger, Secret: cfg.WebhookSecret,
			PreviousSecret: cfg.PreviousWebhookSecret, Replay: s.dispatcher.Replay, Logger: s.log, Registerer: s.reg})
		if err != nil {
			return err
		}
		s.api.Handle("/webhooks/github", recv) // every method: the receiver answers 405 itself
	} else {
		setup, err := NewSetup(SetupConfig{DataDir: cfg.DataDir, PublicURL: s.publicURL(), GitHubWebURL: cfg.GitHubWebURL,
			GitHubAPIURL: cfg.GitHubURL, Logger: s.log,
			OnConfigured: func(context.Context, AppCredentials) error { return ErrRestartRequired }})
		if err != nil {
			return err
		}
		s.api.Handle("/setup", setup)
		s.api.Handle("/setup/", setup)
		s.log.Warn("no GitHub App credentials: serving the setup page; operations wait until baton runs as the App",
			zap.String("event", "setup_required"), zap.String("url", s.publicURL()+"/setup"))
	}

	// Workers: only with GitHub to work on.
	if s.gh != nil {
		if err := s.startMergeQueue(ctx); err != nil {
			return err
		}
		if err := s.installs.Start(ctx); err != nil {
			return err
		}
		s.onStop(s.installs.Stop)
		if err := s.dispatcher.Start(ctx); err != nil {
			return err
		}
		s.onStop(s.dispatcher.Stop)
		s.recovery, err = NewRecovery(RecoveryConfig{Ledger: s.ledger, App: s.gh.App(), Logger: s.log, Registerer: s.reg})
		if err != nil {
			return err
		}
		if !cfg.Dev {
			// The simulator's deliveries log is recovered from too, but in
			// --dev nothing fails at "GitHub" unless asked to.
			if err := s.recovery.Start(ctx); err != nil {
				return err
			}
			s.onStop(s.recovery.Stop)
		}
		// Before the consumer takes any lease: the operations a previous
		// process died carrying out run again at once, not after their
		// messages' ack wait. (Should that fail, they still run then.)
		if _, err := s.exec.ResumeOrphans(ctx); err != nil {
			s.log.Warn("the operations of the previous process were not resumed at once; they run after the queue's ack wait",
				zap.String("event", "resume_orphans_failed"), zap.Error(err))
		}
		s.consumer, err = queue.NewConsumer(s.broker, queue.ConsumerConfig{
			Handler:     QueueHandler(s.exec),
			Concurrency: cfg.Workers,
			AckWait:     cfg.AckWait,
			Logger:      s.log,
		})
		if err != nil {
			return err
		}
		if err := s.consumer.Start(ctx); err != nil {
			return s.queueStartErr(err)
		}
		s.onStop(s.consumer.Stop)
	}
	s.reconciler, err = queue.NewReconciler(s.broker, queue.ReconcilerConfig{
		Candidates:     s.exec.DispatchCandidates,
		MarkDispatched: s.exec.MarkDispatched,
		Interval:       cfg.ReconcileInterval,
		MinAge:         cfg.ReconcileMinAge,
		Logger:         s.log,
	})
	if err != nil {
		return err
	}
	if err := s.reconciler.Start(ctx); err != nil {
		return err
	}
	s.onStop(s.reconciler.Stop)

	// Serve.
	s.http = &http.Server{Handler: s.api, ErrorLog: zap.NewStdLog(s.log.With(zap.String("subsystem", "http")))}
	SetAPIServerTimeouts(s.http)
	s.serveWG.Add(1)
	go func() {
		defer s.serveWG.Done()
		if err := s.http.Serve(s.listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("http server stopped", zap.Error(err))
		}
	}()
	if cfg.Dev {
		if err := s.startDev(ctx); err != nil {
			return err
		}
	}
	s.log.Info("baton is serving", zap.String("event", "serving"), zap.String("addr", s.Addr()),
		zap.Bool("github", s.gh != nil), zap.Bool("pacing", pacing), zap.Int("workers", cfg.Workers))
	return nil
}

// checkWritable refuses a database this process cannot write (a copy
// restored as root into the directory of a server that runs as its own
// user, say): SQLite would open it read-only without a word, and baton
// would serve while every write failed.
func checkWritable(dbPath string) error {
	for _, p := range []string{dbPath, dbPath + "-wal", dbPath + "-shm"} {
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("database %s: baton cannot write it (%w): give its files to the user baton runs as", dbPath, err)
		}
		f.Close()
	}
	return nil
}

// github sets up the GitHub clients: the in-process simulator (--dev), the
// credentials given, or those the setup flow stored. With none, s.gh stays
// nil.
func (s *Server) github(ctx context.Context) error {
	cfg := &s.cfg
	if cfg.Dev {
		sim, err := ghsim.New(ghsim.Config{Limits: ghsim.Limits{PrimaryLimit: -1}})
		if err != nil {
			return err
		}
		if err := sim.Start(ctx); err != nil {
			return err
		}
		s.sim = sim
		s.onStop(sim.Stop)
		if err := sim.SeedDemo(); err != nil {
			return err
		}
		cfg.GitHubURL, cfg.AppID, cfg.PrivateKey, cfg.WebhookSecret = sim.URL(), sim.AppID(), sim.PrivateKeyPEM(), sim.WebhookSecret()
	}
	if cfg.AppID == 0 {
		creds, ok, err := LoadAppCredentials(cfg.DataDir)
		if err != nil {
			return err
		}
		if !ok {
			return nil
		}
		// A key or webhook secret given (a rotation: GitHub made a new
		// one) is used rather than the stored one, which is only their
		// default.
		cfg.AppID = creds.AppID
		if len(cfg.PrivateKey) == 0 {
			cfg.PrivateKey = creds.PrivateKey
		}
		cfg.WebhookSecret = cmp.Or(cfg.WebhookSecret, creds.WebhookSecret)
		cfg.GitHubURL = cmp.Or(cfg.GitHubURL, creds.APIURL)
	}
	gh, err := executor.NewGitHubClients(executor.GitHubConfig{BaseURL: cfg.GitHubURL, AppID: cfg.AppID, PrivateKey: cfg.PrivateKey})
	if err != nil {
		return err
	}
	s.gh = gh
	s.onStop(func(context.Context) error { gh.Close(); return nil })
	if cfg.Dev {
		return nil
	}
	return s.checkApp(ctx)
}

// appCheckTimeout bounds the start-up check of the App's credentials.
const appCheckTimeout = 15 * time.Second

// checkApp asks GitHub, as the App, who the App is (GET /app) before
// anything runs as it. An answer that says the credentials or the URL are
// wrong (401: another App's ID or key, or a clock more than a day off,
// beyond what the App's transport learns of GitHub's; 404 or a body
// that is not an App: not a GitHub REST API) refuses the start: every
// call would fail the same way, while /readyz said ready. GitHub not
// answering (unreachable, 5xx, limited) does not: operations wait in the
// queue until it is back, and that is logged once here.
func (s *Server) checkApp(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, appCheckTimeout)
	defer cancel()
	base := s.gh.App().BaseURL.String()
	a, resp, err := s.gh.App().Apps.Get(cctx, "")
	status := 0
	if resp != nil {
		status = resp.StatusCode
	}
	var ghErr *github.ErrorResponse
	msg := ""
	if errors.As(err, &ghErr) {
		msg = ghErr.Message
	}
	switch {
	case err == nil && a.GetID() != 0 && a.GetID() != s.cfg.AppID:
		return fmt.Errorf("GitHub at %s answers as App %d, not App %d: check --app-id and --private-key", base, a.GetID(), s.cfg.AppID)
	case err == nil && a.GetID() != 0:
		return nil
	case status == http.StatusUnauthorized:
		return fmt.Errorf("GitHub at %s refused the credentials of App %d (401 %s): check --app-id, --private-key and this machine's clock",
			base, s.cfg.AppID, msg)
	case status >= 300 && status < 400:
		// Followed, the redirect would take the App's tokens to another
		// host (an http:// URL sent to https, a proxy), and baton does
		// not follow it (executor.GitHubClients).
		return fmt.Errorf("GitHub at %s answers GET /app with a redirect (HTTP %d) to %q: give the URL it redirects to as --github-url",
			base, status, resp.Header.Get("Location"))
	case status == http.StatusNotFound || (status >= 200 && status < 300):
		return fmt.Errorf("%s does not answer GET /app as a GitHub REST API (HTTP %d): check --github-url (GitHub Enterprise Server: https://HOST/api/v3/)",
			base, status)
	}
	if ctx.Err() != nil {
		return ctx.Err() // the start was called off (a signal)
	}
	s.log.Warn("could not check the App's credentials with GitHub; starting anyway, operations wait until GitHub answers",
		zap.String("event", "github_check_failed"), zap.String("github", base), zap.Int("status", status), zap.Error(err))
	return nil
}

// queueStartErr adds to an error of JetStream's while the queue starts
// on the embedded server (a stream or consumer it cannot load: files
// damaged) what the operator can do: nothing in that store is the only
// copy of an operation, which the database holds.
func (s *Server) queueStartErr(err error) error {
	var apiErr *jetstream.APIError
	if s.cfg.Queue.URL != "" || !errors.As(err, &apiErr) {
		return err
	}
	return fmt.Errorf("%w: the embedded JetStream store %s may be damaged; with baton stopped, move it aside and start again "+
		"(the database holds every operation: unfinished ones are published again; see deploy/README.md, \"When the data directory is damaged\")", err, queue.StoreDir(s.cfg.DataDir))
}

// QueueHandler is the queue's handler that runs operations on exec:
// Process, and its result as the queue's. The server's consumer runs it;
// so can a stack wired by hand (tests, benchmarks).
func QueueHandler(exec *executor.Executor) queue.Handler {
	return func(ctx context.Context, id string) queue.Result {
		r := exec.Process(ctx, id)
		switch r.Kind {
		case executor.ResultDone:
			return queue.Done()
		case executor.ResultRetry:
			return queue.RetryAfter(r.Delay)
		}
		return queue.Failed(r.Err)
	}
}

// onFinished passes terminal operations to the features that want them.
func (s *Server) onFinished(rec schema.Record) {
	for _, f := range s.finished {
		f(rec)
	}
}

func (s *Server) readiness() []ReadinessCheck {
	return []ReadinessCheck{
		{Name: "store", Check: s.db.Ready},
		{Name: "queue", Check: func(context.Context) error { return s.broker.Ready() }},
		{Name: "consumers", Check: func(context.Context) error {
			if s.consumer == nil {
				return errors.New("no GitHub App configured: operations are not run (see /setup)")
			}
			return s.consumer.Ready()
		}},
	}
}

// Addr is the address the HTTP server listens on (useful with port 0).
func (s *Server) Addr() string {
	if s.listener == nil {
		return s.cfg.Listen
	}
	return s.listener.Addr().String()
}

// URL is the server's base URL on its listening address.
func (s *Server) URL() string { return "http://" + s.Addr() }

func (s *Server) publicURL() string {
	if s.cfg.PublicURL != "" {
		return strings.TrimRight(s.cfg.PublicURL, "/")
	}
	return "http://" + s.cfg.Listen
}

// Tokens is the server's token store.
func (s *Server) Tokens() *TokenStore { return s.tokens }

// Executor is the server's executor.
func (s *Server) Executor() *executor.Executor { return s.exec }

// Dev returns what --dev set up (nil without --dev).
func (s *Server) Dev() *DevInfo { return s.dev }

// Simulator returns the in-process simulator of --dev (nil otherwise).
func (s *Server) Simulator() *ghsim.Sim { return s.sim }

func (s *Server) onStop(f func(context.Context) error) { s.stops = append(s.stops, f) }

// Stop shuts down gracefully: it stops accepting requests, lets running
// operations finish or go back to the queue (releasing their leases) up to
// ctx's deadline, and closes everything. Safe before Start and twice.
func (s *Server) Stop(ctx context.Context) error {
	s.mu.Lock()
	if !s.started || s.stopped {
		s.mu.Unlock()
		return nil
	}
	s.stopped = true
	s.mu.Unlock()
	return s.stopAll(ctx)
}

// stopAll stops the parts in the reverse of the order they started. When
// ctx's deadline passes (or ctx is cancelled: `baton serve` signalled
// again), what was still running is cut short: the
// HTTP requests still open are closed, the queue's workers are cancelled
// (a call to GitHub in flight is interrupted, its operation released and
// sent back to the queue, to be probed when it runs again). That is the
// deadline doing its job, not a failure: it is logged, not returned. The
// parts left to close then get a short bound each of their own, so that
// the queue and the database still close cleanly.
func (s *Server) stopAll(ctx context.Context) error {
	var errs []error
	if s.http != nil {
		s.api.EndWaits()
		if err := s.http.Shutdown(ctx); err != nil {
			if ctx.Err() == nil {
				errs = append(errs, fmt.Errorf("http: %w", err))
			}
			_ = s.http.Close() // the requests still running are cut
		}
		s.serveWG.Wait()
	}
	for i := len(s.stops) - 1; i >= 0; i-- {
		if ctx.Err() != nil {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopAfterDeadline)
			if err := s.stops[i](sctx); err != nil {
				errs = append(errs, err)
			}
			cancel()
			continue
		}
		if err := s.stops[i](ctx); err != nil && !(ctx.Err() != nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled))) {
			errs = append(errs, err)
		}
	}
	s.stops = nil
	if ctx.Err() != nil {
		s.log.Warn("the shutdown deadline passed: work still running was cut short and goes back to the queue",
			zap.String("event", "shutdown_deadline"))
	}
	return errors.Join(errs...)
}

// stopAfterDeadline bounds each part's stop once the shutdown deadline has
// passed.
const stopAfterDeadline = 5 * time.Second
