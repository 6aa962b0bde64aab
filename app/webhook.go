package app

import (
	"bytes"
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/baton-dev/baton/internal/sqlite"
	"github.com/baton-dev/baton/schema"
)

// DefaultWebhookMaxBody is the largest webhook body baton accepts: GitHub
// caps payloads at 25 MB.
const DefaultWebhookMaxBody = 25 << 20

// WebhookConfig configures a WebhookReceiver.
type WebhookConfig struct {
	// Ledger records the deliveries. Required.
	Ledger *DeliveryLedger
	// Secret is the App's webhook secret, which signs every delivery
	// (X-Hub-Signature-256). Required.
	Secret string
	// PreviousSecret is also accepted while the secret is being rotated.
	// Empty accepts only Secret.
	PreviousSecret string
	// MaxBodyBytes is the largest body accepted; larger ones are answered
	// 413. Defaults to DefaultWebhookMaxBody (25 MiB).
	MaxBodyBytes int64
	// MaxInFlightBytes bounds the bodies held in memory by requests being
	// read at once; a request that would pass it is answered 503 (GitHub
	// records the delivery as failed and the recovery loop has it
	// delivered again). Defaults to 256 MiB; at least MaxBodyBytes.
	MaxInFlightBytes int64
	// Replay makes a failed delivery pending again (EventDispatcher.Replay).
	// It is called when GitHub redelivers a delivery the ledger has as
	// failed: a redelivery asked for in GitHub (the App's recent
	// deliveries, or its API) is how an operator has a delivery baton gave
	// up on handled again, once its cause is mended. Nil: such a
	// redelivery is only counted, as any other.
	Replay func(ctx context.Context, deliveryID string) error
	// RecordTimeout bounds the ledger write before the answer, well inside
	// GitHub's 10 s: a write not done by then is answered 503, whatever
	// holds up the store's writer. Defaults to 5s.
	RecordTimeout time.Duration
	// Now is the clock of receipt times. Defaults to time.Now.
	Now func() time.Time
	// Logger defaults to zap.NewNop().
	Logger *zap.Logger
	// Registerer receives the receiver's metrics; nil registers none.
	Registerer prometheus.Registerer
}

// WebhookReceiver is the http.Handler of POST /webhooks/github. It checks
// the signature in constant time against the current and the previous
// secret, records the delivery in the ledger (durably) and deduplicates it
// by X-GitHub-Delivery before it answers 2xx, and leaves the work to the
// event dispatcher, so it answers in milliseconds.
//
// Answers: 202 a new delivery, recorded, or a redelivery of one that had
// failed, made pending again (WebhookConfig.Replay); 200 a delivery
// already recorded (nothing else happens); 400 missing X-GitHub-Delivery or X-GitHub-Event,
// or a body that is not a JSON object; 401 a missing or bad signature
// (nothing is recorded; checked before the delivery's headers and payload
// are looked at, so an unsigned request learns nothing else); 405 not a
// POST; 413 a body over MaxBodyBytes; 503 too many bodies in flight, the
// ledger's write not done within RecordTimeout, or the store unable to
// keep writes (a full disk); 500 the ledger could not be written otherwise.
// Errors have the API's shape: {"error": {"code", "message"}}.
type WebhookReceiver struct {
	cfg      WebhookConfig
	log      *zap.Logger
	secrets  atomic.Pointer[[]string]
	inFlight atomic.Int64
	requests *prometheus.CounterVec

	warnMu     sync.Mutex
	lastWarn   time.Time
	suppressed int
}

// NewWebhookReceiver validates cfg and returns the receiver.
func NewWebhookReceiver(cfg WebhookConfig) (*WebhookReceiver, error) {
	cfg.MaxBodyBytes = cmp.Or(cfg.MaxBodyBytes, DefaultWebhookMaxBody)
	cfg.MaxInFlightBytes = cmp.Or(cfg.MaxInFlightBytes, 256<<20)
	cfg.RecordTimeout = cmp.Or(cfg.RecordTimeout, 5*time.Second)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	var errs []error
	if cfg.Ledger == nil {
		errs = append(errs, errors.New("no Ledger"))
	}
	if cfg.Secret == "" {
		errs = append(errs, errors.New("no Secret"))
	}
	if cfg.MaxBodyBytes < 1 || cfg.MaxInFlightBytes < cfg.MaxBodyBytes {
		errs = append(errs, fmt.Errorf("want 1 <= MaxBodyBytes <= MaxInFlightBytes, not %d and %d", cfg.MaxBodyBytes, cfg.MaxInFlightBytes))
	}
	if cfg.RecordTimeout <= 0 {
		errs = append(errs, errors.New("want a positive RecordTimeout"))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("app: invalid webhook config: %w", errors.Join(errs...))
	}
	w := &WebhookReceiver{
		cfg: cfg,
		log: cfg.Logger.With(zap.String(logKeySubsystem, "webhook")),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "baton_webhook_requests_total",
			Help: "Requests to the webhook endpoint, by outcome (accepted, duplicate, replayed, unauthorized, invalid, too_large, busy, error).",
		}, []string{"outcome"}),
	}
	// Every outcome's series exists from the start, at 0, so that an
	// alert on the increase of one (unauthorized, error) sees its first.
	for _, o := range []string{"accepted", "duplicate", "replayed", "unauthorized", "invalid", "too_large", "busy", "error"} {
		w.requests.WithLabelValues(o)
	}
	w.SetSecrets(cfg.Secret, cfg.PreviousSecret)
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(w.requests); err != nil {
			return nil, fmt.Errorf("app: register webhook metrics: %w", err)
		}
	}
	return w, nil
}

// SetSecrets replaces the secrets deliveries are checked against (a
// rotation: the new secret, and the old one until GitHub uses the new).
// An empty current secret is ignored.
func (w *WebhookReceiver) SetSecrets(current, previous string) {
	if current == "" {
		return
	}
	s := []string{current}
	if previous != "" && previous != current {
		s = append(s, previous)
	}
	w.secrets.Store(&s)
}

var (
	deliveryIDRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$`)
	eventNameRE  = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)
)

// ServeHTTP implements http.Handler.
func (w *WebhookReceiver) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		rw.Header().Set("Allow", http.MethodPost)
		w.fail(rw, http.StatusMethodNotAllowed, "invalid", schema.CodeInvalidRequest, "webhooks are delivered with POST")
		return
	}
	if r.ContentLength > w.cfg.MaxBodyBytes {
		w.fail(rw, http.StatusRequestEntityTooLarge, "too_large", schema.CodePayloadTooLarge,
			fmt.Sprintf("the body is larger than %d bytes", w.cfg.MaxBodyBytes))
		return
	}
	sig, ok := parseHookSignature(r.Header.Get("X-Hub-Signature-256"))
	if !ok {
		w.unauthorized(rw, r, "missing or malformed X-Hub-Signature-256")
		return
	}

	secrets := *w.secrets.Load()
	macs := make([]hash.Hash, len(secrets))
	for i, s := range secrets {
		macs[i] = hmac.New(sha256.New, []byte(s))
	}
	body, status := w.readBody(r, macs)
	// The body's budget is given back when the request is done with it;
	// a ledger write that outlives the answer (see below) gives it back
	// when it ends instead.
	keepBudget := false
	defer func() {
		if !keepBudget {
			w.inFlight.Add(-int64(cap(body)))
		}
	}()
	switch status {
	case http.StatusOK:
	case http.StatusRequestEntityTooLarge:
		w.fail(rw, status, "too_large", schema.CodePayloadTooLarge, fmt.Sprintf("the body is larger than %d bytes", w.cfg.MaxBodyBytes))
		return
	case http.StatusServiceUnavailable:
		rw.Header().Set("Retry-After", "5")
		w.fail(rw, status, "busy", schema.CodeInternal, "too many webhook bodies in flight; try again")
		return
	default:
		w.fail(rw, http.StatusBadRequest, "invalid", schema.CodeInvalidRequest, "the body could not be read")
		return
	}
	valid := 0
	for _, m := range macs {
		// Every secret is checked, whatever the first gave.
		valid |= hmacBit(hmac.Equal(m.Sum(nil), sig))
	}
	if valid == 0 {
		w.unauthorized(rw, r, "the signature does not match")
		return
	}

	// The delivery's headers are checked only once the signature holds: an
	// unsigned caller learns nothing but 401.
	deliveryID := r.Header.Get("X-GitHub-Delivery")
	event := r.Header.Get("X-GitHub-Event")
	if deliveryID == "" || event == "" {
		w.fail(rw, http.StatusBadRequest, "invalid", schema.CodeInvalidRequest, "X-GitHub-Delivery and X-GitHub-Event are required")
		return
	}
	if !deliveryIDRE.MatchString(deliveryID) || !eventNameRE.MatchString(event) {
		w.fail(rw, http.StatusBadRequest, "invalid", schema.CodeInvalidRequest, "X-GitHub-Delivery or X-GitHub-Event is malformed")
		return
	}
	d, err := parseDelivery(deliveryID, event, body)
	if err != nil {
		w.fail(rw, http.StatusBadRequest, "invalid", schema.CodeInvalidRequest, err.Error())
		return
	}
	d.ReceivedAt = w.cfg.Now()

	ctx, cancel := context.WithTimeout(r.Context(), w.cfg.RecordTimeout)
	defer cancel()
	log := w.log.With(zap.String(logKeyDeliveryID, d.ID), zap.String(logKeyGitHubEvent, d.Event), zap.String(logKeyAction, d.Action),
		zap.Int64(logKeyInstallation, d.InstallationID), zap.String(logKeyRepository, d.Repository))
	// The store's writer does not give up on a write it has taken, however
	// long the writes ahead of it take (a slow disk): the answer does not
	// wait for it past RecordTimeout. A write still waiting then is not
	// made (the writer skips a write whose context has ended); one the
	// writer had begun may still commit, and the delivery is then in the
	// ledger though GitHub records it failed: handled once all the same,
	// and its redelivery counted as a duplicate. The replay of a failed
	// delivery, a second write, is bounded with it.
	type recordResult struct {
		created   bool
		err       error
		replayed  bool
		replayErr error
	}
	recorded := make(chan recordResult, 1)
	go func() {
		var res recordResult
		var state DeliveryState
		res.created, state, res.err = w.cfg.Ledger.record(ctx, d)
		if res.err == nil && !res.created && state == DeliveryFailed && w.cfg.Replay != nil {
			res.replayErr = w.cfg.Replay(ctx, d.ID)
			// An invalid_request: not failed any more, a concurrent
			// redelivery replayed it; this one is a duplicate.
			res.replayed = res.replayErr == nil
			if schema.ErrorCode(res.replayErr) == schema.CodeInvalidRequest {
				res.replayErr = nil
			}
		}
		recorded <- res
	}()
	var res recordResult
	select {
	case res = <-recorded:
	case <-ctx.Done():
		select {
		case res = <-recorded: // ended at the same time
		default:
			keepBudget = true
			go func() {
				<-recorded
				w.inFlight.Add(-int64(cap(body)))
			}()
			log.Error("recording a delivery took too long; answered 503", zap.String(logKeyEvent, "webhook.record_timeout"),
				zap.Duration("timeout", w.cfg.RecordTimeout))
			rw.Header().Set("Retry-After", "5")
			w.fail(rw, http.StatusServiceUnavailable, "busy", schema.CodeInternal, "the delivery could not be recorded in time; try again")
			return
		}
	}
	created := res.created
	storeErr := res.err
	if storeErr == nil {
		storeErr = res.replayErr
	}
	if err := storeErr; err != nil && (sqlite.IsStorageError(err) || sqlite.IsBusy(err)) {
		// The store cannot keep writes (a full disk, a failing one, its
		// lock held by another process): the same delivery is taken once
		// it can, as the API answers such a write. Nothing was recorded,
		// or the failed delivery is still failed.
		log.Error("recording a delivery failed: the store cannot write", zap.String(logKeyEvent, "webhook.store_unavailable"), zap.Error(err))
		rw.Header().Set("Retry-After", "5")
		w.fail(rw, http.StatusServiceUnavailable, "error", schema.CodeInternal, "baton cannot store the delivery at the moment; try again later")
		return
	}
	switch {
	case res.err != nil:
		log.Error("recording a delivery failed", zap.String(logKeyEvent, "webhook.record_failed"), zap.Error(res.err))
		w.fail(rw, http.StatusInternalServerError, "error", schema.CodeInternal, "internal error")
		return
	case res.replayErr != nil:
		// Still failed: GitHub records this redelivery as failed, and it
		// can be asked for again.
		log.Error("replaying a failed delivery failed", zap.String(logKeyEvent, "webhook.replay_failed"), zap.Error(res.replayErr))
		w.fail(rw, http.StatusInternalServerError, "error", schema.CodeInternal, "internal error")
		return
	case res.replayed:
		log.Info("redelivery of a failed delivery: handled again", zap.String(logKeyEvent, "webhook.replayed"))
		w.requests.WithLabelValues("replayed").Inc()
		writeWebhookJSON(rw, http.StatusAccepted, map[string]string{"deliveryId": d.ID, "status": "replayed"})
		return
	}
	if !created {
		log.Info("duplicate delivery ignored", zap.String(logKeyEvent, "webhook.duplicate"))
		w.requests.WithLabelValues("duplicate").Inc()
		writeWebhookJSON(rw, http.StatusOK, map[string]string{"deliveryId": d.ID, "status": "duplicate"})
		return
	}
	log.Info("delivery accepted", zap.String(logKeyEvent, "webhook.accepted"), zap.Int("bytes", len(body)))
	w.requests.WithLabelValues("accepted").Inc()
	writeWebhookJSON(rw, http.StatusAccepted, map[string]string{"deliveryId": d.ID, "status": "accepted"})
}

func hmacBit(b bool) int {
	if b {
		return 1
	}
	return 0
}

// readBody reads the body into memory, feeding the HMACs as it goes,
// within MaxBodyBytes and the in-flight budget. Its status is 200, 413
// (too large), 503 (budget spent) or 400 (read error). The caller gives
// back cap(body) bytes of budget when done.
//
// The buffer starts small and at most doubles as it fills, whatever
// Content-Length announces: the budget a request holds is at most about
// twice what it has sent. (Sized from Content-Length, an unsigned request
// announcing a large body and sending nothing held a mebibyte each, so a
// few hundred idle connections spent the whole budget and every
// delivery was refused.)
func (w *WebhookReceiver) readBody(r *http.Request, macs []hash.Hash) ([]byte, int) {
	limit := w.cfg.MaxBodyBytes
	initial := int64(4 << 10)
	if r.ContentLength >= 0 {
		initial = min(initial, r.ContentLength+1) // +1: EOF found without growing
	}
	if !w.reserve(initial) {
		return nil, http.StatusServiceUnavailable
	}
	buf := make([]byte, 0, initial)
	src := io.LimitReader(r.Body, limit+1)
	for {
		if len(buf) == cap(buf) {
			grow := int64(min(max(cap(buf), 4<<10), 4<<20))
			if int64(cap(buf))+grow > limit+1 {
				grow = limit + 1 - int64(cap(buf))
			}
			if grow <= 0 {
				break
			}
			newCap := int64(cap(buf)) + grow
			if cl := r.ContentLength; cl > 0 && int64(cap(buf)) <= cl {
				newCap = min(newCap, cl+1) // no more than the announced body needs
			}
			if !w.reserve(newCap) { // the old buffer is given back once copied
				w.inFlight.Add(-int64(cap(buf)))
				return nil, http.StatusServiceUnavailable
			}
			nb := make([]byte, len(buf), newCap)
			copy(nb, buf)
			w.inFlight.Add(-int64(cap(buf)))
			buf = nb
		}
		n, err := src.Read(buf[len(buf):cap(buf)])
		for _, m := range macs {
			m.Write(buf[len(buf) : len(buf)+n])
		}
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > limit {
			return buf, http.StatusRequestEntityTooLarge
		}
		if errors.Is(err, io.EOF) {
			return buf, http.StatusOK
		}
		if err != nil {
			return buf, http.StatusBadRequest
		}
	}
	if int64(len(buf)) > limit {
		return buf, http.StatusRequestEntityTooLarge
	}
	return buf, http.StatusOK
}

// reserve takes n bytes of the in-flight budget, or reports false.
func (w *WebhookReceiver) reserve(n int64) bool {
	if w.inFlight.Add(n) > w.cfg.MaxInFlightBytes {
		w.inFlight.Add(-n)
		return false
	}
	return true
}

// parseHookSignature reads "sha256=<64 hex digits>".
func parseHookSignature(h string) ([]byte, bool) {
	hexSum, ok := strings.CutPrefix(h, "sha256=")
	if !ok || len(hexSum) != 2*sha256.Size {
		return nil, false
	}
	sum, err := hex.DecodeString(hexSum)
	if err != nil {
		return nil, false
	}
	return sum, true
}

// webhookSignature is what X-Hub-Signature-256 carries for body signed
// with secret.
func webhookSignature(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// validWebhookSignature checks a signature header against body and secret, in
// constant time.
func validWebhookSignature(header string, body []byte, secret string) bool {
	sig, ok := parseHookSignature(header)
	if !ok {
		return false
	}
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return hmac.Equal(m.Sum(nil), sig)
}

// parseDelivery reads the fields baton indexes deliveries by.
func parseDelivery(id, event string, body []byte) (Delivery, error) {
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return Delivery{}, errors.New("the body is not a JSON object")
	}
	var p struct {
		Action       string `json:"action"`
		Installation *struct {
			ID int64 `json:"id"`
		} `json:"installation"`
		Repository *struct {
			FullName string `json:"full_name"`
		} `json:"repository"`
	}
	if err := json.Unmarshal(body, &p); err != nil {
		return Delivery{}, errors.New("the body is not a JSON object of GitHub's webhook shape")
	}
	d := Delivery{ID: id, Event: event, Action: p.Action, Payload: body}
	if p.Installation != nil {
		d.InstallationID = p.Installation.ID
	}
	if p.Repository != nil {
		d.Repository = p.Repository.FullName
	}
	if len(d.Action) > 64 || !utf8.ValidString(d.Action) || d.InstallationID < 0 ||
		len(d.Repository) > 256 || !validRepoName(d.Repository) {
		return Delivery{}, errors.New("the payload's action, installation or repository is malformed")
	}
	return d, nil
}

// validRepoName accepts "" or "owner/name" of printable characters.
func validRepoName(s string) bool {
	if s == "" {
		return true
	}
	owner, name, ok := strings.Cut(s, "/")
	if !ok || owner == "" || name == "" || strings.Contains(name, "/") {
		return false
	}
	for _, r := range s {
		if r < 0x21 || r == 0x7f || r == utf8.RuneError {
			return false
		}
	}
	return true
}

// unauthorized answers 401; the warning is logged at most every 10 s (an
// attack must not flood the log), with the count of those left out.
func (w *WebhookReceiver) unauthorized(rw http.ResponseWriter, r *http.Request, why string) {
	w.warnMu.Lock()
	now := time.Now()
	var suppressed int
	logIt := now.Sub(w.lastWarn) >= 10*time.Second
	if logIt {
		w.lastWarn, suppressed, w.suppressed = now, w.suppressed, 0
	} else {
		w.suppressed++
	}
	w.warnMu.Unlock()
	if logIt {
		w.log.Warn("webhook refused: bad signature (is the webhook secret the App's?)", zap.String(logKeyEvent, "webhook.unauthorized"),
			zap.String("reason", why), zap.String("remoteAddr", r.RemoteAddr), zap.Int("suppressed", suppressed))
	}
	w.fail(rw, http.StatusUnauthorized, "unauthorized", schema.CodeUnauthorized, "invalid webhook signature")
}

func (w *WebhookReceiver) fail(rw http.ResponseWriter, status int, outcome string, code schema.Code, msg string) {
	w.requests.WithLabelValues(outcome).Inc()
	writeWebhookJSON(rw, status, map[string]any{"error": map[string]any{"code": code, "message": msg}})
}

func writeWebhookJSON(rw http.ResponseWriter, status int, v any) {
	rw.Header().Set("Content-Type", "application/json; charset=utf-8")
	rw.Header().Set("Cache-Control", "no-store")
	rw.WriteHeader(status)
	_ = json.NewEncoder(rw).Encode(v)
}
