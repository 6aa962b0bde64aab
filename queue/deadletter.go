package queue

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// ErrDeadLetterNotFound is returned for a sequence that holds no dead
// letter (never did, or it was replayed or purged).
var ErrDeadLetterNotFound = errors.New("queue: dead letter not found")

// DeadLetter is an operation in StreamDeadLetters.
type DeadLetter struct {
	// Sequence is the dead letter's sequence in StreamDeadLetters: what
	// ReplayDeadLetter takes.
	Sequence    uint64    `json:"sequence"`
	OperationID string    `json:"operationId"`
	Reason      string    `json:"reason"`   // the last failure's error text
	Failures    int       `json:"failures"` // consumer failures counted
	Time        time.Time `json:"time"`     // when it was dead-lettered
}

// deadLetter stores a dead letter for the operation, whose message (at
// sequence fromSeq in StreamOperations) failed n times.
func (s *session) deadLetter(ctx context.Context, id string, n int, reason string, fromSeq uint64) error {
	m := &nats.Msg{
		Subject: DeadLetterSubject(id),
		Data:    []byte(id),
		Header: nats.Header{
			jetstream.MsgIDHeader: []string{deadLetterMsgID(id, fromSeq)},
			HeaderFailures:        []string{strconv.Itoa(n)},
			HeaderReason:          []string{reason},
		},
	}
	// The operation gets one dead letter however many of its messages
	// fail (a dispatch and a nudge can both be in OPERATIONS): the store
	// is refused when the subject already holds one.
	_, err := s.js.PublishMsg(ctx, m, jetstream.WithExpectLastSequencePerSubject(0))
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence {
		return errDeadLetterExists
	}
	return err
}

// errDeadLetterExists is deadLetter's answer when the operation already
// has a dead letter.
var errDeadLetterExists = errors.New("queue: the operation already has a dead letter")

// DeadLetters lists up to limit dead letters with a sequence above after,
// oldest first (limit <= 0: 100). To page, pass the last Sequence seen.
func (b *Broker) DeadLetters(ctx context.Context, after uint64, limit int) ([]DeadLetter, error) {
	s, err := b.session()
	if err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = 100
	}
	out := []DeadLetter{}
	if after == math.MaxUint64 {
		return out, nil // nothing can come after the last sequence
	}
	seq := after + 1
	for len(out) < limit {
		raw, err := s.dlq.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(deadLettersPrefix+">"))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("queue: list dead letters: %w", err)
		}
		if dl, ok := parseDeadLetter(raw); ok {
			out = append(out, dl)
		}
		seq = raw.Sequence + 1
	}
	return out, nil
}

// DeadLetter returns the dead letter at seq.
func (b *Broker) DeadLetter(ctx context.Context, seq uint64) (DeadLetter, error) {
	s, err := b.session()
	if err != nil {
		return DeadLetter{}, err
	}
	return s.getDeadLetter(ctx, seq)
}

// DeadLetterOf returns the operation's dead letter (an operation has at
// most one), or ErrDeadLetterNotFound when it has none: what the status
// view shows of an operation that waits for an operator.
func (b *Broker) DeadLetterOf(ctx context.Context, operationID string) (DeadLetter, error) {
	s, err := b.session()
	if err != nil {
		return DeadLetter{}, err
	}
	raw, err := s.dlq.GetLastMsgForSubject(ctx, DeadLetterSubject(operationID))
	return readDeadLetter(raw, err, "operation "+operationID)
}

func (s *session) getDeadLetter(ctx context.Context, seq uint64) (DeadLetter, error) {
	raw, err := s.dlq.GetMsg(ctx, seq)
	return readDeadLetter(raw, err, fmt.Sprintf("sequence %d", seq))
}

// readDeadLetter is the dead letter of a stream read (what names what was
// asked for): ErrDeadLetterNotFound when there is none there.
func readDeadLetter(raw *jetstream.RawStreamMsg, err error, what string) (DeadLetter, error) {
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return DeadLetter{}, fmt.Errorf("%w: %s", ErrDeadLetterNotFound, what)
	}
	if err != nil {
		return DeadLetter{}, fmt.Errorf("queue: get the dead letter of %s: %w", what, err)
	}
	dl, ok := parseDeadLetter(raw)
	if !ok {
		return DeadLetter{}, fmt.Errorf("%w: %s is not a dead letter", ErrDeadLetterNotFound, what)
	}
	return dl, nil
}

func parseDeadLetter(raw *jetstream.RawStreamMsg) (DeadLetter, bool) {
	id, ok := operationIDFromSubject(raw.Subject, deadLettersPrefix)
	if !ok {
		return DeadLetter{}, false
	}
	n, _ := strconv.Atoi(raw.Header.Get(HeaderFailures))
	return DeadLetter{
		Sequence:    raw.Sequence,
		OperationID: id,
		Reason:      raw.Header.Get(HeaderReason),
		Failures:    n,
		Time:        raw.Time,
	}, true
}

// ReplayDeadLetter puts the operation of the dead letter at seq back into
// StreamOperations with no failures counted, then removes the dead letter.
// The replayed message has its own message ID, so it is stored even within
// the dedupe window of the operation's first dispatch. If baton stops
// between the two steps, the dead letter stays, and replaying it again
// within the dedupe window stores nothing new (later, a second message the
// executor finds already handled). Of replays of one dead letter at once,
// the one that removes it is the replay: the others store nothing new
// either, and are ErrDeadLetterNotFound, as they would be a moment later.
func (b *Broker) ReplayDeadLetter(ctx context.Context, seq uint64) (DeadLetter, error) {
	s, err := b.session()
	if err != nil {
		return DeadLetter{}, err
	}
	dl, err := s.getDeadLetter(ctx, seq)
	if err != nil {
		return DeadLetter{}, err
	}
	if _, err := s.js.PublishMsg(ctx, operationMsg(dl.OperationID, replayMsgID(dl.OperationID, seq))); err != nil {
		return DeadLetter{}, fmt.Errorf("queue: replay dead letter %d: %w", seq, err)
	}
	if err := s.deleteDeadLetter(ctx, seq); err != nil {
		if errors.Is(err, ErrDeadLetterNotFound) {
			// Replayed by another caller meanwhile (whose message this
			// one's duplicates), or removed.
			return DeadLetter{}, fmt.Errorf("%w: sequence %d was replayed or removed meanwhile", ErrDeadLetterNotFound, seq)
		}
		return DeadLetter{}, fmt.Errorf("queue: remove replayed dead letter %d: %w", seq, err)
	}
	b.counters.replayed.Add(1)
	b.log.Info("dead letter replayed", zap.String(fieldEvent, "queue.dead_letter_replayed"),
		zap.String(fieldOperationID, dl.OperationID), zap.Uint64(fieldSequence, seq))
	return dl, nil
}

// DeadLetterCount returns how many dead letters wait in StreamDeadLetters
// (neither replayed nor purged): what an operator is to look at.
func (b *Broker) DeadLetterCount(ctx context.Context) (uint64, error) {
	s, err := b.session()
	if err != nil {
		return 0, err
	}
	info, err := s.dlq.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("queue: count dead letters: %w", err)
	}
	return info.State.Msgs, nil
}

// RemoveDeadLetter deletes the dead letter at seq without replaying it.
// It is for dead letters that no longer stand for anything: their
// operation was cancelled and its record deleted after the retention. A
// sequence that holds no dead letter (any more: replayed or removed since
// it was listed) is ErrDeadLetterNotFound.
func (b *Broker) RemoveDeadLetter(ctx context.Context, seq uint64) error {
	s, err := b.session()
	if err != nil {
		return err
	}
	if _, err := s.getDeadLetter(ctx, seq); err != nil {
		return err
	}
	return s.deleteDeadLetter(ctx, seq)
}

// deleteDeadLetter deletes the dead letter at seq; ErrDeadLetterNotFound
// when it is gone already. JetStream answers the deletion of a message
// deleted meanwhile (a replay and the dead-letter sweep racing) with a
// plain "deletion unsuccessful", not "not found": the message is looked
// for again to tell.
func (s *session) deleteDeadLetter(ctx context.Context, seq uint64) error {
	err := s.dlq.DeleteMsg(ctx, seq)
	if err == nil {
		return nil
	}
	if _, gerr := s.getDeadLetter(ctx, seq); errors.Is(gerr, ErrDeadLetterNotFound) {
		return gerr
	}
	return fmt.Errorf("queue: remove dead letter %d: %w", seq, err)
}

// PurgeDeadLetters removes every dead letter. The operations' records are
// not touched: one that is not terminal is published again by the
// reconciler, so cancel operations before purging their dead letters.
func (b *Broker) PurgeDeadLetters(ctx context.Context) error {
	s, err := b.session()
	if err != nil {
		return err
	}
	if err := s.dlq.Purge(ctx); err != nil {
		return fmt.Errorf("queue: purge dead letters: %w", err)
	}
	b.log.Info("dead letters purged", zap.String(fieldEvent, "queue.dead_letters_purged"))
	return nil
}
