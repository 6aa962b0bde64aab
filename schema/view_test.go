package schema

import (
	"encoding/json"
	"regexp"
	"testing"
	"time"
)

// The executor stamps records by time.Now, in the machine's zone (Submit
// alone used UTC): the view shows every time in UTC, so that one record
// never mixes zones.
func TestViewTimesAreUTC(t *testing.T) {
	t.Parallel()
	kolkata := time.FixedZone("IST", 5*3600+1800)
	at := time.Date(2026, 3, 1, 17, 30, 0, 123456789, kolkata)
	rec := Record{
		OperationID: "op", Actor: "a", Action: ActionComment, Resource: Resource{Type: "issue", ID: "o/r#1"},
		Status: StatusSucceeded, Outcome: OutcomeSucceeded, Attempts: 1, MaxAttempts: 3,
		CreatedAt: at.UTC(), UpdatedAt: at, StartedAt: &at, CompletedAt: &at, NextAttemptAt: &at,
		AttemptLog: []Attempt{{Number: 1, StartedAt: at, EndedAt: at}},
	}
	v, err := rec.View()
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	stamps := regexp.MustCompile(`"\d{4}-\d\d-\d\dT[^"]*"`).FindAllString(string(b), -1)
	if len(stamps) != 7 {
		t.Fatalf("found %d timestamps in %s, want 7", len(stamps), b)
	}
	for _, s := range stamps {
		if s != `"2026-03-01T12:00:00.123456789Z"` {
			t.Errorf("timestamp %s, want 2026-03-01T12:00:00.123456789Z", s)
		}
	}
	if rec.UpdatedAt.Location() != kolkata || rec.AttemptLog[0].StartedAt.Location() != kolkata {
		t.Error("View changed the record")
	}
}
