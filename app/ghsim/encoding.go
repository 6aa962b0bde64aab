package ghsim

import (
	"bytes"
	"cmp"
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Errors returned by the Go API. Callers branch with errors.Is.
var (
	// ErrNotFound: the repository, installation, issue, pull request, ref,
	// commit or object named does not exist.
	ErrNotFound = errors.New("not found")
	// ErrInvalid: the arguments are malformed.
	ErrInvalid = errors.New("invalid argument")
	// ErrExists: the object to create exists already.
	ErrExists = errors.New("already exists")
)

// formatTime writes a timestamp as GitHub does: UTC, whole seconds.
func formatTime(t time.Time) string { return t.UTC().Truncate(time.Second).Format(time.RFC3339) }

// formatTimePtr is formatTime, or JSON null for the zero time.
func formatTimePtr(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return formatTime(t)
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("ghsim: encode %T: %v", v, err))
	}
	return b
}

// nodeID makes a GraphQL-style node ID for an object.
func nodeID(prefix string, id int64) string {
	return prefix + base64.RawURLEncoding.EncodeToString(strconv.AppendInt([]byte("ghsim:"), id, 10))
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

func randomBase62(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = base62[int(b[i])%len(base62)]
	}
	return string(b)
}

// newGUID returns a random version-4 UUID, as X-GitHub-Delivery carries.
func newGUID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// fakeSHA derives a 40-hex commit SHA from its content.
func fakeSHA(parts ...string) string {
	h := sha1.Sum([]byte(strings.Join(parts, "\x00")))
	return hex.EncodeToString(h[:])
}

// isSHA reports whether s looks like a full commit SHA.
func isSHA(s string) bool {
	if len(s) != 40 {
		return false
	}
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

func appendUnique(ids []int64, id int64) []int64 {
	if slices.Contains(ids, id) {
		return ids
	}
	return append(ids, id)
}

func removeID(ids []int64, id int64) []int64 {
	return slices.DeleteFunc(ids, func(x int64) bool { return x == id })
}

func sortBy[T any, K cmp.Ordered](xs []T, key func(T) K) {
	slices.SortFunc(xs, func(a, b T) int { return cmp.Compare(key(a), key(b)) })
}

// encodeBuffers recycles the buffers that responses and webhook payloads
// are encoded into: most are a few kilobytes, and growing a fresh buffer to
// that size for every request was a large share of the simulator's
// allocations. Buffers grown past maxPooledBuffer are left to the GC.
var encodeBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 8<<10); return &b }}

const maxPooledBuffer = 1 << 20

// withEncoded calls f with v encoded by appendJSON into a recycled buffer,
// which f must not retain.
func withEncoded(v any, f func([]byte)) error {
	bp := encodeBuffers.Get().(*[]byte)
	b, err := appendJSON((*bp)[:0], v)
	if err == nil {
		f(b)
		*bp = b[:0]
	}
	if cap(*bp) <= maxPooledBuffer {
		encodeBuffers.Put(bp)
	}
	return err
}

// encodeJSON encodes v by appendJSON into a slice of its own, of the
// encoding's size.
func encodeJSON(v any) (json.RawMessage, error) {
	var out json.RawMessage
	err := withEncoded(v, func(b []byte) { out = bytes.Clone(b) })
	return out, err
}

// appendJSON encodes v as encoding/json would (object keys sorted), but
// copies json.RawMessage fragments as they are instead of re-validating
// them: responses are mostly pre-rendered users and repositories, and
// re-compacting those dominated the simulator's CPU time.
func appendJSON(buf []byte, v any) ([]byte, error) {
	switch t := v.(type) {
	case json.RawMessage:
		return append(buf, t...), nil
	case map[string]any:
		if t == nil {
			return append(buf, "null"...), nil
		}
		var small [32]string // the keys of most objects, without an allocation
		keys := small[:0]
		for k := range t {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		buf = append(buf, '{')
		for i, k := range keys {
			if i > 0 {
				buf = append(buf, ',')
			}
			buf = appendJSONString(buf, k)
			buf = append(buf, ':')
			var err error
			if buf, err = appendJSON(buf, t[k]); err != nil {
				return nil, err
			}
		}
		return append(buf, '}'), nil
	case []any:
		if t == nil {
			return append(buf, "null"...), nil
		}
		buf = append(buf, '[')
		for i, e := range t {
			if i > 0 {
				buf = append(buf, ',')
			}
			var err error
			if buf, err = appendJSON(buf, e); err != nil {
				return nil, err
			}
		}
		return append(buf, ']'), nil
	case []json.RawMessage:
		if t == nil {
			return append(buf, "null"...), nil
		}
		buf = append(buf, '[')
		for i, e := range t {
			if i > 0 {
				buf = append(buf, ',')
			}
			buf = append(buf, e...)
		}
		return append(buf, ']'), nil
	case string:
		return appendJSONString(buf, t), nil
	case nil:
		return append(buf, "null"...), nil
	case bool:
		return strconv.AppendBool(buf, t), nil
	case int:
		return strconv.AppendInt(buf, int64(t), 10), nil
	case int64:
		return strconv.AppendInt(buf, t, 10), nil
	default:
		b, err := json.Marshal(v)
		return append(buf, b...), err
	}
}

// appendJSONString quotes s, taking the fast path for plain ASCII.
func appendJSONString(buf []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x80 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			b, _ := json.Marshal(s)
			return append(buf, b...)
		}
	}
	buf = append(buf, '"')
	buf = append(buf, s...)
	return append(buf, '"')
}
