package mergequeue

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/go-github/v62/github"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/baton-dev/baton/coordinator"
	"github.com/baton-dev/baton/executor"
	"github.com/baton-dev/baton/internal/sqlite"
	"github.com/baton-dev/baton/queue"
	"github.com/baton-dev/baton/schema"
)

// Defaults of Config.
const (
	DefaultLabel             = "baton:queue"
	DefaultStatusContext     = "baton/queue"
	DefaultMergeMethod       = "merge"
	DefaultLeaseTTL          = 30 * time.Second
	DefaultBusyDelay         = time.Second
	DefaultReconcileInterval = 5 * time.Minute
	DefaultStaleLeaseAfter   = 90 * time.Second
	DefaultGitHubTimeout     = 30 * time.Second
	DefaultGateTimeout       = 60 * time.Minute
)

// Bounds of Config.GateTimeout. There is no way to turn the timeout off:
// a required check that never reports would hold the queue for good.
const (
	MinGateTimeout = time.Minute
	MaxGateTimeout = 24 * time.Hour
)

// Operations is what the queue needs of the executor
// (*executor.Executor): every GitHub mutation it makes is an operation.
// Cancel is used on the merge of a pull request that leaves the queue
// (or whose head moves) before its merge ran: a queued operation is
// cancelled at once, a running one is asked to stop, and a terminal one
// is schema.ErrAlreadyTerminal. List finds the unfinished label
// additions baton asked for on a pull request (a reconcile does not take
// a pull request out for a label on its way).
type Operations interface {
	Submit(ctx context.Context, actor string, s schema.Submission) (schema.Record, bool, error)
	Get(ctx context.Context, operationID string) (schema.Record, error)
	Cancel(ctx context.Context, operationID string) (schema.Record, error)
	List(ctx context.Context, f executor.ListFilter) ([]schema.Record, string, error)
}

// DeadLetters is what the queue needs of the operations queue
// (*queue.Broker): an operation's dead letter, or
// queue.ErrDeadLetterNotFound.
type DeadLetters interface {
	DeadLetterOf(ctx context.Context, operationID string) (queue.DeadLetter, error)
}

// Leases is what the queue needs of the lease coordinator
// (*coordinator.Coordinator).
type Leases interface {
	Acquire(ctx context.Context, key, owner string, ttl time.Duration) (*coordinator.Lease, error)
	KeepAlive(ctx context.Context, l *coordinator.Lease) (context.Context, func())
	Fenced(ctx context.Context, l *coordinator.Lease, fn func(*sqlite.Tx) error) error
	Release(ctx context.Context, l *coordinator.Lease) error
	Check(ctx context.Context, key string) (coordinator.Status, error)
}

// InstallationResolver says which installation covers a repository
// (*app.Installations).
type InstallationResolver interface {
	InstallationOf(ctx context.Context, owner, repo string) (int64, error)
}

// Repository names a repository of an installation, for ReconcileAll.
type Repository struct {
	InstallationID int64
	// FullName is "owner/name".
	FullName string
}

// Config configures a Queue.
type Config struct {
	// DB is baton's database, which holds the queue's tables (migration
	// 0005_mergequeue.sql). It must be the database Leases fences writes
	// in. Required.
	DB *sqlite.DB
	// Leases hands out the repository leases (*coordinator.Coordinator).
	// Required.
	Leases Leases
	// Operations submits the queue's GitHub mutations, reports their
	// outcome and cancels the merges of pull requests that left the queue
	// (*executor.Executor). Required.
	Operations Operations
	// DeadLetters finds an operation's dead letter (*queue.Broker): the
	// head whose merge was dead-lettered, which waits until an operator
	// replays or cancels it, says so in its status. Optional: without it
	// the status says the head is merging.
	DeadLetters DeadLetters
	// GitHub returns the client of an installation, for reads: pull
	// requests, check runs, statuses, branch protection, permissions
	// (executor.GitHubClients.Installation). Required.
	GitHub func(installationID int64) (*github.Client, error)
	// Installations says which installation has a repository now: POST
	// …/queue/reconcile and ReconcileAll work as that one rather than the
	// one the queue's state names (which GitHub may no longer know),
	// ReconcileAll leaves alone a repository none in force has, and
	// HandleEvent ignores an event whose installation is not that one
	// (without it, the event's installation is trusted). Optional.
	Installations InstallationResolver
	// Repositories lists repositories ReconcileAll visits besides those the
	// queue has state for, so that a queue whose state was lost is
	// re-derived from GitHub; a repository listed is reconciled as the
	// installation listed with it, whatever the state says. Optional.
	Repositories func(ctx context.Context) ([]Repository, error)

	// Label is the label that puts a pull request in the queue. Defaults
	// to "baton:queue".
	Label string
	// StatusContext is the context of the commit status that shows a pull
	// request's place in the queue. Defaults to "baton/queue". Statuses of
	// this context never count toward a gate.
	StatusContext string
	// RequiredChecks, if not empty, are the checks a gate requires (check
	// run names or status contexts). Empty: the required status checks of
	// the base branch's protection; with no protection, every check and
	// status reported on the head (at least one).
	RequiredChecks []string
	// MergeMethod is merge, squash or rebase. Defaults to "merge".
	MergeMethod string
	// GateTimeout is how long an entry's gate may stay pending (queued or
	// evaluating: a required check not reported, or still running) after
	// the pull request joined or moved to a new head. Then it bounces,
	// naming the checks it was waiting for, so that a check that never
	// reports (GitHub keeps a required workflow skipped by a paths filter
	// "Pending") does not hold the queue, and every pull request behind
	// it, for good. It is checked by every run on the repository (an
	// event, a merge's outcome) and by every reconcile, so a bounce comes
	// at most ReconcileInterval after the timeout. Between MinGateTimeout
	// (1m) and MaxGateTimeout (24h); it cannot be turned off. Defaults to
	// 60m, as the status check timeout of GitHub's own merge queue.
	GateTimeout time.Duration

	// LeaseTTL is the TTL of the repository lease (kept alive while an
	// event is processed). Defaults to 30s.
	LeaseTTL time.Duration
	// BusyDelay is the wait HandleEvent asks for (RetryError) when the
	// repository's lease is held, and the wait before an operation's
	// outcome is applied again. Defaults to 1s.
	BusyDelay time.Duration
	// ReconcileInterval is how often the loop Start runs reconciles every
	// repository (once at Start, then every interval). Defaults to 5m.
	ReconcileInterval time.Duration
	// StaleLeaseAfter is how long a repository lease must have been
	// expired for a reconcile to report it dead (its holder crashed).
	// Defaults to 90s (three TTLs).
	StaleLeaseAfter time.Duration
	// ReconcileConcurrency bounds the repositories ReconcileAll works on
	// at once. Defaults to 4.
	ReconcileConcurrency int
	// GitHubTimeout bounds each read from GitHub. Defaults to 30s.
	GitHubTimeout time.Duration

	// Clock gives the times recorded in the queue's state and schedules
	// the reconcile loop. Defaults to coordinator.SystemClock().
	Clock coordinator.Clock
	// Logger defaults to zap.NewNop().
	Logger *zap.Logger
	// Registerer receives the queue's metrics (baton_mergequeue_*). nil
	// registers none.
	Registerer prometheus.Registerer
}

func (c *Config) fill() error {
	c.Label = cmp.Or(strings.TrimSpace(c.Label), DefaultLabel)
	c.StatusContext = cmp.Or(strings.TrimSpace(c.StatusContext), DefaultStatusContext)
	c.MergeMethod = cmp.Or(c.MergeMethod, DefaultMergeMethod)
	c.LeaseTTL = cmp.Or(c.LeaseTTL, DefaultLeaseTTL)
	c.BusyDelay = cmp.Or(c.BusyDelay, DefaultBusyDelay)
	c.ReconcileInterval = cmp.Or(c.ReconcileInterval, DefaultReconcileInterval)
	c.StaleLeaseAfter = cmp.Or(c.StaleLeaseAfter, DefaultStaleLeaseAfter)
	c.ReconcileConcurrency = cmp.Or(c.ReconcileConcurrency, 4)
	c.GitHubTimeout = cmp.Or(c.GitHubTimeout, DefaultGitHubTimeout)
	c.GateTimeout = cmp.Or(c.GateTimeout, DefaultGateTimeout)
	if c.Clock == nil {
		c.Clock = coordinator.SystemClock()
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	var errs []error
	if c.DB == nil {
		errs = append(errs, errors.New("no DB"))
	}
	if c.Leases == nil {
		errs = append(errs, errors.New("no Leases"))
	}
	if c.Operations == nil {
		errs = append(errs, errors.New("no Operations"))
	}
	if c.GitHub == nil {
		errs = append(errs, errors.New("no GitHub"))
	}
	if len(c.StatusContext) > 255 {
		errs = append(errs, errors.New("want a StatusContext of at most 255 characters"))
	}
	if err := checkSettings(c.Label, c.RequiredChecks, c.MergeMethod, c.StatusContext); err != nil {
		errs = append(errs, err)
	}
	if c.LeaseTTL < 3*time.Second || c.LeaseTTL > 5*time.Minute {
		errs = append(errs, fmt.Errorf("want 3s <= LeaseTTL <= 5m, not %s", c.LeaseTTL))
	}
	if c.BusyDelay < 10*time.Millisecond || c.BusyDelay > time.Minute {
		errs = append(errs, fmt.Errorf("want 10ms <= BusyDelay <= 1m, not %s", c.BusyDelay))
	}
	if c.ReconcileInterval < time.Second {
		errs = append(errs, fmt.Errorf("want ReconcileInterval >= 1s, not %s", c.ReconcileInterval))
	}
	if c.StaleLeaseAfter < c.LeaseTTL {
		errs = append(errs, fmt.Errorf("want StaleLeaseAfter >= LeaseTTL, not %s", c.StaleLeaseAfter))
	}
	if c.ReconcileConcurrency < 1 || c.ReconcileConcurrency > 64 {
		errs = append(errs, fmt.Errorf("want 1 <= ReconcileConcurrency <= 64, not %d", c.ReconcileConcurrency))
	}
	if c.GitHubTimeout <= 0 {
		errs = append(errs, fmt.Errorf("want a positive GitHubTimeout, not %s", c.GitHubTimeout))
	}
	if err := CheckGateTimeout(c.GateTimeout); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return fmt.Errorf("mergequeue: invalid config: %w", errors.Join(errs...))
	}
	return nil
}

// MergeMethods are the merge methods a queue may use.
var MergeMethods = []string{"merge", "squash", "rebase"}

// CheckSettings checks the settings an operator gives the queue (baton
// serve's flags) as New would: a label of at most 50 characters (empty:
// the default), required checks that are neither empty nor the queue's
// own status context, and a merge method of MergeMethods (empty: the
// default).
func CheckSettings(label string, requiredChecks []string, mergeMethod string) error {
	return checkSettings(cmp.Or(strings.TrimSpace(label), DefaultLabel), requiredChecks,
		cmp.Or(mergeMethod, DefaultMergeMethod), DefaultStatusContext)
}

// CheckGateTimeout checks a Config.GateTimeout as New would, 0 (the
// default) aside: between MinGateTimeout and MaxGateTimeout. The server
// calls it before it starts anything (serve refuses 0 itself).
func CheckGateTimeout(d time.Duration) error {
	if d != 0 && (d < MinGateTimeout || d > MaxGateTimeout) {
		return fmt.Errorf("want %s <= GateTimeout <= %s, not %s", formatDuration(MinGateTimeout), formatDuration(MaxGateTimeout), d)
	}
	return nil
}

func checkSettings(label string, requiredChecks []string, mergeMethod, statusContext string) error {
	var errs []error
	if utf8.RuneCountInString(label) > 50 {
		errs = append(errs, fmt.Errorf("want a Label of at most GitHub's 50 characters, not %q", label))
	}
	for _, rc := range requiredChecks {
		if strings.TrimSpace(rc) == "" || rc == statusContext {
			errs = append(errs, fmt.Errorf("want RequiredChecks without %q (empty, or the queue's own status)", rc))
		}
	}
	if !slices.Contains(MergeMethods, mergeMethod) {
		errs = append(errs, fmt.Errorf("want MergeMethod merge, squash or rebase, not %q", mergeMethod))
	}
	return errors.Join(errs...)
}
