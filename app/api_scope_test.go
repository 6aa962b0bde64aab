package app

import (
	"net/http"
	"testing"

	"github.com/baton-dev/baton/schema"
)

// A token bound to installations reaches only operations on them, also
// those of its own actor made with another token: reading or cancelling
// one elsewhere is 403 forbidden and changes nothing, and a list shows
// none of them.
func TestAPIInstallationScopeOfOperations(t *testing.T) {
	t.Parallel()
	env := newAPIEnv(t)
	alice2 := env.newToken(TokenSpec{Actor: "alice", Installations: []int64{2}})
	onOne := env.submit(env.alice, "scope-1", 10) // octo/demo: installation 1
	acme := apiSubmission("scope-2", 1, "hi")
	acme["resource"] = map[string]any{"type": "issue", "id": "acme/site#1"}
	r := env.do("POST", "/v1/operations", alice2, acme)
	if r.status != http.StatusCreated {
		t.Fatalf("submit on installation 2: %d %s", r.status, r.body)
	}
	var onTwo schema.View
	r.decode(t, &onTwo)

	for _, c := range []struct{ method, path string }{
		{"GET", "/v1/operations/" + onOne.OperationID},
		{"GET", "/v1/operations/" + onOne.OperationID + "?wait=1s"},
		{"POST", "/v1/operations/" + onOne.OperationID + "/cancel"},
	} {
		r := env.do(c.method, c.path, alice2, nil)
		if r.status != http.StatusForbidden || r.errorCode() != "forbidden" {
			t.Errorf("%s %s with installation 2's token: %d %s", c.method, c.path, r.status, r.body)
		}
	}
	r = env.do("GET", "/v1/operations/"+onOne.OperationID, env.alice, nil)
	var still schema.View
	r.decode(t, &still)
	if r.status != http.StatusOK || still.Status != schema.StatusQueued || still.CancellationRequested {
		t.Errorf("after the refused cancel: %d %s", r.status, r.body)
	}

	// Lists: each of alice's tokens sees its installation's operation only;
	// a token of all installations and an admin see both.
	aliceAll := env.newToken(TokenSpec{Actor: "alice", AllInstallations: true})
	for _, c := range []struct {
		name  string
		token string
		want  []string
	}{
		{"installation 1", env.alice, []string{onOne.OperationID}},
		{"installation 2", alice2, []string{onTwo.OperationID}},
		{"all installations", aliceAll, []string{onTwo.OperationID, onOne.OperationID}},
		{"admin", env.admin, []string{onTwo.OperationID, onOne.OperationID}},
	} {
		r := env.do("GET", "/v1/operations?actor=alice", c.token, nil)
		var list OperationList
		r.decode(t, &list)
		var got []string
		for _, v := range list.Operations {
			got = append(got, v.OperationID)
		}
		if r.status != http.StatusOK || len(got) != len(c.want) || (len(got) > 0 && got[0] != c.want[0]) ||
			(len(got) > 1 && got[1] != c.want[1]) {
			t.Errorf("%s: list %d %v, want %v", c.name, r.status, got, c.want)
		}
	}
}
