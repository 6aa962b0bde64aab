package coordinator

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// An API lease's owner is ACTOR/OWNER, both the client's text: an actor
// may be an e-mail address, and no log line may carry one. Owners baton
// makes itself (operation IDs) are logged as they are.
func TestLogsCarryNoAPILeaseOwner(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	const mail = "canary.mail@example.org"
	mustAcquire(t, b.c, testKey, mail+"/ci-runner", 30*time.Second)
	b.clock.Advance(45 * time.Second)
	mustAcquire(t, b.c, testKey, "op-b", 30*time.Second)
	mustAcquire(t, b.c, "issue:octo/app#2", mail+"/other", 30*time.Second)
	b.clock.Advance(time.Hour)
	if _, err := b.c.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	if b.logs.Len() == 0 {
		t.Fatal("nothing logged: the test proves nothing")
	}
	sawOp := false
	for _, e := range b.logs.All() {
		line := fmt.Sprint(e.Message, e.ContextMap())
		if strings.Contains(line, mail) {
			t.Errorf("log line carries the actor's e-mail: %s", line)
		}
		sawOp = sawOp || strings.Contains(line, "op-b")
	}
	if !sawOp {
		t.Error("the operation's own owner was not logged as it is")
	}
	if got := LogOwner("op-b"); got != "op-b" {
		t.Errorf("LogOwner(op-b) = %q", got)
	}
	if a, b := LogOwner(mail+"/x"), LogOwner(mail+"/y"); a == b || !strings.HasPrefix(a, "api-lease:") {
		t.Errorf("LogOwner of two API owners: %q, %q", a, b)
	}
}
