package schema

import (
	"encoding/json"
	"strings"
	"testing"
)

// decodeTarget stands for an API request body: a nested object and a raw
// payload, like a submission.
type decodeTarget struct {
	Key      string          `json:"idempotencyKey"`
	Resource Resource        `json:"resource"`
	Payload  json.RawMessage `json:"payload"`
	Attempts int             `json:"maxAttempts,omitempty"`
}

// What encoding/json lets through (case-folded names, repeated names,
// invalid UTF-8) is refused, with a message naming the field.
func TestDecodeStrict(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, in string
		msg      string // "" = accepted
	}{
		{"exact names", `{"idempotencyKey":"k","resource":{"type":"issue","id":"o/r#1"},"payload":{"body":"x"}}`, ""},
		{"white space around", " \n{\"idempotencyKey\":\"k\"}\t ", ""},
		{"name in another case", `{"IdempotencyKey":"k"}`, "unknown field IdempotencyKey"},
		{"nested name in another case", `{"resource":{"Type":"issue","ID":"o/r#1"}}`, "unknown field resource.Type"},
		{"name twice", `{"idempotencyKey":"k8","idempotencyKey":"k9"}`, "field idempotencyKey appears more than once"},
		{"name twice in the payload", `{"payload":{"body":"x","body":"y"}}`, "field payload.body appears more than once"},
		{"name twice deep in the payload", `{"payload":{"a":[{"b":1,"b":2}]}}`, "field payload.a[0].b appears more than once"},
		{"name twice in the resource", `{"resource":{"id":"o/r#1","id":"o/r#2"}}`, "field resource.id appears more than once"},
		{"invalid UTF-8 in a value", "{\"idempotencyKey\":\"a\xffb\"}", "invalid UTF-8"},
		{"invalid UTF-8 in the payload", "{\"payload\":{\"body\":\"\xc3\"}}", "payload.body"},
		{"invalid UTF-8 in a name", "{\"idempotency\xffKey\":\"k\"}", "invalid UTF-8"},
		{"lone surrogate", `{"idempotencyKey":"\ud800"}`, "idempotencyKey"},
		{"unknown field", `{"idempotencyKey":"k","actor":"root"}`, "unknown field actor"},
		{"odd unknown name", `{"a b":1}`, `unknown field ["a b"]`},
		{"wrong type", `{"idempotencyKey":7}`, "field idempotencyKey must be a string, not a number"},
		{"fraction for an integer", `{"maxAttempts":1.5}`, "maxAttempts must be an integer"},
		{"array", `[]`, "must be a JSON object, not an array"},
		{"null", `null`, "must be a JSON object, not null"},
		{"string", `"x"`, "must be a JSON object, not a string"},
		{"empty", ``, "must be a JSON object"},
		{"cut short", `{"idempotencyKey":`, "ends too early"},
		{"two objects", `{}{}`, "not valid JSON"},
		{"trailing garbage", `{} x`, "not valid JSON"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var v decodeTarget
			err := DecodeStrict([]byte(c.in), &v, "request body", "")
			if c.msg == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted as %+v", v)
			}
			if ErrorCode(err) != CodeInvalidRequest {
				t.Errorf("code %s, want invalid_request (%v)", ErrorCode(err), err)
			}
			if !strings.Contains(err.Error(), c.msg) {
				t.Errorf("message %q does not say %q", err, c.msg)
			}
		})
	}
}

// The payload is kept as sent, ready for canonical JSON.
func TestDecodeStrictKeepsRawPayload(t *testing.T) {
	t.Parallel()
	var v decodeTarget
	if err := DecodeStrict([]byte(`{"payload":{"z":1, "a":[true]}}`), &v, "request body", ""); err != nil {
		t.Fatal(err)
	}
	if string(v.Payload) != `{"z":1, "a":[true]}` {
		t.Errorf("payload = %s", v.Payload)
	}
}

// A payload field in another case, or twice, is refused: otherwise
// {"Body":"a"} would be stored as a field the action does not take, and
// {"body":"x","Body":"y"} would post whichever came last.
func TestDecodePayloadStrict(t *testing.T) {
	t.Parallel()
	sha := sha40("a")
	cases := []struct {
		action, payload, msg string
	}{
		{ActionComment, `{"Body":"a"}`, "unknown field payload.Body"},
		{ActionComment, `{"body":"x","Body":"y"}`, "unknown field payload.Body"},
		{ActionComment, `{"BODY":"x"}`, "unknown field payload.BODY"},
		{ActionComment, `{"body":"x","body":"y"}`, "field payload.body appears more than once"},
		{ActionComment, "{\"body\":\"caf\xe9\"}", "invalid UTF-8"},
		{ActionAddLabels, `{"labels":["a"],"labels":["b"]}`, "payload.labels appears more than once"},
		{ActionAddLabels, `{"labels":[5]}`, "payload.labels[0] must be a string"},
		{ActionMerge, `{"sha":"` + sha + `","Method":"squash"}`, "unknown field payload.Method"},
		{ActionMerge, `{"SHA":"` + sha + `"}`, "unknown field payload.SHA"},
		{ActionUpdateRef, `{"sha":"` + sha + `","force":false,"force":true}`, "payload.force appears more than once"},
		{ActionComment, `[]`, "payload must be a JSON object"},
		{ActionComment, ``, "payload must be a JSON object"},
	}
	for _, c := range cases {
		_, err := DecodePayload(c.action, json.RawMessage(c.payload))
		if err == nil || ErrorCode(err) != CodeInvalidRequest || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("DecodePayload(%s, %q) = %v, want invalid_request saying %q", c.action, c.payload, err, c.msg)
		}
	}
	if p, err := DecodePayload(ActionComment, json.RawMessage(`{"body":"x"}`)); err != nil || p.(*CommentPayload).Body != "x" {
		t.Errorf("a valid payload: %+v, %v", p, err)
	}
}

// A stored payload that an older baton accepted (names matched whatever
// their case) is read as that baton read it, so that its operation runs
// after an upgrade; a submission is still decoded strictly, and what a
// stored payload asks for must still be valid.
func TestDecodeStoredPayload(t *testing.T) {
	t.Parallel()
	sha := sha40("a")
	p, err := DecodeStoredPayload(ActionComment, json.RawMessage(`{"Body":"hi"}`))
	if err != nil || p.(*CommentPayload).Body != "hi" {
		t.Errorf("comment stored by an older baton: %+v, %v", p, err)
	}
	p, err = DecodeStoredPayload(ActionMerge, json.RawMessage(`{"Method":"squash","SHA":"`+sha+`"}`))
	if err != nil || p.(*MergePayload).SHA != sha || p.(*MergePayload).Method != "squash" {
		t.Errorf("merge stored by an older baton: %+v, %v", p, err)
	}
	r := validRecord()
	r.Payload = json.RawMessage(`{"Body":"hi"}`)
	if err := r.Validate(); err != nil {
		t.Errorf("a record stored by an older baton cannot be saved: %v", err)
	}
	s := validSubmission()
	s.Action, s.Resource, s.Payload = ActionComment, Resource{ResourceIssue, "octo/app#1"}, json.RawMessage(`{"Body":"hi"}`)
	if err := s.Validate(); err == nil {
		t.Error("a submission with a mis-cased member is accepted")
	}
	for _, c := range []struct{ action, payload, msg string }{
		{ActionComment, `{"bogus":"x"}`, "unknown field payload.bogus"},
		{ActionRemoveLabel, `{"Label":".."}`, "cannot be"},
		{ActionComment, `[]`, "payload must be a JSON object"},
		{ActionComment, `{"body":""}`, "payload.body"},
	} {
		if _, err := DecodeStoredPayload(c.action, json.RawMessage(c.payload)); err == nil ||
			ErrorCode(err) != CodeInvalidRequest || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("DecodeStoredPayload(%s, %s) = %v, want invalid_request saying %q", c.action, c.payload, err, c.msg)
		}
	}
}

// Every spelling of a repository's name is one resource; ref names keep
// their case.
func TestCanonicalResource(t *testing.T) {
	t.Parallel()
	sha := sha40("c")
	cases := []struct{ in, want Resource }{
		{Resource{ResourceIssue, "Octo/Demo#11"}, Resource{ResourceIssue, "octo/demo#11"}},
		{Resource{ResourceIssue, "octo/demo#11"}, Resource{ResourceIssue, "octo/demo#11"}},
		{Resource{ResourcePullRequest, "OCTO/My_Repo.Go#7"}, Resource{ResourcePullRequest, "octo/my_repo.go#7"}},
		{Resource{ResourceRef, "Octo/App:heads/Feature/X"}, Resource{ResourceRef, "octo/app:heads/Feature/X"}},
		{Resource{ResourceRef, "octo/app:tags/V1.0"}, Resource{ResourceRef, "octo/app:tags/V1.0"}},
		{Resource{ResourceCommit, "Octo/App@" + sha}, Resource{ResourceCommit, "octo/app@" + sha}},
		{Resource{ResourceRepo, "Octo/App"}, Resource{ResourceRepo, "octo/app"}},
	}
	for _, c := range cases {
		got, tg, err := CanonicalResource(c.in)
		if err != nil || got != c.want {
			t.Errorf("CanonicalResource(%+v) = %+v, %v; want %+v", c.in, got, err, c.want)
			continue
		}
		if tg.Owner != strings.ToLower(tg.Owner) || tg.Repo != strings.ToLower(tg.Repo) {
			t.Errorf("target of %+v = %+v, not in lower case", c.in, tg)
		}
		if again, _, _ := CanonicalResource(got); again != got {
			t.Errorf("CanonicalResource is not idempotent on %+v: %+v", got, again)
		}
	}
	for _, bad := range []Resource{{ResourceIssue, "Octo/Demo"}, {ResourceCommit, "o/r@" + strings.ToUpper(sha)}, {"Issue", "o/r#1"}} {
		if _, _, err := CanonicalResource(bad); ErrorCode(err) != CodeInvalidRequest {
			t.Errorf("CanonicalResource(%+v) = %v, want invalid_request", bad, err)
		}
	}

	// Lease keys: two spellings, one key.
	a, _, errA := ParseResourceKey("issue:octo/demo#11")
	b, _, errB := ParseResourceKey("issue:Octo/Demo#11")
	if errA != nil || errB != nil || a.Key() != b.Key() || b.Key() != "issue:octo/demo#11" {
		t.Errorf("lease keys: %q (%v) and %q (%v), want both issue:octo/demo#11", a.Key(), errA, b.Key(), errB)
	}
}

// Whatever DecodeStrict accepts is one valid JSON object (no repeated
// names, valid UTF-8) and decodes the same with encoding/json; whatever it
// refuses is an invalid_request.
func FuzzDecodeStrict(f *testing.F) {
	f.Add([]byte(`{"idempotencyKey":"k","resource":{"type":"issue","id":"o/r#1"},"payload":{"body":"x"}}`))
	f.Add([]byte(`{"IdempotencyKey":"k"}`))
	f.Add([]byte(`{"payload":{"body":"x","Body":"y"}}`))
	f.Add([]byte(`{"idempotencyKey":"k8","idempotencyKey":"k9"}`))
	f.Add([]byte("{\"idempotencyKey\":\"\xff\"}"))
	f.Add([]byte(`{"maxAttempts":1e3}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		var strict decodeTarget
		err := DecodeStrict(raw, &strict, "request body", "")
		if err != nil {
			if ErrorCode(err) != CodeInvalidRequest {
				t.Fatalf("error with code %s: %v", ErrorCode(err), err)
			}
			return
		}
		if !isObject(raw) {
			t.Fatalf("accepted %q, which is not one valid JSON object", raw)
		}
		var loose decodeTarget
		if err := json.Unmarshal(raw, &loose); err != nil {
			t.Fatalf("accepted %q, which encoding/json refuses: %v", raw, err)
		}
		if loose.Key != strict.Key || loose.Resource != strict.Resource || loose.Attempts != strict.Attempts ||
			string(loose.Payload) != string(strict.Payload) {
			t.Fatalf("%q decodes as %+v strictly and %+v by encoding/json", raw, strict, loose)
		}
	})
}
