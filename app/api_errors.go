package app

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/baton-dev/baton/internal/sqlite"
	"github.com/baton-dev/baton/schema"
)

// APIErrorBody is the body of every error the API answers.
type APIErrorBody struct {
	Error APIError `json:"error"`
}

// APIError is the error object of an error body.
type APIError struct {
	Code    schema.Code    `json:"code"`
	Message string         `json:"message"`
	Details map[string]any `json:"details,omitempty"`
}

// apiStatusError answers err's code with a status other than the table's:
// 405 (method not allowed, code invalid_request) and 503 (the queue not
// reachable, the store unable to write: code internal).
type apiStatusError struct {
	status int
	err    *schema.Error
}

func (e *apiStatusError) Error() string { return e.err.Error() }
func (e *apiStatusError) Unwrap() error { return e.err }

// WriteAPIError writes err the way the API does: its code's status and the
// error body; an error without a code is logged and answered as internal.
// For handlers mounted with Handle or HandleAuthenticated.
func (a *API) WriteAPIError(w http.ResponseWriter, r *http.Request, err error) {
	a.writeError(w, r, err)
}

func (a *API) writeError(w http.ResponseWriter, r *http.Request, err error) {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		err = a.tooLarge()
	}
	if schema.ErrorCode(err) == schema.CodeInternal && sqlite.IsStorageError(err) {
		// The store cannot keep writes (a full disk): the same request
		// succeeds once there is room.
		a.log.Warn("write refused: the store cannot write", zap.String("event", "api_storage_unavailable"),
			zap.String("method", r.Method), zap.String("route", r.Pattern), zap.Error(err))
		err = errStoreUnavailable
	} else if schema.ErrorCode(err) == schema.CodeInternal && sqlite.IsBusy(err) {
		// Another process (`baton token`, an operator's sqlite3) held the
		// database's write lock past the busy timeout: nothing was
		// written, and the same request succeeds once it lets go.
		a.log.Warn("write refused: the database is locked by another process", zap.String("event", "api_store_busy"),
			zap.String("method", r.Method), zap.String("route", r.Pattern), zap.Error(err))
		err = errStoreBusy
	}
	code := schema.ErrorCode(err)
	status, ok := schema.HTTPStatus(code)
	if !ok {
		code, status = schema.CodeInternal, http.StatusInternalServerError
	}
	var se *apiStatusError
	if errors.As(err, &se) {
		status = se.status
	}
	if se != nil && code == schema.CodeInternal && status == http.StatusServiceUnavailable {
		// A dependency is away for a while (errQueueUnavailable,
		// errStoreUnavailable: the only internal errors answered 503).
		// Its message is baton's own words, never a cause's.
		w.Header().Set("Retry-After", "5")
		a.writeErrorBody(w, status, code, se.err.Message, nil)
		return
	}
	if code == schema.CodeInternal {
		a.log.Error("internal error", zap.String("event", "api_internal_error"),
			zap.String("method", r.Method), zap.String("route", r.Pattern), zap.Error(err))
		a.writeErrorBody(w, status, code, "internal error", nil)
		return
	}
	if code == schema.CodeUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="baton"`)
	}
	a.writeErrorBody(w, status, code, schema.PublicMessage(err), schema.ErrorDetails(err))
}

// errStoreUnavailable answers a request whose write the store could not
// keep for want of storage: 503 with Retry-After, not a bare 500, so
// clients know to try again (a submission with the same idempotency key).
var errStoreUnavailable = &apiStatusError{status: http.StatusServiceUnavailable,
	err: schema.Errorf(schema.CodeInternal, "baton cannot store writes at the moment (its storage is full or failing); try again later")}

// errStoreBusy answers a request whose write waited in vain for the
// database's lock, held by another process: 503 with Retry-After, as
// errStoreUnavailable, since the same request succeeds once it is free.
var errStoreBusy = &apiStatusError{status: http.StatusServiceUnavailable,
	err: schema.Errorf(schema.CodeInternal, "baton's database is locked by another process at the moment; try again later")}

func (a *API) writeErrorBody(w http.ResponseWriter, status int, code schema.Code, msg string, details map[string]any) {
	body, err := json.Marshal(APIErrorBody{APIError{Code: code, Message: msg, Details: details}})
	if err != nil {
		body = []byte(`{"error":{"code":"internal","message":"internal error"}}`)
		status = http.StatusInternalServerError
	}
	body = append(body, '\n')
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// decodeAPIBody decodes a JSON object from the request body into dst,
// strictly (schema.DecodeStrict): the body must be one JSON object with
// the right types and nothing after it, field names match exactly (case
// included), no name appears twice at any depth (the payload included),
// strings are valid UTF-8, and unknown fields are an error. A body over
// the size limit is passed through as *http.MaxBytesError.
func decodeAPIBody(r *http.Request, dst any) error {
	if r.Body == nil || r.Body == http.NoBody {
		return schema.Invalidf("request body must be a JSON object")
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return err
		}
		return schema.Invalidf("request body could not be read")
	}
	return schema.DecodeStrict(body, dst, "request body", "")
}

// apiStatusRecorder remembers the status a handler wrote, for metrics.
type apiStatusRecorder struct {
	http.ResponseWriter
	status int
	// waited is set by a request that waited for an operation (?wait=):
	// its time is the wait the client asked for, not how long baton took
	// to answer, and it is left out of the duration histogram.
	waited bool
}

// markWaited tells the metrics that the request waited on purpose.
func markWaited(w http.ResponseWriter) {
	if s, ok := w.(*apiStatusRecorder); ok {
		s.waited = true
	}
}

func (s *apiStatusRecorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *apiStatusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection.
func (s *apiStatusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// Flush passes flushes on (promhttp and long answers use them).
func (s *apiStatusRecorder) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// apiMetrics are the API's Prometheus metrics.
type apiMetrics struct {
	requests  *prometheus.CounterVec
	durations *prometheus.HistogramVec
	duration  map[string]prometheus.Observer
	// byRoute caches the request counters of each route and status class.
	byRoute map[string]*[6]prometheus.Counter
}

func newAPIMetrics(reg prometheus.Registerer, routes []string) (*apiMetrics, error) {
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "baton_api_requests_total",
		Help: "API requests answered, by route and status class (2xx, 4xx…).",
	}, []string{"route", "code"})
	duration := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "baton_api_request_duration_seconds",
		Help:    "Time to answer API requests, by route.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .02, .05, .1, .25, .5, 1, 2.5, 10, 60},
	}, []string{"route"})
	if reg != nil {
		for _, c := range []prometheus.Collector{requests, duration} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("app: register API metrics: %w", err)
			}
		}
	}
	m := &apiMetrics{requests: requests, durations: duration, duration: map[string]prometheus.Observer{}, byRoute: map[string]*[6]prometheus.Counter{}}
	for _, r := range routes {
		m.add(r)
	}
	return m, nil
}

// add makes route's series (at 0), once.
func (m *apiMetrics) add(route string) {
	if m.byRoute[route] != nil {
		return
	}
	m.duration[route] = m.durations.WithLabelValues(route)
	var cs [6]prometheus.Counter
	for class := 1; class <= 5; class++ {
		cs[class] = m.requests.WithLabelValues(route, strconv.Itoa(class)+"xx")
	}
	m.byRoute[route] = &cs
}

// instrument counts and times the requests of one route.
func (a *API) instrument(route string, h http.Handler) http.Handler {
	obs := a.metrics.duration[route]
	counters := a.metrics.byRoute[route]
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &apiStatusRecorder{ResponseWriter: w}
		defer func() {
			class := rec.status / 100
			if class < 1 || class > 5 {
				class = 2
			}
			counters[class].Inc()
			if !rec.waited {
				obs.Observe(time.Since(start).Seconds())
			}
		}()
		h.ServeHTTP(rec, r)
	})
}
