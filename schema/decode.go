package schema

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"strconv"
	"strings"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// DecodeStrict decodes raw, which must hold one JSON object and nothing
// after it, into v (a pointer to a struct) strictly:
//
//   - member names match the struct's JSON names exactly, case included;
//   - a name appears at most once in an object, at any depth (also inside
//     json.RawMessage fields such as a submission's payload);
//   - strings are valid UTF-8 (no lone surrogates);
//   - a member v does not have is an error, as is a value of the wrong
//     type.
//
// Go's encoding/json would instead match names case-insensitively, keep
// the last of two members of the same name and replace invalid UTF-8, so
// that two requests a client thinks different would be one, and a member
// could pass validation under one spelling and be stored under another.
//
// Every error is an invalid_request *Error naming the member: doc names
// the document in messages about all of it ("request body", "payload")
// and prefix is put before member paths ("payload" gives "payload.body";
// "" gives "resource.type").
func DecodeStrict(raw []byte, v any, doc, prefix string) error {
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 {
		return Invalidf("%s must be a JSON object", doc)
	}
	err := jsonv2.Unmarshal(raw, v, jsonv2.RejectUnknownMembers(true))
	if err == nil {
		if trimmed[0] != '{' {
			// Only null gets here: it decodes into a struct as nothing.
			return Invalidf("%s must be a JSON object, not %s", doc, kindName(jsontext.Value(trimmed).Kind()))
		}
		return nil
	}
	var (
		syn *jsontext.SyntacticError
		sem *jsonv2.SemanticError
	)
	switch {
	case errors.As(err, &syn):
		at := memberPath(syn.JSONPointer, prefix)
		switch {
		case errors.Is(syn.Err, jsontext.ErrDuplicateName):
			return Invalidf("field %s appears more than once", at)
		case errors.Is(syn.Err, io.ErrUnexpectedEOF):
			return Invalidf("%s is not valid JSON: it ends too early", doc)
		case syn.Err == nil:
			return Invalidf("%s is not valid JSON at byte %d", doc, syn.ByteOffset)
		}
		// The remaining syntactic errors (invalid UTF-8, a bad escape,
		// an unexpected character) say what is wrong themselves.
		what := truncate(syn.Err.Error(), 120)
		if syn.JSONPointer != "" {
			return Invalidf("%s is not valid JSON in %s (byte %d): %s", doc, at, syn.ByteOffset, what)
		}
		return Invalidf("%s is not valid JSON at byte %d: %s", doc, syn.ByteOffset, what)
	case errors.As(err, &sem):
		at := memberPath(sem.JSONPointer, prefix)
		if errors.Is(sem.Err, jsonv2.ErrUnknownName) {
			return Invalidf("unknown field %s (field names are case-sensitive)", at)
		}
		if sem.JSONPointer == "" {
			return Invalidf("%s must be a JSON object, not %s", doc, kindName(sem.JSONKind))
		}
		if sem.GoType != nil {
			return Invalidf("field %s must be %s, not %s", at, goKindName(sem.GoType), kindName(sem.JSONKind))
		}
		return Invalidf("field %s has a value of the wrong type", at)
	}
	return Invalidf("%s: %s", doc, truncate(strings.TrimPrefix(err.Error(), "json: "), 120))
}

// ValidJSON reports whether raw is one JSON value that DecodeStrict would
// accept as text: no duplicate member names at any depth, valid UTF-8.
func ValidJSON(raw []byte) bool { return jsontext.Value(raw).IsValid() }

// memberPath writes a JSON pointer as a dotted path for messages:
// "/resource/type" is resource.type, "/labels/0" is labels[0]; names that
// are not plain words are quoted. Long paths are shortened.
func memberPath(p jsontext.Pointer, prefix string) string {
	var b strings.Builder
	b.WriteString(prefix)
	for tok := range p.Tokens() {
		switch {
		case tok != "" && strings.Trim(tok, "0123456789") == "":
			b.WriteString("[" + truncate(tok, 12) + "]")
		case plainName(tok):
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(truncate(tok, 60))
		default:
			b.WriteString("[" + strconv.Quote(truncate(tok, 60)) + "]")
		}
		if b.Len() > 200 {
			return truncate(b.String(), 200)
		}
	}
	if b.Len() == 0 {
		return "(the document)"
	}
	return b.String()
}

// plainName reports whether a member name can be written unquoted.
func plainName(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// kindName names a JSON kind for messages.
func kindName(k jsontext.Kind) string {
	switch k {
	case 'n':
		return "null"
	case 'f', 't':
		return "a boolean"
	case '"':
		return "a string"
	case '0':
		return "a number"
	case '{':
		return "an object"
	case '[':
		return "an array"
	}
	return "another value"
}

// goKindName names the JSON value a Go type decodes from.
func goKindName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer in range"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Pointer:
		return goKindName(t.Elem())
	}
	return "of another type"
}
