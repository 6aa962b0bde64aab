package queue

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// Errors callers can branch on with errors.Is.
var (
	// ErrNotRunning is returned by a Broker (or a Consumer) that has not been
	// started or has been stopped.
	ErrNotRunning = errors.New("queue: not running")
	// ErrInvalidOperationID is returned for an operation ID that cannot be a
	// NATS subject token (see ValidateOperationID).
	ErrInvalidOperationID = errors.New("queue: invalid operation ID")
)

// Config configures a Broker: where JetStream runs and how baton talks to it.
// Every field has a documented default; New fills them in and validates.
type Config struct {
	// URL of an external NATS server or cluster (comma-separated URLs, as
	// the nats CLI takes them), for example "nats://10.0.0.5:4222". Empty
	// runs nats-server embedded in this process (the default).
	URL string

	// DataDir is baton's data directory. The embedded server keeps its
	// JetStream store in DataDir/nats. Required when URL is empty; ignored
	// otherwise.
	DataDir string
	// ListenAddr makes the embedded server accept NATS clients on host:port
	// (for example "127.0.0.1:4222"; port 0 picks a free port), so that an
	// operator can point the nats CLI at it. The listener has no
	// authentication: keep it on a loopback or otherwise private address
	// (every interface, "0.0.0.0:4222" or ":4222", is refused).
	// Empty (the default): no listening socket at all; baton talks to the
	// server in-process.
	ListenAddr string
	// SyncAlways makes the embedded server fsync every JetStream write
	// (`--nats-sync always`). Default false: JetStream's default flush policy
	// (writes reach the operating system before the publish is acknowledged,
	// so a crash of baton loses nothing; the record store's synchronous=FULL
	// and the reconciler cover a crash of the machine). Only for the
	// embedded server: an external server is configured on its own side
	// (`sync_interval: always`).
	SyncAlways bool

	// CredentialsFile is a NATS credentials file (JWT and NKey seed) for an
	// external server. Optional.
	CredentialsFile string
	// NKeySeedFile is a file holding an NKey user seed for an external
	// server. Optional; not together with CredentialsFile.
	NKeySeedFile string
	// TLSCAFile is a PEM file of CAs to trust for an external server.
	// Optional; setting it (or TLSCertFile) requires TLS.
	TLSCAFile string
	// TLSCertFile and TLSKeyFile are a PEM client certificate and its key,
	// for servers that verify clients. Optional; both or neither.
	TLSCertFile string
	TLSKeyFile  string

	// Replicas is the number of replicas of each stream (`--nats-replicas`),
	// for an external cluster. Defaults to 1; the embedded server allows
	// only 1. Applied to existing streams at start.
	Replicas int
	// DuplicateWindow is how long JetStream remembers a message ID: the same
	// operation dispatched twice within it is stored once. Defaults to 2
	// minutes; at least 2 minutes.
	DuplicateWindow time.Duration
	// DeadLetterMaxAge drops dead letters older than this. Defaults to 0:
	// dead letters stay until replayed or purged.
	DeadLetterMaxAge time.Duration

	// PublishTimeout bounds a publish (and other JetStream requests) whose
	// context has no deadline. Defaults to 5s.
	PublishTimeout time.Duration
	// ConnectTimeout bounds the first connection to an external server
	// (which also ends with Start's context) and the start of the
	// embedded one. Defaults to 10s.
	ConnectTimeout time.Duration
	// ReconnectWait is the pause between attempts to reconnect to an
	// external server that went away; baton reconnects forever. Defaults to
	// 1s. While disconnected, publishes fail at once (nothing is buffered),
	// so the caller sees the error and the reconciler publishes again later.
	ReconnectWait time.Duration

	// Logger receives the queue's events (operation IDs, never payloads)
	// and, at debug level, the embedded server's notices. Defaults to
	// zap.NewNop().
	Logger *zap.Logger
}

// CheckListenAddr refuses an address for the embedded server's client
// listener (Config.ListenAddr) that would expose it beyond what its owner
// meant: the embedded server has no authentication.
func CheckListenAddr(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil // the server names what is wrong with it
	}
	ip := net.ParseIP(host)
	if host == "" || (ip != nil && ip.IsUnspecified()) {
		// Every interface, public ones included, for a listener
		// without authentication: anyone reaching the machine
		// could read, take or delete the queue's messages.
		return fmt.Errorf("%q listens on every interface, and the embedded server has no authentication: give a loopback or private address (127.0.0.1:4222)", addr)
	}
	if ip == nil && strings.Trim(host, "0123456789.") == "" {
		// "0", "127.1": not an address to Go, but the C resolver
		// (inet_aton) reads them as 0.0.0.0 and 127.0.0.1, so what
		// they listen on depends on how baton was built.
		return fmt.Errorf("%q: %q is not an IP address: give one in full (127.0.0.1:4222) or a host name", addr, host)
	}
	return nil
}

// minDuplicateWindow is DESIGN.md's floor for the dedupe window.
const minDuplicateWindow = 2 * time.Minute

func (c *Config) fill() error {
	c.Replicas = cmp.Or(c.Replicas, 1)
	c.DuplicateWindow = cmp.Or(c.DuplicateWindow, minDuplicateWindow)
	c.PublishTimeout = cmp.Or(c.PublishTimeout, 5*time.Second)
	c.ConnectTimeout = cmp.Or(c.ConnectTimeout, 10*time.Second)
	c.ReconnectWait = cmp.Or(c.ReconnectWait, time.Second)
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}

	var errs []error
	if c.URL == "" {
		if c.DataDir == "" {
			errs = append(errs, errors.New("DataDir is required for the embedded server"))
		}
		if c.Replicas != 1 {
			errs = append(errs, fmt.Errorf("the embedded server holds one replica, not %d (Replicas)", c.Replicas))
		}
		if c.CredentialsFile != "" || c.NKeySeedFile != "" || c.TLSCAFile != "" || c.TLSCertFile != "" || c.TLSKeyFile != "" {
			errs = append(errs, errors.New("credentials and TLS files apply to an external server (URL)"))
		}
		if c.ListenAddr != "" {
			if err := CheckListenAddr(c.ListenAddr); err != nil {
				errs = append(errs, fmt.Errorf("ListenAddr %w", err))
			}
		}
	} else {
		if c.ListenAddr != "" {
			errs = append(errs, errors.New("ListenAddr applies to the embedded server, not to an external URL"))
		}
		if c.SyncAlways {
			errs = append(errs, errors.New("SyncAlways applies to the embedded server; configure sync on the external server"))
		}
	}
	if c.Replicas < 1 || c.Replicas > 5 {
		errs = append(errs, fmt.Errorf("replicas %d: want 1 to 5 (Replicas)", c.Replicas))
	}
	if c.DuplicateWindow < minDuplicateWindow {
		errs = append(errs, fmt.Errorf("DuplicateWindow = %s: want at least %s", c.DuplicateWindow, minDuplicateWindow))
	}
	if c.CredentialsFile != "" && c.NKeySeedFile != "" {
		errs = append(errs, errors.New("CredentialsFile and NKeySeedFile are exclusive"))
	}
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		errs = append(errs, errors.New("TLSCertFile and TLSKeyFile go together"))
	}
	for _, d := range []struct {
		name string
		d    time.Duration
	}{
		{"PublishTimeout", c.PublishTimeout},
		{"ConnectTimeout", c.ConnectTimeout},
		{"ReconnectWait", c.ReconnectWait},
	} {
		if d.d < 0 {
			errs = append(errs, fmt.Errorf("%s = %s: must not be negative", d.name, d.d))
		}
	}
	if c.DeadLetterMaxAge < 0 {
		errs = append(errs, fmt.Errorf("DeadLetterMaxAge = %s: must not be negative", c.DeadLetterMaxAge))
	}
	if len(errs) > 0 {
		return fmt.Errorf("queue: invalid config: %w", errors.Join(errs...))
	}
	return nil
}

// Broker is baton's connection to JetStream: the embedded server (or an
// external one), the streams, publishing, dead letters. Consumers and
// reconcilers are built on a started Broker.
type Broker struct {
	cfg      Config
	log      *zap.Logger
	counters counters

	mu       sync.Mutex
	state    lifecycle
	children []stopper // consumers and reconcilers, stopped before the connection

	sess atomic.Pointer[session] // set while running

	// publishFailing is the failure of the last publish of an operation
	// (a dispatch, a nudge, a republish), nil once one succeeds or the
	// connection is made again: Ready reports it while the last failure
	// is recent (publishFailureFor).
	publishFailing atomic.Pointer[publishFailure]
	// publishFailureFor is how long Ready reports a failed publish that no
	// later publish has contradicted (a minute; tests shorten it).
	publishFailureFor time.Duration
}

// publishFailure is a run of publishes that JetStream did not
// acknowledge: since the first, last the newest.
type publishFailure struct {
	since, last time.Time
	err         error
}

// defaultPublishFailureFor is Broker.publishFailureFor. Without it, a
// failure with nothing published after it (every operation published
// already, a balancer keeping clients away from a baton that says it is
// not ready) would be reported for ever; the reconciler, a minute apart,
// publishes again what is still to be published, so a queue that still
// fails is seen failing again.
const defaultPublishFailureFor = time.Minute

// notePublish records a publish's outcome for Ready. A publish its caller
// gave up on (a cancelled context: a client gone, a shutdown) says nothing
// of the queue; one whose deadline passed unacknowledged does.
func (b *Broker) notePublish(ctx context.Context, err error) {
	switch {
	case err == nil:
		b.publishFailing.Store(nil)
	case errors.Is(err, context.Canceled) && errors.Is(ctx.Err(), context.Canceled):
	default:
		now := time.Now()
		f := &publishFailure{since: now, last: now, err: err}
		if old := b.publishFailing.Load(); old != nil {
			f.since = old.since
		}
		b.publishFailing.Store(f)
	}
}

// session is what a running Broker holds: set once by Start.
type session struct {
	srv    *server.Server // nil for an external server
	nc     *nats.Conn
	js     jetstream.JetStream
	ops    jetstream.Stream
	dlq    jetstream.Stream
	closed chan struct{} // closed when nc is closed
}

type lifecycle int

const (
	stateNew lifecycle = iota
	stateRunning
	stateStopped
)

type stopper interface{ Stop(context.Context) error }

// New validates cfg, fills its defaults and returns a Broker ready to Start.
func New(cfg Config) (*Broker, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	return &Broker{
		cfg: cfg,
		log: cfg.Logger.With(zap.String(fieldSubsystem, "queue")),
	}, nil
}

// Start starts the embedded server (unless Config.URL names an external
// one), connects, and creates or updates the streams. It returns once the
// Broker can publish; ctx bounds the start only.
func (b *Broker) Start(ctx context.Context) (err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state != stateNew {
		return errors.New("queue: Start called twice or after Stop")
	}
	s := &session{closed: make(chan struct{})}
	defer func() {
		if err != nil {
			s.close(context.Background())
		}
	}()
	if b.cfg.URL == "" {
		if s.srv, err = startServer(b.cfg, b.log); err != nil {
			return err
		}
	}
	if s.nc, err = b.connect(ctx, s); err != nil {
		return err
	}
	s.js, err = jetstream.New(s.nc,
		jetstream.WithDefaultTimeout(b.cfg.PublishTimeout),
		jetstream.WithPublishAsyncTimeout(b.cfg.PublishTimeout),
	)
	if err != nil {
		return fmt.Errorf("queue: jetstream: %w", err)
	}
	if s.ops, s.dlq, err = b.ensureStreams(ctx, s.js); err != nil {
		return err
	}
	b.state = stateRunning
	b.sess.Store(s)
	b.log.Info("queue started", zap.String(fieldEvent, "queue.started"),
		zap.Bool("embedded", s.srv != nil), zap.String("listen", b.ListenURL()))
	return nil
}

// Stop stops the consumers and reconcilers built on this Broker, drains the
// connection and shuts the embedded server down, waiting for it to finish.
// It returns ctx.Err() if the deadline passes first. Safe before Start and
// safe twice.
func (b *Broker) Stop(ctx context.Context) error {
	b.mu.Lock()
	if b.state != stateRunning {
		b.state = stateStopped
		b.mu.Unlock()
		return nil
	}
	b.state = stateStopped
	children := b.children
	b.children = nil
	s := b.sess.Swap(nil)
	b.mu.Unlock()

	var errs []error
	for i := len(children) - 1; i >= 0; i-- {
		errs = append(errs, children[i].Stop(ctx))
	}
	errs = append(errs, s.close(ctx))
	b.log.Info("queue stopped", zap.String(fieldEvent, "queue.stopped"))
	return errors.Join(errs...)
}

// Close is Stop with a 30 s deadline.
func (b *Broker) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return b.Stop(ctx)
}

// close drains the connection and shuts the embedded server down.
func (s *session) close(ctx context.Context) error {
	var err error
	if s.nc != nil {
		if derr := s.nc.Drain(); derr == nil {
			select {
			case <-s.closed:
			case <-ctx.Done():
				err = ctx.Err()
				s.nc.Close()
			}
		} else {
			s.nc.Close()
		}
	}
	if s.srv != nil {
		s.srv.Shutdown()
		s.srv.WaitForShutdown()
	}
	return err
}

// adopt registers a consumer or reconciler to be stopped by Stop. It fails
// if the Broker is not running.
func (b *Broker) adopt(c stopper) (*session, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.sess.Load()
	if b.state != stateRunning || s == nil {
		return nil, ErrNotRunning
	}
	b.children = append(b.children, c)
	return s, nil
}

// disown forgets a stopped consumer or reconciler.
func (b *Broker) disown(c stopper) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, x := range b.children {
		if x == c {
			b.children = append(b.children[:i], b.children[i+1:]...)
			return
		}
	}
}

func (b *Broker) session() (*session, error) {
	s := b.sess.Load()
	if s == nil {
		return nil, ErrNotRunning
	}
	return s, nil
}

// Ready reports whether the Broker can take publishes: started, streams set
// up, connected. For /readyz (together with Consumer.Ready).
func (b *Broker) Ready() error {
	s, err := b.session()
	if err != nil {
		return err
	}
	if st := s.nc.Status(); st != nats.CONNECTED {
		return fmt.Errorf("queue: NATS connection %s", st)
	}
	if f := b.publishFailing.Load(); f != nil && time.Since(f.last) < cmp.Or(b.publishFailureFor, defaultPublishFailureFor) {
		return fmt.Errorf("queue: publishes fail since %s (%v); the operations wait in the store and are published again once one succeeds",
			f.since.UTC().Format(time.RFC3339), f.err)
	}
	return nil
}

// ListenURL is the client URL of the embedded server when it listens
// (Config.ListenAddr), or "".
func (b *Broker) ListenURL() string {
	s := b.sess.Load()
	if s == nil || s.srv == nil || b.cfg.ListenAddr == "" {
		return ""
	}
	return s.srv.ClientURL()
}

// connect opens the connection: in-process to the embedded server, or to
// Config.URL with its credentials and TLS. The first connection to an
// external server ends when ctx does (baton signalled while it starts),
// not only at ConnectTimeout: a server that accepts the connection and
// never answers would otherwise hold the start that long.
func (b *Broker) connect(ctx context.Context, s *session) (*nats.Conn, error) {
	log := b.log
	opts := []nats.Option{
		nats.Name("baton"),
		nats.Timeout(b.cfg.ConnectTimeout),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(b.cfg.ReconnectWait),
		nats.ReconnectBufSize(-1), // publishes fail while disconnected instead of waiting
		nats.ClosedHandler(func(*nats.Conn) { close(s.closed) }),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("NATS disconnected", zap.String(fieldEvent, "queue.disconnected"), zap.Error(err))
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			// Publishes that failed while the server was away say nothing
			// of the server now.
			b.publishFailing.Store(nil)
			log.Info("NATS reconnected", zap.String(fieldEvent, "queue.reconnected"), zap.String("server", nc.ConnectedUrlRedacted()))
		}),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			log.Warn("NATS asynchronous error", zap.String(fieldEvent, "queue.nats_error"), zap.Error(err))
		}),
	}
	url := b.cfg.URL
	var dialer *startDialer
	if s.srv != nil {
		opts = append(opts, nats.InProcessServer(s.srv))
		url = ""
	} else {
		dialer = &startDialer{ctx: ctx, d: net.Dialer{Timeout: b.cfg.ConnectTimeout}}
		opts = append(opts, nats.SetCustomDialer(dialer))
	}
	if b.cfg.CredentialsFile != "" {
		opts = append(opts, nats.UserCredentials(b.cfg.CredentialsFile))
	}
	if b.cfg.NKeySeedFile != "" {
		o, err := nats.NkeyOptionFromSeed(b.cfg.NKeySeedFile)
		if err != nil {
			return nil, fmt.Errorf("queue: NKey seed: %w", err)
		}
		opts = append(opts, o)
	}
	if b.cfg.TLSCAFile != "" {
		opts = append(opts, nats.RootCAs(b.cfg.TLSCAFile))
	}
	if b.cfg.TLSCertFile != "" {
		opts = append(opts, nats.ClientCert(b.cfg.TLSCertFile, b.cfg.TLSKeyFile))
	}
	nc, err := nats.Connect(url, opts...)
	if dialer != nil {
		dialer.started()
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("queue: connect to NATS: %w", ctx.Err())
		}
		return nil, fmt.Errorf("queue: connect to NATS: %w", err)
	}
	return nc, nil
}

// startDialer dials the external NATS server. Until started is called
// (the first connection made or given up), a connection it made is
// closed when ctx ends, so that nats.Connect, which takes no context,
// returns then; the connections made afterwards (reconnections) live
// their own lives.
type startDialer struct {
	d     net.Dialer
	mu    sync.Mutex
	ctx   context.Context // nil once started
	stops []func() bool
}

func (d *startDialer) Dial(network, address string) (net.Conn, error) {
	d.mu.Lock()
	ctx := d.ctx
	d.mu.Unlock()
	if ctx == nil {
		return d.d.Dial(network, address)
	}
	c, err := d.d.DialContext(ctx, network, address)
	if err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { _ = c.Close() })
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ctx == nil {
		stop()
	} else {
		d.stops = append(d.stops, stop)
	}
	return c, nil
}

// started ends the tie between ctx and the connections dialled so far.
func (d *startDialer) started() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.ctx = nil
	for _, stop := range d.stops {
		stop()
	}
	d.stops = nil
}
