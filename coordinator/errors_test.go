package coordinator_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/baton-dev/baton/coordinator"
	"github.com/baton-dev/baton/schema"
)

// The HTTP layer classifies errors with package schema, which finds the
// coordinator's codes and details by interface, wrapped or not.
func TestErrorsSpeakSchema(t *testing.T) {
	t.Parallel()
	held := fmt.Errorf("process: %w", &coordinator.LeaseHeldError{Key: "k", Owner: "op-1", ExpiresIn: 1500 * time.Millisecond})
	if schema.ErrorCode(held) != schema.CodeLeaseHeld {
		t.Errorf("held code %s", schema.ErrorCode(held))
	}
	if d := schema.ErrorDetails(held); d["owner"] != "op-1" || d["expiresIn"] != 1.5 {
		t.Errorf("held details %v", d)
	}
	lost := fmt.Errorf("save: %w", &coordinator.LeaseLostError{Key: "k", Owner: "op-1", Token: 7, Reason: coordinator.LostSuperseded})
	if schema.ErrorCode(lost) != schema.CodeLeaseLost || schema.ErrorDetails(lost)["reason"] != "superseded" {
		t.Errorf("lost: %s %v", schema.ErrorCode(lost), schema.ErrorDetails(lost))
	}
	inv := &coordinator.InvalidRequestError{Field: "ttl", Message: "out of range"}
	if schema.ErrorCode(inv) != schema.CodeInvalidRequest || schema.PublicMessage(inv) == "internal error" {
		t.Errorf("invalid: %s %q", schema.ErrorCode(inv), schema.PublicMessage(inv))
	}
	for _, s := range []error{coordinator.ErrLeaseHeld, coordinator.ErrLeaseLost, coordinator.ErrInvalidRequest} {
		if schema.ErrorCode(s) == schema.CodeInternal {
			t.Errorf("sentinel %v has no code", s)
		}
	}
	if !errors.Is(held, coordinator.ErrLeaseHeld) || errors.Is(held, coordinator.ErrLeaseLost) {
		t.Error("errors.Is on lease_held")
	}
}
