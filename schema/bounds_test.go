package schema

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// paddedPayload returns a valid comment payload of exactly n bytes.
func paddedPayload(n int) json.RawMessage {
	const head, tail = `{"body":"hi"`, `}`
	return json.RawMessage(head + strings.Repeat(" ", n-len(head)-len(tail)) + tail)
}

// The payload limit is exactly MaxPayloadBytes, for a submission and for a
// stored record alike: one byte more is payload_too_large.
func TestPayloadLimitIsExact(t *testing.T) {
	t.Parallel()
	s := validSubmission()
	s.Payload = paddedPayload(MaxPayloadBytes)
	if err := s.Validate(); err != nil {
		t.Errorf("payload of exactly %d bytes: %v", MaxPayloadBytes, err)
	}
	s.Payload = paddedPayload(MaxPayloadBytes + 1)
	if err := s.Validate(); ErrorCode(err) != CodePayloadTooLarge {
		t.Errorf("payload of %d bytes: %v, want payload_too_large", MaxPayloadBytes+1, err)
	}
	r := validRecord()
	r.Payload = paddedPayload(MaxPayloadBytes)
	if err := r.Validate(); err != nil {
		t.Errorf("stored payload of exactly %d bytes: %v", MaxPayloadBytes, err)
	}
	r.Payload = paddedPayload(MaxPayloadBytes + 1)
	if err := r.Validate(); ErrorCode(err) != CodePayloadTooLarge {
		t.Errorf("stored payload of %d bytes: %v, want payload_too_large", MaxPayloadBytes+1, err)
	}
}

// Record and submission checks at their edges: an unfinished record has
// no completedAt, the attempt log holds at most MaxAttemptLog entries, an
// installation ID is never negative, and an operation ID is exactly 64
// lower-case hex characters.
func TestValidateEdges(t *testing.T) {
	t.Parallel()
	now := time.Now()
	attempts := func(n int) []Attempt {
		out := make([]Attempt, n)
		for i := range out {
			out[i] = Attempt{Number: 1, StartedAt: now, EndedAt: now}
		}
		return out
	}
	cases := []struct {
		name string
		edit func(*Record)
		ok   bool
	}{
		{"queued with completedAt", func(r *Record) { r.CompletedAt = &now }, false},
		{"running with completedAt", func(r *Record) { r.Status, r.StartedAt, r.CompletedAt = StatusRunning, &now, &now }, false},
		{"attempt log full", func(r *Record) { r.AttemptLog = attempts(MaxAttemptLog) }, true},
		{"attempt log over", func(r *Record) { r.AttemptLog = attempts(MaxAttemptLog + 1) }, false},
		{"installation -1", func(r *Record) { r.InstallationID = -1 }, false},
		{"operation ID 65 characters", func(r *Record) { r.OperationID = strings.Repeat("a", 65) }, false},
		{"operation ID 63 characters", func(r *Record) { r.OperationID = strings.Repeat("a", 63) }, false},
		{"operation ID with g", func(r *Record) { r.OperationID = strings.Repeat("a", 63) + "g" }, false},
		{"operation ID upper case", func(r *Record) { r.OperationID = strings.Repeat("A", 64) }, false},
		{"operation ID of every hex digit", func(r *Record) { r.OperationID = strings.Repeat("0123456789abcdef", 4) }, true},
		{"idempotencyHash with g", func(r *Record) { r.IdempotencyHash = strings.Repeat("a", 63) + "g" }, false},
	}
	for _, c := range cases {
		r := validRecord()
		c.edit(&r)
		err := r.Validate()
		if c.ok && err != nil {
			t.Errorf("%s: refused: %v", c.name, err)
		}
		if !c.ok && err == nil {
			t.Errorf("%s: accepted", c.name)
		}
	}
	s := validSubmission()
	s.InstallationID = -1
	if err := s.Validate(); ErrorCode(err) != CodeInvalidRequest {
		t.Errorf("submission with installationId -1: %v", err)
	}
}

// The webhook actor prefix is reserved in any case.
func TestReservedActorIgnoresCase(t *testing.T) {
	t.Parallel()
	for actor, want := range map[string]bool{
		"github:42": true, "GitHub:42": true, "GITHUB:": true, "gItHuB:x": true,
		"github": false, "githu:1": false, "my-github:1": false, "alice": false,
	} {
		if got := ReservedActor(actor); got != want {
			t.Errorf("ReservedActor(%q) = %v, want %v", actor, got, want)
		}
	}
}

// Exactly the three end states are terminal.
func TestTerminalStatuses(t *testing.T) {
	t.Parallel()
	want := map[Status]bool{StatusQueued: false, StatusRunning: false, StatusSucceeded: true, StatusFailed: true, StatusCancelled: true}
	for _, s := range Statuses {
		if s.Terminal() != want[s] {
			t.Errorf("%s: terminal %v, want %v", s, s.Terminal(), want[s])
		}
		if (OutcomeFor(s) != OutcomeNone) != want[s] {
			t.Errorf("%s: outcome %q", s, OutcomeFor(s))
		}
	}
}

// A ref name of 255 characters is accepted; one longer is refused.
func TestRefNameLengthLimit(t *testing.T) {
	t.Parallel()
	ref := func(n int) Resource {
		return Resource{Type: ResourceRef, ID: "octo/app:heads/" + strings.Repeat("b", n-len("heads/"))}
	}
	if _, err := ParseResource(ref(255)); err != nil {
		t.Errorf("ref of 255 characters: %v", err)
	}
	if _, err := ParseResource(ref(256)); ErrorCode(err) != CodeInvalidRequest {
		t.Errorf("ref of 256 characters: %v, want invalid_request", err)
	}
}
