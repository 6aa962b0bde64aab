package queue

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// ConsumerConfig configures a Consumer. Every field but Handler has a
// documented default; NewConsumer fills them in and validates.
type ConsumerConfig struct {
	// Handler runs one operation. Required.
	Handler Handler

	// Durable is the name of the durable pull consumer on StreamOperations.
	// Defaults to "baton-operations".
	Durable string
	// Concurrency is the number of handlers running at once. Defaults to 32.
	Concurrency int
	// AckWait is how long JetStream waits for a delivered message to be
	// acknowledged before delivering it again: after a crash, an operation
	// that was running is redelivered within about AckWait of the restart.
	// While a handler runs, the consumer tells JetStream it is in progress
	// every AckWait/3. It must exceed the executor's lease TTL (30 s by
	// default, at most 5 min), so that the redelivery after a crash finds
	// the dead holder's lease expired. Defaults to 60s; at least 1s.
	AckWait time.Duration
	// MaxFailures is the number of handler failures (Failed results and
	// panics, never RetryAfter) after which an operation moves to
	// StreamDeadLetters. Defaults to 5.
	MaxFailures int
	// FailureBackoff is the delay after an operation's first failure; it
	// doubles with each further failure, up to MaxFailureBackoff. Defaults
	// to 1s and 1m.
	FailureBackoff    time.Duration
	MaxFailureBackoff time.Duration
	// MaxAckPending bounds the messages delivered and not yet acknowledged.
	// Messages waiting after RetryAfter count toward it, so a limit makes
	// many operations waiting on busy resources hold back new ones.
	// Defaults to 0: no limit.
	MaxAckPending int
	// FetchBatch is the most messages asked for in one pull; the consumer
	// only asks for as many as it has idle handlers, so a message's AckWait
	// starts when a handler is ready for it. Defaults to (and is at most)
	// Concurrency.
	FetchBatch int
	// FetchWait is how long one pull waits for messages. Stop takes up to
	// this long to stop fetching. Defaults to 1s.
	FetchWait time.Duration
	// StopGrace is how long Stop, once its deadline has passed and it has
	// cancelled the handlers' context, still waits for them to return.
	// Defaults to 1s.
	StopGrace time.Duration
	// MaxHold bounds how long a message stays in StreamOperations by
	// RetryAfter alone: no delayed redelivery is longer, and a message
	// sent back before and stored that long ago (see retryLater) is
	// replaced by a fresh copy at the stream's
	// end (the copy keeps its failure count) instead of being sent back
	// again. JetStream cannot free the stream's storage behind its oldest
	// message: one operation kept waiting for days (behind a dead letter
	// on its resource, a lease held outside) would make the embedded
	// server keep, on disk and in memory, every message the stream took
	// meanwhile. Defaults to 1m.
	MaxHold time.Duration
	// Logger defaults to the Broker's.
	Logger *zap.Logger
}

func (c *ConsumerConfig) fill(b *Broker) error {
	c.Durable = cmp.Or(c.Durable, "baton-operations")
	c.Concurrency = cmp.Or(c.Concurrency, 32)
	c.AckWait = cmp.Or(c.AckWait, 60*time.Second)
	c.MaxFailures = cmp.Or(c.MaxFailures, 5)
	c.FailureBackoff = cmp.Or(c.FailureBackoff, time.Second)
	c.MaxFailureBackoff = cmp.Or(c.MaxFailureBackoff, time.Minute)
	c.FetchBatch = min(cmp.Or(c.FetchBatch, c.Concurrency), max(c.Concurrency, 1))
	c.FetchWait = cmp.Or(c.FetchWait, time.Second)
	c.StopGrace = cmp.Or(c.StopGrace, time.Second)
	c.MaxHold = cmp.Or(c.MaxHold, time.Minute)
	if c.Logger == nil {
		c.Logger = b.log
	} else {
		c.Logger = c.Logger.With(zap.String(fieldSubsystem, "queue"))
	}
	var errs []error
	if c.Handler == nil {
		errs = append(errs, errors.New("Handler is required"))
	}
	if err := ValidateOperationID(c.Durable); err != nil {
		errs = append(errs, fmt.Errorf("durable name %q: want letters, digits, '-' and '_' (Durable)", c.Durable))
	}
	if c.Concurrency < 1 {
		errs = append(errs, fmt.Errorf("concurrency %d: want at least 1 (Concurrency)", c.Concurrency))
	}
	if c.AckWait < time.Second {
		errs = append(errs, fmt.Errorf("AckWait = %s: want at least 1s", c.AckWait))
	}
	if c.MaxFailures < 1 {
		errs = append(errs, fmt.Errorf("MaxFailures = %d: want at least 1", c.MaxFailures))
	}
	if c.FailureBackoff <= 0 || c.MaxFailureBackoff < c.FailureBackoff {
		errs = append(errs, fmt.Errorf("FailureBackoff = %s, MaxFailureBackoff = %s: want 0 < first <= max", c.FailureBackoff, c.MaxFailureBackoff))
	}
	if c.MaxAckPending < 0 {
		errs = append(errs, fmt.Errorf("MaxAckPending = %d: want 0 (no limit) or more", c.MaxAckPending))
	}
	if c.FetchBatch < 1 {
		errs = append(errs, fmt.Errorf("FetchBatch = %d: want at least 1", c.FetchBatch))
	}
	if c.FetchWait < 10*time.Millisecond || c.StopGrace < 0 {
		errs = append(errs, fmt.Errorf("FetchWait = %s, StopGrace = %s: want FetchWait >= 10ms, StopGrace >= 0", c.FetchWait, c.StopGrace))
	}
	if c.MaxHold < 10*time.Millisecond {
		errs = append(errs, fmt.Errorf("MaxHold = %s: want at least 10ms", c.MaxHold))
	}
	if len(errs) > 0 {
		return fmt.Errorf("queue: invalid consumer config: %w", errors.Join(errs...))
	}
	return nil
}

// Consumer hands the operations of StreamOperations to a Handler, with
// ConsumerConfig.Concurrency handlers at once. See the package
// documentation for what becomes of each Result.
type Consumer struct {
	b        *Broker
	cfg      ConsumerConfig
	log      *zap.Logger
	counters *counters

	mu    sync.Mutex
	state lifecycle

	sess *session
	cons jetstream.Consumer // set by Start, then replaced only by the fetch loop

	work   chan jetstream.Msg // fetched messages, to the workers
	tokens chan struct{}      // one per idle worker
	slots  []slot             // what each worker is running, for InProgress

	stopping       atomic.Bool
	stopFetch      chan struct{} // closed by Stop: fetch no more
	draining       chan struct{} // closed by Stop: what Draining returns to handlers
	handlerCtx     context.Context
	cancelHandlers context.CancelFunc
	pool           sync.WaitGroup // the fetch loop and the workers
	poolDone       chan struct{}  // closed when pool is done
	quit           chan struct{}  // closed at the end of Stop
	watcher        sync.WaitGroup // the goroutine that closes poolDone
	ka             sync.WaitGroup // the keepalive

	fetchErr atomic.Pointer[error] // the last fetch error, nil when fetching works

	now func() time.Time // this machine's clock (tests set it before Start)
}

// slot is one worker's message in hand.
type slot struct {
	mu  sync.Mutex
	msg jetstream.Msg
}

func (s *slot) set(m jetstream.Msg) {
	s.mu.Lock()
	s.msg = m
	s.mu.Unlock()
}

func (s *slot) get() jetstream.Msg {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.msg
}

// NewConsumer validates cfg and returns a Consumer of b's StreamOperations,
// ready to Start.
func NewConsumer(b *Broker, cfg ConsumerConfig) (*Consumer, error) {
	if err := cfg.fill(b); err != nil {
		return nil, err
	}
	hctx, cancel := context.WithCancel(context.Background())
	draining := make(chan struct{})
	hctx = context.WithValue(hctx, drainingKey{}, (<-chan struct{})(draining))
	return &Consumer{
		b:              b,
		cfg:            cfg,
		log:            cfg.Logger,
		counters:       &b.counters,
		work:           make(chan jetstream.Msg, cfg.Concurrency),
		tokens:         make(chan struct{}, cfg.Concurrency),
		slots:          make([]slot, cfg.Concurrency),
		stopFetch:      make(chan struct{}),
		draining:       draining,
		handlerCtx:     hctx,
		cancelHandlers: cancel,
		poolDone:       make(chan struct{}),
		quit:           make(chan struct{}),
		now:            time.Now,
	}, nil
}

// Start creates or updates the durable consumer and starts the handlers.
// The Broker must be running; its Stop also stops the Consumer. ctx bounds
// the start only.
func (c *Consumer) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state != stateNew {
		return errors.New("queue: consumer Start called twice or after Stop")
	}
	sess, err := c.b.adopt(c)
	if err != nil {
		return err
	}
	c.sess = sess
	if c.cons, err = c.ensure(ctx); err != nil {
		c.b.disown(c)
		return err
	}
	for range c.cfg.Concurrency {
		c.tokens <- struct{}{}
	}
	c.pool.Add(1 + c.cfg.Concurrency)
	go c.fetchLoop()
	for i := range c.cfg.Concurrency {
		go c.worker(&c.slots[i])
	}
	c.watcher.Add(1)
	go func() {
		defer c.watcher.Done()
		c.pool.Wait()
		close(c.poolDone)
	}()
	c.ka.Add(1)
	go c.keepalive()
	c.state = stateRunning
	c.log.Info("consumer started", zap.String(fieldEvent, "queue.consumer_started"),
		zap.String("durable", c.cfg.Durable), zap.Int("concurrency", c.cfg.Concurrency),
		zap.Duration("ackWait", c.cfg.AckWait))
	return nil
}

// ensure creates or updates the durable consumer (and the streams, should
// they have gone).
func (c *Consumer) ensure(ctx context.Context) (jetstream.Consumer, error) {
	ctx, cancel := withTimeout(ctx, c.b.cfg.ConnectTimeout)
	defer cancel()
	cfg := jetstream.ConsumerConfig{
		Durable:       c.cfg.Durable,
		Description:   "baton: runs operations",
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       c.cfg.AckWait,
		MaxDeliver:    -1, // failures are counted by baton, apart from busy redeliveries
		MaxAckPending: c.cfg.MaxAckPending,
	}
	if cfg.MaxAckPending == 0 {
		cfg.MaxAckPending = -1
	}
	cons, err := c.sess.ops.CreateOrUpdateConsumer(ctx, cfg)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		if _, _, err = c.b.ensureStreams(ctx, c.sess.js); err == nil {
			cons, err = c.sess.ops.CreateOrUpdateConsumer(ctx, cfg)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("queue: set up consumer %s: %w", c.cfg.Durable, err)
	}
	return cons, nil
}

// Stop stops fetching, lets the running handlers finish until ctx is done,
// then cancels their context, naks what is still in hand (so it is
// redelivered at once, not after AckWait) and returns ctx.Err(). Safe
// before Start and safe twice.
func (c *Consumer) Stop(ctx context.Context) error {
	c.mu.Lock()
	switch c.state {
	case stateNew:
		c.state = stateStopped
		c.mu.Unlock()
		c.cancelHandlers()
		return nil
	case stateStopped:
		c.mu.Unlock()
		return nil
	}
	c.state = stateStopped
	c.mu.Unlock()
	defer c.b.disown(c)

	c.stopping.Store(true)
	close(c.stopFetch)
	close(c.draining)
	var err error
	select {
	case <-c.poolDone:
	case <-ctx.Done():
		err = ctx.Err()
		c.cancelHandlers()
		n := c.nakInHand()
		c.log.Warn("stop deadline passed; handlers cancelled", zap.String(fieldEvent, "queue.consumer_stop_deadline"),
			zap.Int("naked", n))
		grace := time.NewTimer(c.cfg.StopGrace)
		select {
		case <-c.poolDone:
		case <-grace.C:
			c.log.Error("handlers still running after their context was cancelled", zap.String(fieldEvent, "queue.handlers_stuck"))
		}
		grace.Stop()
	}
	c.cancelHandlers()
	close(c.quit)
	c.ka.Wait()
	select {
	case <-c.poolDone:
		c.watcher.Wait()
	default: // a handler ignores its context; Stop does not wait for it
	}
	c.log.Info("consumer stopped", zap.String(fieldEvent, "queue.consumer_stopped"))
	return err
}

// Ready reports whether the consumer is running and can fetch messages.
// For /readyz.
func (c *Consumer) Ready() error {
	c.mu.Lock()
	st := c.state
	c.mu.Unlock()
	if st != stateRunning {
		return ErrNotRunning
	}
	if e := c.fetchErr.Load(); e != nil {
		return fmt.Errorf("queue: consumer cannot fetch: %w", *e)
	}
	return nil
}

// fetchLoop pulls as many messages as there are idle workers and hands them
// over, until Stop.
func (c *Consumer) fetchLoop() {
	defer c.pool.Done()
	defer close(c.work)
	var backoff time.Duration
	for {
		// Stop comes first: with idle workers both cases are ready, and
		// select would pick the tokens half the time, each pick one more
		// fetch of up to FetchWait before Stop could end.
		select {
		case <-c.stopFetch:
			return
		default:
		}
		select {
		case <-c.stopFetch:
			return
		case <-c.tokens:
		}
		n := 1
	more:
		for n < c.cfg.FetchBatch {
			select {
			case <-c.tokens:
				n++
			default:
				break more
			}
		}
		got := 0
		batch, err := c.cons.Fetch(n, jetstream.FetchMaxWait(c.cfg.FetchWait))
		if err == nil {
			for msg := range batch.Messages() {
				got++
				if c.stopping.Load() {
					c.nak(msg)
					c.tokens <- struct{}{}
					continue
				}
				c.work <- msg
			}
			err = batch.Error()
		}
		for range n - got {
			c.tokens <- struct{}{}
		}
		if err == nil {
			if c.fetchErr.Swap(nil) != nil {
				c.log.Info("fetching again", zap.String(fieldEvent, "queue.fetch_recovered"))
			}
			backoff = 0
			continue
		}
		backoff = min(max(2*backoff, 50*time.Millisecond), 2*time.Second)
		if c.fetchErr.Swap(&err) == nil {
			c.log.Warn("fetch failed", zap.String(fieldEvent, "queue.fetch_failed"), zap.Error(err))
		}
		if errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrConsumerDeleted) ||
			errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, nats.ErrNoResponders) {
			ctx, cancel := context.WithTimeout(context.Background(), c.b.cfg.PublishTimeout)
			if cons, err := c.ensure(ctx); err == nil {
				c.cons = cons
				c.log.Info("consumer set up again", zap.String(fieldEvent, "queue.consumer_recreated"))
			}
			cancel()
		}
		t := time.NewTimer(backoff)
		select {
		case <-c.stopFetch:
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// worker handles messages until the fetch loop closes c.work. After Stop,
// it naks what it is given instead.
func (c *Consumer) worker(sl *slot) {
	defer c.pool.Done()
	for msg := range c.work {
		if c.stopping.Load() {
			c.nak(msg)
		} else {
			c.handle(sl, msg)
		}
		c.tokens <- struct{}{}
	}
}

// handle runs the handler on one message and settles the message by the
// result.
func (c *Consumer) handle(sl *slot, msg jetstream.Msg) {
	id := string(msg.Data())
	if err := ValidateOperationID(id); err != nil {
		c.log.Error("message is not an operation ID; dropped", zap.String(fieldEvent, "queue.bad_message"),
			zap.String("subject", msg.Subject()), zap.Error(err))
		_ = msg.Term()
		return
	}
	failures, wait := failureState(msg.Headers())
	if wait > c.cfg.MaxFailureBackoff {
		// No backoff is that long: the wall clock, which wrote its end,
		// was set back since, and would stretch the wait by as much.
		// Wait the longest backoff once, then go ahead.
		wait = c.cfg.MaxFailureBackoff
		if md, err := msg.Metadata(); err != nil || md.NumDelivered > 1 {
			wait = 0
		}
	}
	if wait > 0 {
		// A retried message arrived before its backoff ended.
		c.settle(id, msg.NakWithDelay(wait))
		return
	}

	sl.set(msg)
	c.counters.active.Add(1)
	start := time.Now()
	res := c.call(id)
	c.counters.handlerNanos.Add(int64(time.Since(start)))
	c.counters.active.Add(-1)
	sl.set(nil)

	switch {
	case res.IsDone():
		c.counters.handledDone.Add(1)
		c.settle(id, msg.Ack())
	case res.IsRetry():
		c.counters.handledRetry.Add(1)
		if res.delay > 0 {
			c.retryLater(msg, id, res.delay)
		} else {
			c.nak(msg)
		}
	default:
		c.counters.handledFailed.Add(1)
		if c.handlerCtx.Err() != nil {
			// Interrupted by Stop: not the operation's failure.
			c.nak(msg)
			return
		}
		c.fail(msg, id, failures+1, res.Err())
	}
}

// retryLater sends msg back to be delivered again after delay, at most
// MaxHold. A message already sent back once and stored MaxHold ago or
// earlier is replaced instead: a fresh copy (with the original's failure
// headers) is stored at the stream's end, and the original is
// acknowledged once it is (if the copy cannot be stored, the original is
// sent back as usual). The copy is delivered at once, and its handler
// sends it back for the rest of the wait. So no message pins the stream's
// first sequence for more than about twice MaxHold (see
// ConsumerConfig.MaxHold).
//
// The message's age is the server's clock (its timestamp) read by this
// machine's: with a server behind this machine by more than MaxHold (an
// external one), every message, a copy stored a moment ago too, would
// look old enough, and a waiting operation would be copied and handed to
// its handler again and again, as fast as the server answers. A copy is
// therefore made only of a message sent back before (NumDelivered > 1):
// every message waits out one delay, whatever the clocks say.
func (c *Consumer) retryLater(msg jetstream.Msg, id string, delay time.Duration) {
	if md, err := msg.Metadata(); err == nil && md.NumDelivered > 1 && c.now().Sub(md.Timestamp) >= c.cfg.MaxHold {
		m := operationMsg(id, holdMsgID(id, md.Sequence.Stream))
		for _, h := range []string{HeaderFailures, HeaderRetryAt, HeaderReason} {
			if v := msg.Headers().Get(h); v != "" {
				m.Header.Set(h, v)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), c.b.cfg.PublishTimeout)
		defer cancel()
		if _, err := c.sess.js.PublishMsg(ctx, m); err == nil {
			c.settle(id, msg.DoubleAck(ctx))
			return
		}
	}
	c.settle(id, msg.NakWithDelay(min(delay, c.cfg.MaxHold)))
}

// call runs the handler, turning a panic into a failure.
func (c *Consumer) call(id string) (res Result) {
	defer func() {
		if r := recover(); r != nil {
			c.log.Error("handler panicked", zap.String(fieldEvent, "queue.handler_panic"),
				zap.String(fieldOperationID, id), zap.Stack("stack"))
			res = Failed(fmt.Errorf("handler panicked: %v", r))
		}
	}()
	return c.cfg.Handler(c.handlerCtx, id)
}

// settle logs a failed acknowledgement. The message is then redelivered
// after AckWait, which is safe: handling an operation twice is.
func (c *Consumer) settle(id string, err error) {
	if err != nil && !errors.Is(err, jetstream.ErrMsgAlreadyAckd) {
		c.log.Warn("acknowledgement not sent", zap.String(fieldEvent, "queue.ack_failed"),
			zap.String(fieldOperationID, id), zap.Error(err))
	}
}

// nak sends msg back for redelivery at once. It is a nak with the shortest
// delay rather than a plain one: JetStream keeps a plain nak's redelivery
// only in memory, so a server restarted meanwhile (the embedded one, with
// baton) would hold the message until its AckWait ran out (a minute by
// default); a delayed nak moves the message's stored deadline, which
// survives the restart.
func (c *Consumer) nak(msg jetstream.Msg) {
	c.settle(string(msg.Data()), msg.NakWithDelay(time.Millisecond))
}

// nakInHand naks the messages whose handlers are still running, so that
// they are redelivered at once rather than after AckWait.
func (c *Consumer) nakInHand() int {
	n := 0
	for i := range c.slots {
		if m := c.slots[i].get(); m != nil {
			c.nak(m)
			n++
		}
	}
	return n
}

// keepalive tells JetStream every AckWait/3 that the running messages are
// in progress, so that they are not redelivered while a handler runs.
func (c *Consumer) keepalive() {
	defer c.ka.Done()
	t := time.NewTicker(c.cfg.AckWait / 3)
	defer t.Stop()
	for {
		select {
		case <-c.quit:
			return
		case <-t.C:
			for i := range c.slots {
				if m := c.slots[i].get(); m != nil {
					if err := m.InProgress(); err != nil && !errors.Is(err, jetstream.ErrMsgAlreadyAckd) {
						c.log.Warn("in-progress signal not sent", zap.String(fieldEvent, "queue.in_progress_failed"),
							zap.String(fieldOperationID, string(m.Data())), zap.Error(err))
					}
				}
			}
		}
	}
}
