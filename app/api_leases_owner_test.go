package app

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/schema"
)

// An owner of as many characters as the API takes holds a lease whatever
// those characters are, under an actor of as many characters as a token
// takes: the holder ACTOR/OWNER, held in bytes by the coordinator, must
// fit there too.
func TestAPILeaseOwnerOfMostCharacters(t *testing.T) {
	t.Parallel()
	env := newAPIEnv(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name, actor, owner string
	}{
		{"three-byte owner", "alice", strings.Repeat("€", MaxLeaseOwnerChars)},
		{"four-byte actor and owner", strings.Repeat("😀", schema.MaxActorChars), strings.Repeat("🔒", MaxLeaseOwnerChars)},
	} {
		c := env.client(env.newToken(TokenSpec{Actor: tc.actor, Installations: []int64{1}}))
		key := "issue:octo/demo#" + map[bool]string{true: "10", false: "11"}[tc.actor == "alice"]
		g, err := c.AcquireLease(ctx, key, tc.owner, time.Minute)
		if err != nil || g.Owner != tc.owner {
			t.Errorf("%s: acquire = %+v, %v", tc.name, g, err)
			continue
		}
		if st, err := c.CheckLease(ctx, key); err != nil || st.Owner != tc.actor+"/"+tc.owner {
			t.Errorf("%s: check = %+v, %v", tc.name, st, err)
		}
		if _, err := c.RenewLease(ctx, key, tc.owner, g.Token, time.Minute); err != nil {
			t.Errorf("%s: renew = %v", tc.name, err)
		}
		if err := c.ReleaseLease(ctx, key, tc.owner, g.Token); err != nil {
			t.Errorf("%s: release = %v", tc.name, err)
		}
	}
}
