package schema

import (
	"encoding/json"

	"github.com/gowebpki/jcs"
)

// Canonical returns the RFC 8785 (JCS) form of the JSON document raw: keys
// sorted recursively by UTF-16 code units, no insignificant white space,
// numbers in ECMAScript form and strings with JCS's minimal escaping. The
// transformation is done by github.com/gowebpki/jcs; invalid JSON (including
// lone surrogates and duplicate keys) is an error.
func Canonical(raw []byte) ([]byte, error) {
	out, err := jcs.Transform(raw)
	if err != nil {
		return nil, Invalidf("not canonicalizable JSON: %s", truncate(err.Error(), 120))
	}
	return out, nil
}

// CanonicalOf marshals v with encoding/json and returns its canonical form.
func CanonicalOf(v any) ([]byte, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, Invalidf("not encodable as JSON: %s", truncate(err.Error(), 120))
	}
	return Canonical(raw)
}
