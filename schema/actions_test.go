package schema

import (
	"encoding/json"
	"strings"
	"testing"
)

// A NUL in any text of a payload is refused at submission, naming the
// field; a record stored with one by an earlier baton is still read.
func TestPayloadNULRefusedAtSubmission(t *testing.T) {
	sha := strings.Repeat("a", 40)
	cases := []struct {
		action, payload, field string
	}{
		{ActionComment, `{"body":"a\u0000b"}`, "payload.body"},
		{ActionMerge, `{"sha":"` + sha + `","commitTitle":"t\u0000"}`, "payload.commitTitle"},
		{ActionMerge, `{"sha":"` + sha + `","commitMessage":"\u0000"}`, "payload.commitMessage"},
		{ActionCreateStatus, `{"state":"success","context":"ci","description":"ok\u0000"}`, "payload.description"},
	}
	for _, c := range cases {
		_, err := DecodePayload(c.action, json.RawMessage(c.payload))
		if ErrorCode(err) != CodeInvalidRequest || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s %s: %v; want invalid_request naming %s", c.action, c.payload, err, c.field)
		}
		if _, err := DecodeStoredPayload(c.action, json.RawMessage(c.payload)); err != nil {
			t.Errorf("%s %s stored: %v; want it read as before", c.action, c.payload, err)
		}
	}
	if _, err := DecodePayload(ActionComment, json.RawMessage(`{"body":"tab\tnewline\n\u001b[1mbold\u001b[0m"}`)); err != nil {
		t.Errorf("other control characters in a body: %v; want them kept (tabs, newlines, ANSI colours of CI output)", err)
	}
}
