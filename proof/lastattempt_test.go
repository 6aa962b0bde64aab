package proof

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/baton-dev/baton/app"
	"github.com/baton-dev/baton/app/client"
	"github.com/baton-dev/baton/app/ghsim"
	"github.com/baton-dev/baton/schema"
)

// The crash test found this: an operation whose last attempt was applied
// by GitHub but whose answer was lost (the connection dropped after the
// effect) must be checked before it is given up. Every attempt but the
// last (schema.DefaultMaxAttempts) is answered 500 without being applied;
// the last is applied and its connection dropped. The record must say succeeded — GitHub has the
// comment — and the comment must be there once.
func TestLastAttemptAppliedButAnswerLost(t *testing.T) {
	t.Parallel()
	p := newInProcess(t)
	ctx := context.Background()
	route := "POST /repos/{owner}/{repo}/issues/{number}/comments"
	for _, f := range []ghsim.Fault{
		{Route: route, Kind: ghsim.FaultStatus, Status: http.StatusInternalServerError, Count: schema.DefaultMaxAttempts - 1},
		{Route: route, Kind: ghsim.FaultDropAfter, Count: 1},
	} {
		if _, err := p.sim.SetFault(f); err != nil {
			t.Fatal(err)
		}
	}
	c := p.client(t, p.token(t, app.TokenSpec{Actor: "alice", Installations: []int64{1}}))
	op, _, err := c.Submit(ctx, client.SubmitRequest{
		IdempotencyKey: "last-attempt", Action: schema.ActionComment,
		Resource: client.Resource{Type: schema.ResourceIssue, ID: "octo/demo#10"},
		Payload:  json.RawMessage(`{"body":"applied on the last attempt"}`),
	})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	op, err = c.Wait(wctx, op.OperationID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if posted := commentsPosted(t, p.sim, 10, op.OperationID); posted != 1 {
		t.Fatalf("the comment was posted %d times, want once", posted)
	}
	if op.Status != schema.StatusSucceeded {
		t.Errorf("operation is %s (%s: %s) after %d attempts, but its comment is on GitHub: the last attempt's effect was not probed",
			op.Status, op.LastErrorCategory, op.LastErrorMessage, op.Attempts)
	}
}
