package queue

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// maxReasonBytes bounds a failure reason kept in a header.
const maxReasonBytes = 512

// failureState reads the failure count a message carries and how long its
// backoff still runs (0: hand it to the handler). A message without
// failures costs two map lookups.
func failureState(h nats.Header) (failures int, wait time.Duration) {
	v := h.Get(HeaderFailures)
	if v == "" {
		return 0, 0
	}
	if n, err := strconv.Atoi(v); err == nil && n > 0 {
		failures = n
	}
	if v := h.Get(HeaderRetryAt); v != "" {
		if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
			wait = max(time.Until(t), 0)
		}
	}
	return failures, wait
}

// backoff is the delay after the n-th failure: FailureBackoff·2^(n−1),
// capped at MaxFailureBackoff.
func (c *Consumer) backoff(n int) time.Duration {
	d := c.cfg.FailureBackoff
	for i := 1; i < n && d < c.cfg.MaxFailureBackoff; i++ {
		d *= 2
	}
	return min(d, c.cfg.MaxFailureBackoff)
}

// fail records the n-th failure of the operation in msg. Below MaxFailures
// it stores a copy of the message carrying the count and the end of its
// backoff, then acknowledges the original; at MaxFailures it stores a dead
// letter instead. The copy or dead letter is stored before the original is
// acknowledged, so an operation is never in neither stream; their message
// IDs are derived from the original's sequence, so repeating the step after
// a crash stores nothing new within the dedupe window. If the copy cannot be stored, the original is
// nak'ed with the backoff and this failure is not counted.
func (c *Consumer) fail(msg jetstream.Msg, id string, n int, cause error) {
	reason := reasonText(cause)
	var seq uint64
	if md, err := msg.Metadata(); err == nil {
		seq = md.Sequence.Stream
	}
	delay := c.backoff(n)
	ctx, cancel := context.WithTimeout(context.Background(), c.b.cfg.PublishTimeout)
	defer cancel()
	log := c.log.With(zap.String(fieldOperationID, id), zap.Int(fieldFailures, n), zap.String(fieldReason, reason))

	if n >= c.cfg.MaxFailures {
		err := c.sess.deadLetter(ctx, id, n, reason, seq)
		if errors.Is(err, errDeadLetterExists) {
			// An operation can have two messages at once (its dispatch and
			// a nudge); each counts its own failures, but replaying two
			// dead letters would publish it twice.
			c.settle(id, msg.DoubleAck(ctx))
			log.Warn("operation already in the dead-letter stream; message dropped", zap.String(fieldEvent, "queue.dead_letter_exists"))
			return
		}
		if err != nil {
			log.Error("dead letter not stored; retrying", zap.String(fieldEvent, "queue.dead_letter_failed"), zap.Error(err))
			c.settle(id, msg.NakWithDelay(delay))
			return
		}
		c.b.counters.deadLettered.Add(1)
		c.settle(id, msg.DoubleAck(ctx))
		log.Error("operation moved to the dead-letter stream", zap.String(fieldEvent, "queue.dead_lettered"))
		return
	}

	m := operationMsg(id, retryMsgID(id, n, seq))
	m.Header.Set(HeaderFailures, strconv.Itoa(n))
	m.Header.Set(HeaderRetryAt, time.Now().Add(delay).UTC().Format(time.RFC3339Nano))
	m.Header.Set(HeaderReason, reason)
	ack, err := c.sess.js.PublishMsg(ctx, m)
	if err != nil {
		log.Error("failure not recorded; retrying", zap.String(fieldEvent, "queue.failure_not_recorded"), zap.Error(err))
		c.settle(id, msg.NakWithDelay(delay))
		return
	}
	if !ack.Duplicate {
		// Messages stored, as Dispatch counts: a copy an earlier attempt
		// stored (its ack of the original was lost) is not one more.
		c.b.counters.retriesPublished.Add(1)
	}
	c.settle(id, msg.DoubleAck(ctx))
	log.Warn("handler failed; retrying after backoff", zap.String(fieldEvent, "queue.handler_failed"),
		zap.Duration("backoff", delay))
}

// reasonText makes err's text fit a header: one line, valid UTF-8, at most
// maxReasonBytes.
func reasonText(err error) string {
	s := strings.Join(strings.Fields(strings.ToValidUTF8(err.Error(), "?")), " ")
	if len(s) <= maxReasonBytes {
		return s
	}
	s = s[:maxReasonBytes]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s + "…"
}
