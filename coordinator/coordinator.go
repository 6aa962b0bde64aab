package coordinator

import (
	"cmp"
	"context"
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/sqlite"
)

// Config configures a Coordinator.
type Config struct {
	// DB is baton's database, where the leases are kept. Required unless
	// Store is set.
	DB *sqlite.DB
	// Store keeps the leases. Defaults to NewSQLiteStore(DB, Clock). A
	// Store given here must judge expiry by the same Clock.
	Store Store
	// Clock gives the time and the timers. Defaults to SystemClock().
	Clock Clock
	// Logger receives preemptions, losses and force-releases. Defaults to
	// zap.NewNop().
	Logger *zap.Logger
	// SafetyMargin is how long before a lease's expiry its holder stops
	// trusting it: AssertOwned fails once expiry − margin has passed,
	// counted from the moment the acquisition or renewal was asked for.
	// It covers the time between a check and the act it guards, and drift
	// between the holder's clock and the store's. Defaults to 2s; for each
	// lease it is at most a quarter of the lease's TTL.
	SafetyMargin time.Duration
	// ReconcileInterval is how often the loop Start runs calls Reconcile.
	// Defaults to 1 minute.
	ReconcileInterval time.Duration
	// Registerer receives the coordinator's metrics
	// (baton_coordinator_*). nil registers none.
	Registerer prometheus.Registerer
}

// DeadTTLs is how many TTLs a lease must have been expired before
// Reconcile force-releases it.
const DeadTTLs = 3

// Coordinator hands out fenced per-key leases. It is safe for concurrent
// use.
type Coordinator struct {
	store   Store
	clock   Clock
	log     *zap.Logger
	margin  time.Duration
	every   time.Duration
	metrics *metrics

	mu      sync.Mutex
	cancel  context.CancelFunc // of the reconcile loop, once started
	stopped bool
	wg      sync.WaitGroup
}

// New returns a coordinator. It fails on a config it cannot work with.
func New(cfg Config) (*Coordinator, error) {
	if cfg.Clock == nil {
		cfg.Clock = SystemClock()
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Store == nil {
		if cfg.DB == nil {
			return nil, errors.New("coordinator: Config.DB or Config.Store is required")
		}
		cfg.Store = NewSQLiteStore(cfg.DB, cfg.Clock)
	}
	if cfg.SafetyMargin < 0 || cfg.ReconcileInterval < 0 {
		return nil, errors.New("coordinator: SafetyMargin and ReconcileInterval must not be negative")
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	return &Coordinator{
		store:   cfg.Store,
		clock:   cfg.Clock,
		log:     cfg.Logger.With(zap.String(fieldSubsystem, "coordinator")),
		margin:  cmp.Or(cfg.SafetyMargin, 2*time.Second),
		every:   cmp.Or(cfg.ReconcileInterval, time.Minute),
		metrics: m,
	}, nil
}

// Clock returns the coordinator's clock.
func (c *Coordinator) Clock() Clock { return c.clock }

// Start starts the reconcile loop and returns. It fails if the coordinator
// was started or stopped before.
func (c *Coordinator) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cancel != nil || c.stopped {
		return errors.New("coordinator: Start called twice or after Stop")
	}
	loopCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	c.cancel = cancel
	c.wg.Add(1)
	go c.reconcileLoop(loopCtx)
	return nil
}

// Stop stops the reconcile loop and waits for it, or returns ctx's error
// if ctx ends first. It is safe before Start and safe twice. Leases and
// their keepalives belong to their holders and are not touched.
func (c *Coordinator) Stop(ctx context.Context) error {
	c.mu.Lock()
	c.stopped = true
	if c.cancel != nil {
		c.cancel()
	}
	c.mu.Unlock()
	return lifecycle.Wait(ctx, &c.wg)
}

// marginFor returns the safety margin of a lease of the given TTL.
func (c *Coordinator) marginFor(ttl time.Duration) time.Duration {
	return min(c.margin, ttl/4)
}
