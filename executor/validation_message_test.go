package executor

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-github/v62/github"

	"github.com/baton-dev/baton/app/ghsim"
	"github.com/baton-dev/baton/schema"
)

// GitHub's 422 "Validation Failed" says what failed only in its errors;
// the record must say it too, or an operator learns nothing of why.
func TestValidationFailedSaysWhy(t *testing.T) {
	t.Parallel()
	_, gh := newSim(t, ghsim.Config{})
	c := installationClient(t, gh)
	rec, tg, _ := actionRecord(t, schema.ActionAddLabels, issue(11), `{"labels":["placeholder"]}`)
	// Built by hand: schema refuses a name GitHub would, so GitHub's
	// refusal is reached only by what schema does not know of.
	_, _, err := actions[rec.Action].do(context.Background(), c, rec, tg, &schema.AddLabelsPayload{Labels: []string{strings.Repeat("x", 51)}})
	cl := Classify(err, time.Now())
	if cl.Category != CategoryValidation || !strings.Contains(cl.Message, "Validation Failed") || !strings.Contains(cl.Message, "name") || !strings.Contains(cl.Message, "invalid") {
		t.Fatalf("classification = %+v", cl)
	}
}

// The message is cut at a character, never inside one; each error entry
// is told by its message, or else by its field and code.
func TestValidationMessageDetails(t *testing.T) {
	t.Parallel()
	now := time.Now()
	if m := Classify(errResp(422, "x"+strings.Repeat("é", 150)), now).Message; !utf8.ValidString(m) {
		t.Errorf("message %q is not valid UTF-8", m)
	}
	err := &github.ErrorResponse{Response: resp(422), Message: "Validation Failed", Errors: []github.Error{
		{Resource: "Status", Code: "custom", Message: "This SHA and context has reached the maximum number of statuses."},
		{Resource: "Label", Field: "name", Code: "invalid"},
	}}
	want := "422 Unprocessable Entity: Validation Failed (This SHA and context has reached the maximum number of statuses.; name invalid)"
	if m := Classify(err, now).Message; m != want {
		t.Errorf("message = %q, want %q", m, want)
	}
}
