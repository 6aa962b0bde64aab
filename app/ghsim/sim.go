package ghsim

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Config shapes a simulator. The zero value is usable: New fills every
// default.
type Config struct {
	// Addr is the TCP address to listen on. It must be a loopback address,
	// because the admin API has no authentication. Defaults to 127.0.0.1:0.
	Addr string

	// Now is the simulator's clock: token expiry, rate-limit windows and the
	// timestamps of objects and effects. App JWTs are the exception: they
	// are signed by clients with their wall clock, so they are checked
	// against JWTNow. Defaults to time.Now.
	Now func() time.Time
	// JWTNow is the clock App JWTs are checked against, GitHub's own as
	// the App's clients see it: set it off time.Now to simulate a
	// GitHub whose clock differs from the client's. Defaults to time.Now.
	JWTNow func() time.Time

	// AppID is the ID of the simulated GitHub App. Defaults to 1.
	AppID int64
	// AppName is the App's name (its slug is derived from it). Defaults to
	// "baton-sim".
	AppName string
	// PrivateKey is the App's RSA key, whose public half verifies App JWTs.
	// Defaults to a fresh 2048-bit key.
	PrivateKey *rsa.PrivateKey

	// TokenTTL is the lifetime of installation access tokens. Defaults to
	// 1h, as on GitHub.
	TokenTTL time.Duration

	// Limits are the rate limits. See Limits for their defaults; the
	// secondary limit is off unless SecondaryLimit is set.
	Limits Limits

	// WebhookURL receives the App's webhook deliveries. Empty means the App
	// has no active webhook and nothing is delivered (nor logged).
	WebhookURL string
	// WebhookSecret signs deliveries (X-Hub-Signature-256). Defaults to a
	// random secret.
	WebhookSecret string
	// WebhookTimeout bounds one delivery, as GitHub's 10 s does. Defaults to
	// 10s.
	WebhookTimeout time.Duration
	// MaxDeliveries is how many delivery attempts the deliveries log keeps,
	// payloads included: the newest; older ones are forgotten (listed no
	// more, redelivered no more), as GitHub forgets those older than three
	// days. It bounds the memory of a simulator that runs for long (baton
	// serve --dev). Defaults to 10,000; negative keeps every one.
	MaxDeliveries int

	// Seed seeds the random choices of probabilistic faults. Defaults to 1.
	Seed uint64
}

// Sim is a GitHub simulator listening on a loopback address. Create it with
// New, then Start it; Stop (or Close) shuts it down.
type Sim struct {
	cfg      Config
	now      func() time.Time
	listener net.Listener
	url      string
	server   *http.Server
	handler  http.Handler
	nextID   atomic.Int64
	reqSeq   atomic.Uint64

	// mu guards the registry: apps, installations, repositories, users.
	// It is held briefly and never across I/O; each repository's content
	// has its own lock (repo.mu), taken after mu when both are needed.
	mu            sync.RWMutex
	apps          map[int64]*app
	primaryApp    int64
	installations map[int64]*installation
	repos         map[string]*repo // by lower-case "owner/name"
	reposByID     map[int64]*repo
	movedRepos    map[string]*repo // former names, redirected: by lower-case "owner/name"
	users         map[string]*user // by lower-case login
	ciApp         *app

	tokens    tokenStore
	limits    limiter
	faults    faultSet
	effects   effectLog
	hooks     dispatcher
	manifests manifestStore
	// branchRenames remembers renamed branches (RenameBranch): GitHub
	// answers a branch's old name with a redirect to its new one.
	branchRenames sync.Map // branchRenameKey(repo, old) → new name

	lifeMu  sync.Mutex
	started bool
	stopped bool
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// New validates cfg, fills its defaults and listens on its address. The
// simulator answers only once Start is called.
func New(cfg Config) (*Sim, error) {
	cfg.Addr = cmp.Or(cfg.Addr, "127.0.0.1:0")
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.JWTNow == nil {
		cfg.JWTNow = time.Now
	}
	cfg.AppID = cmp.Or(cfg.AppID, 1)
	cfg.AppName = cmp.Or(cfg.AppName, "baton-sim")
	cfg.TokenTTL = cmp.Or(cfg.TokenTTL, time.Hour)
	cfg.WebhookTimeout = cmp.Or(cfg.WebhookTimeout, 10*time.Second)
	cfg.MaxDeliveries = cmp.Or(cfg.MaxDeliveries, 10000)
	cfg.Seed = cmp.Or(cfg.Seed, 1)
	if cfg.AppID < 0 {
		return nil, fmt.Errorf("ghsim: AppID %d is negative", cfg.AppID)
	}
	if cfg.TokenTTL < 0 || cfg.WebhookTimeout < 0 {
		return nil, errors.New("ghsim: TokenTTL and WebhookTimeout must be positive")
	}
	limits, err := cfg.Limits.withDefaults()
	if err != nil {
		return nil, err
	}
	cfg.Limits = limits
	if cfg.PrivateKey == nil {
		key, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			return nil, fmt.Errorf("ghsim: generate the App key: %w", err)
		}
		cfg.PrivateKey = key
	}
	if cfg.WebhookSecret == "" {
		cfg.WebhookSecret = randomHex(20)
	}
	host, _, err := net.SplitHostPort(cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("ghsim: address %q: %w", cfg.Addr, err)
	}
	if !isLoopbackHost(host) {
		return nil, fmt.Errorf("ghsim: address %q is not a loopback address (the admin API has no authentication)", cfg.Addr)
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("ghsim: listen: %w", err)
	}

	s := &Sim{
		cfg:           cfg,
		now:           cfg.Now,
		listener:      ln,
		url:           "http://" + ln.Addr().String(),
		apps:          map[int64]*app{},
		installations: map[int64]*installation{},
		repos:         map[string]*repo{},
		reposByID:     map[int64]*repo{},
		movedRepos:    map[string]*repo{},
		users:         map[string]*user{},
	}
	s.nextID.Store(1000)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.tokens.init()
	s.limits.init(cfg.Limits)
	s.faults.init(cfg.Seed)
	s.hooks.init(s)
	s.manifests.init()

	owner := s.userLocked("octo", "Organization")
	primary := s.newApp(cfg.AppID, cfg.AppName, cfg.PrivateKey, owner)
	primary.webhookURL = cfg.WebhookURL
	primary.webhookSecret = cfg.WebhookSecret
	s.apps[primary.id] = primary
	s.primaryApp = primary.id
	s.ciApp = s.newApp(s.newID(), "sim-ci", nil, owner)

	s.handler = s.routes()
	s.server = &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return s.ctx },
	}
	return s, nil
}

// Start serves HTTP and starts delivering webhooks. It returns once the
// simulator answers. Starting twice is an error.
func (s *Sim) Start(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.lifeMu.Lock()
	defer s.lifeMu.Unlock()
	if s.started || s.stopped {
		return errors.New("ghsim: already started or stopped")
	}
	s.started = true
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		_ = s.server.Serve(s.listener)
	}()
	s.hooks.start()
	return nil
}

// Stop shuts the simulator down: it stops accepting requests, abandons
// pending webhook deliveries, and waits for its goroutines. It returns
// ctx.Err() if they do not finish in time. Stop is safe before Start and
// safe twice.
func (s *Sim) Stop(ctx context.Context) error {
	s.lifeMu.Lock()
	first := !s.stopped
	s.stopped = true
	started := s.started
	s.lifeMu.Unlock()
	if first {
		s.cancel()
		if started {
			_ = s.server.Shutdown(ctx)
		} else {
			_ = s.listener.Close()
		}
	}
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		s.hooks.closeIdle()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		_ = s.server.Close()
		return ctx.Err()
	}
}

// Close stops the simulator, waiting at most 10 seconds.
func (s *Sim) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return s.Stop(ctx)
}

// URL is the simulator's base URL (for REST, the admin API and the
// github.com pages alike), e.g. "http://127.0.0.1:41234", without a
// trailing slash. Clients may also use URL()+"/api/v3" as GitHub
// Enterprise Server has it.
func (s *Sim) URL() string { return s.url }

// Handler is the simulator's HTTP handler, for serving it elsewhere too.
func (s *Sim) Handler() http.Handler { return s.handler }

// newID returns a fresh ID for any object (IDs are unique across kinds).
func (s *Sim) newID() int64 { return s.nextID.Add(1) }

// newRequestID returns a fresh X-GitHub-Request-Id shaped like GitHub's:
// "5E1A:%04X:%06X:%06X:%08X" of the sequence number's three parts and the
// time, each of which fits its width. Every request makes one, so it is
// written without fmt and its boxing of each argument.
func (s *Sim) newRequestID() string {
	n := s.reqSeq.Add(1)
	b := make([]byte, 0, len("5E1A:0000:000000:000000:00000000"))
	b = append(b, "5E1A:"...)
	b = appendUpperHex(b, n>>40&0xffff, 4)
	b = append(b, ':')
	b = appendUpperHex(b, n>>20&0xfffff, 6)
	b = append(b, ':')
	b = appendUpperHex(b, n&0xfffff, 6)
	b = append(b, ':')
	b = appendUpperHex(b, uint64(uint32(s.now().Unix())), 8)
	return string(b)
}

// appendUpperHex appends v in upper-case hex, zero-padded to width digits;
// v must fit in width digits.
func appendUpperHex(b []byte, v uint64, width int) []byte {
	const digits = "0123456789ABCDEF"
	for i := width - 1; i >= 0; i-- {
		b = append(b, digits[v>>(4*uint(i))&0xf])
	}
	return b
}

func isLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
