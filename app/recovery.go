package app

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/google/go-github/v62/github"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/baton-dev/baton/executor"
	"github.com/baton-dev/baton/internal/lifecycle"
)

// RecoveryConfig configures the missed-delivery recovery loop.
type RecoveryConfig struct {
	// Ledger tells which deliveries baton has. Required.
	Ledger *DeliveryLedger
	// App is a client authenticated as the App (JWT), for
	// GET /app/hook/deliveries and POST /app/hook/deliveries/{id}/attempts
	// (executor.GitHubClients.App). Required.
	App *github.Client
	// Interval between passes; the first runs at Start. Defaults to 10m.
	Interval time.Duration
	// Window is how far back deliveries are looked at. GitHub keeps them
	// three days, and so is the default (72h).
	Window time.Duration
	// MaxRedeliveries is how many redeliveries of one delivery (GitHub's
	// log shows them) recovery requests before it leaves the delivery
	// alone: one that keeps failing (a wrong secret, say) is not asked for
	// forever. Defaults to 3.
	MaxRedeliveries int
	// RememberFor is how long recovery remembers a redelivery it
	// requested, so that a pass does not request again one still in
	// flight. Defaults to 1h.
	RememberFor time.Duration
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
	// Logger defaults to zap.NewNop().
	Logger *zap.Logger
	// Registerer receives baton_webhook_deliveries_recovered_total; nil
	// registers none.
	Registerer prometheus.Registerer
}

// Recovery finds the webhook deliveries GitHub could not make (baton was
// down, unreachable, or answered an error) and asks GitHub to make them
// again: GitHub never redelivers by itself. Each pass lists the App's
// hook deliveries of the last Window, newest first, groups the attempts by
// delivery GUID, and requests one redelivery of each GUID that has no
// successful attempt and is not in the ledger, oldest first; a request
// GitHub refuses for a rate limit ends the pass.
type Recovery struct {
	cfg       RecoveryConfig
	log       *zap.Logger
	recovered prometheus.Counter
	pageSize  int // of GitHub's deliveries log; tests make it small

	mu        sync.Mutex           // guards requested; one pass at a time
	requested map[string]time.Time // GUID → when its redelivery was requested

	lifeMu  sync.Mutex
	started bool
	stopped bool
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// NewRecovery validates cfg and returns the recovery loop.
func NewRecovery(cfg RecoveryConfig) (*Recovery, error) {
	cfg.Interval = cmp.Or(cfg.Interval, 10*time.Minute)
	cfg.Window = cmp.Or(cfg.Window, 72*time.Hour)
	cfg.MaxRedeliveries = cmp.Or(cfg.MaxRedeliveries, 3)
	cfg.RememberFor = cmp.Or(cfg.RememberFor, time.Hour)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	var errs []error
	if cfg.Ledger == nil || cfg.App == nil {
		errs = append(errs, errors.New("both Ledger and App are required"))
	}
	if cfg.Interval <= 0 || cfg.Window <= 0 || cfg.RememberFor <= 0 {
		errs = append(errs, errors.New("want positive Interval, Window and RememberFor"))
	}
	if cfg.MaxRedeliveries < 1 {
		errs = append(errs, fmt.Errorf("want MaxRedeliveries >= 1, not %d", cfg.MaxRedeliveries))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("app: invalid recovery config: %w", errors.Join(errs...))
	}
	r := &Recovery{
		cfg:       cfg,
		log:       cfg.Logger.With(zap.String(logKeySubsystem, "recovery")),
		requested: map[string]time.Time{},
		pageSize:  100,
		recovered: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "baton_webhook_deliveries_recovered_total",
			Help: "Webhook deliveries GitHub could not deliver to baton (missed, not the state=\"failed\" of baton_webhook_deliveries_handled_total) whose redelivery baton requested.",
		}),
	}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(r.recovered); err != nil {
			return nil, fmt.Errorf("app: register recovery metrics: %w", err)
		}
	}
	return r, nil
}

// Start runs a first pass now and then one every Interval, in the
// background; it returns at once.
func (r *Recovery) Start(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r.lifeMu.Lock()
	defer r.lifeMu.Unlock()
	if r.started || r.stopped {
		return errors.New("app: recovery already started or stopped")
	}
	r.started = true
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r.cancel = cancel
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		t := time.NewTicker(r.cfg.Interval)
		defer t.Stop()
		for {
			if _, err := r.Recover(runCtx); err != nil && runCtx.Err() == nil {
				r.log.Warn("missed-delivery recovery pass failed", zap.String(logKeyEvent, "recovery.failed"), zap.Error(err))
			}
			select {
			case <-runCtx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return nil
}

// Stop stops the loop, waiting at most until ctx ends. It is safe before
// Start and twice.
func (r *Recovery) Stop(ctx context.Context) error {
	r.lifeMu.Lock()
	r.stopped = true
	if r.cancel != nil {
		r.cancel()
	}
	r.lifeMu.Unlock()
	return lifecycle.Wait(ctx, &r.wg)
}

// RecoveryReport says what one pass did.
type RecoveryReport struct {
	// Attempts is the number of delivery attempts listed in the window.
	Attempts int `json:"attempts"`
	// Deliveries is the number of distinct delivery GUIDs among them.
	Deliveries int `json:"deliveries"`
	// Failed is the number of GUIDs without a successful attempt.
	Failed int `json:"failed"`
	// Redelivered lists the GUIDs whose redelivery was requested.
	Redelivered []string `json:"redelivered"`
	// Skipped counts failed GUIDs left alone: in the ledger already,
	// requested recently, redelivered MaxRedeliveries times, or left for
	// the next pass because GitHub refused a redelivery for a rate limit.
	Skipped int `json:"skipped"`
}

// guidAttempts is what a pass learns of one GUID.
type guidAttempts struct {
	guid         string
	ok           bool
	newestID     int64 // the attempt to redeliver
	redeliveries int
}

// Recover runs one pass now. Passes do not overlap: a call waits for the
// one in progress.
func (r *Recovery) Recover(ctx context.Context) (RecoveryReport, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var rep RecoveryReport
	now := r.cfg.Now()
	since := now.Add(-r.cfg.Window)
	for guid, at := range r.requested {
		if now.Sub(at) > r.cfg.RememberFor {
			delete(r.requested, guid)
		}
	}

	byGUID := map[string]*guidAttempts{}
	var order []*guidAttempts // newest first
	opts := &github.ListCursorOptions{PerPage: r.pageSize}
list:
	for {
		page, resp, err := r.cfg.App.Apps.ListHookDeliveries(ctx, opts)
		if err != nil {
			return rep, fmt.Errorf("app: list hook deliveries: %w", err)
		}
		for _, d := range page {
			if d.DeliveredAt != nil && d.DeliveredAt.Before(since) {
				break list // newest first: the rest is older still
			}
			rep.Attempts++
			g := byGUID[d.GetGUID()]
			if g == nil {
				g = &guidAttempts{guid: d.GetGUID(), newestID: d.GetID()}
				byGUID[g.guid] = g
				order = append(order, g)
			}
			if d.GetID() > g.newestID {
				g.newestID = d.GetID()
			}
			if code := d.GetStatusCode(); code >= 200 && code < 300 {
				g.ok = true
			}
			if d.GetRedelivery() {
				g.redeliveries++
			}
		}
		if resp.Cursor == "" || len(page) == 0 {
			break
		}
		opts.Cursor = resp.Cursor
	}
	rep.Deliveries = len(order)

	var failed []*guidAttempts
	var guids []string
	for _, g := range order {
		if !g.ok && g.guid != "" {
			failed = append(failed, g)
			guids = append(guids, g.guid)
		}
	}
	rep.Failed = len(failed)
	if len(failed) == 0 {
		return rep, nil
	}
	known, err := r.cfg.Ledger.Known(ctx, guids)
	if err != nil {
		return rep, err
	}
	var errs []error
	// Oldest first, so that a repository's deliveries come back in their
	// order (GitHub delivers each redelivery on its own, so this is a
	// best effort).
	for i := len(failed) - 1; i >= 0; i-- {
		g := failed[i]
		_, recent := r.requested[g.guid]
		if known[g.guid] || recent || g.redeliveries >= r.cfg.MaxRedeliveries {
			rep.Skipped++
			continue
		}
		_, resp, err := r.cfg.App.Apps.RedeliverHookDelivery(ctx, g.newestID)
		var accepted *github.AcceptedError
		if err != nil && !errors.As(err, &accepted) && (resp == nil || resp.StatusCode != http.StatusAccepted) {
			if ctx.Err() != nil {
				return rep, ctx.Err()
			}
			errs = append(errs, fmt.Errorf("redeliver %s: %w", g.guid, err))
			if c := executor.Classify(err, now); c.PauseInstallation {
				// GitHub is limiting the App: the rest waits for the next
				// pass rather than being refused in turn (after a long
				// outage, thousands of requests that only prolong the
				// limit).
				rep.Skipped += i
				break
			}
			continue
		}
		r.requested[g.guid] = now
		rep.Redelivered = append(rep.Redelivered, g.guid)
		r.recovered.Inc()
		r.log.Info("redelivery of a missed delivery requested", zap.String(logKeyEvent, "recovery.redelivered"),
			zap.String(logKeyDeliveryID, g.guid))
	}
	r.log.Info("missed-delivery recovery pass done", zap.String(logKeyEvent, "recovery.pass"),
		zap.Int("attempts", rep.Attempts), zap.Int("failed", rep.Failed), zap.Int("redelivered", len(rep.Redelivered)), zap.Int("skipped", rep.Skipped))
	if len(errs) > 0 {
		return rep, fmt.Errorf("app: %d redeliveries failed: %w", len(errs), errors.Join(errs...))
	}
	return rep, nil
}
