package app

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/baton-dev/baton/schema"
)

// A token bound to installations learns nothing of the repositories of
// other installations: a repository baton is not installed on, one of
// another installation and one of another, suspended installation are
// refused in the same words, through every route that names a
// repository. Otherwise a client of one organisation could find out, by
// trying names, which repositories of others (private ones included) baton
// is installed on, and their installation IDs.
func TestAPIBoundTokenLearnsNothingOfOtherInstallations(t *testing.T) {
	t.Parallel()
	env := newAPIEnv(t)
	erin := env.newToken(TokenSpec{Actor: "erin", Installations: []int64{3}})

	others := []string{"acme/site", "nobody/thing", "frozen/app"} // installation 2, none, 3 (suspended)
	routes := []struct {
		name string
		do   func(token, repo string) apiResponse
	}{
		{"submit", func(token, repo string) apiResponse {
			sub := apiSubmission("tenancy-"+repo, 1, "hi")
			sub["resource"] = map[string]any{"type": "issue", "id": repo + "#1"}
			return env.do("POST", "/v1/operations", token, sub)
		}},
		{"check lease", func(token, repo string) apiResponse {
			return env.do("GET", "/v1/leases/"+url.PathEscape("issue:"+repo+"#1"), token, nil)
		}},
		{"acquire lease", func(token, repo string) apiResponse {
			return env.do("POST", "/v1/leases/"+url.PathEscape("issue:"+repo+"#1")+"/acquire", token, map[string]any{"owner": "job"})
		}},
	}
	for _, rt := range routes {
		var first string
		for _, repo := range others {
			r := rt.do(env.alice, repo)
			msg := apiErrorMessage(t, r)
			if r.status != http.StatusForbidden || r.errorCode() != "forbidden" {
				t.Errorf("%s %s with alice's token: %d %s", rt.name, repo, r.status, r.body)
			}
			for _, leak := range []string{"installation 2", "installation 3", "suspended", "is not installed on"} {
				if strings.Contains(msg, leak) {
					t.Errorf("%s %s with alice's token tells %q: %s", rt.name, repo, leak, msg)
				}
			}
			msg = strings.ReplaceAll(msg, repo, "REPO")
			if first == "" {
				first = msg
			} else if msg != first {
				t.Errorf("%s: %s is refused as %q, %s as %q", rt.name, others[0], first, repo, msg)
			}
		}
	}

	// A token of the suspended installation is told that it is; a token
	// of every installation, that baton is not installed there.
	if r := routes[0].do(erin, "frozen/app"); r.status != http.StatusForbidden || !strings.Contains(apiErrorMessage(t, r), "suspended") {
		t.Errorf("erin on her suspended installation: %d %s", r.status, r.body)
	}
	if r := routes[0].do(env.dave, "nobody/thing"); r.status != http.StatusForbidden || !strings.Contains(apiErrorMessage(t, r), "not installed") {
		t.Errorf("dave on a repository baton is not installed on: %d %s", r.status, r.body)
	}

	// The merge queue's routes (/v1/repos/{owner}/{repo}/queue…) ask the
	// same question.
	var first string
	for _, repo := range others {
		owner, name, _ := strings.Cut(repo, "/")
		req := httptest.NewRequest("GET", "/v1/repos/"+repo+"/queue", nil)
		p, err := env.tokens.Authenticate(context.Background(), env.alice)
		if err != nil {
			t.Fatal(err)
		}
		req = req.WithContext(context.WithValue(req.Context(), apiPrincipalKey{}, &p))
		err = authorizeRepositoryOf(req, apiTestInstallations, owner, name)
		if schema.ErrorCode(err) != schema.CodeForbidden {
			t.Fatalf("merge queue of %s for alice: %v", repo, err)
		}
		msg := strings.ReplaceAll(schema.PublicMessage(err), repo, "REPO")
		if strings.Contains(msg, "installation 2") || strings.Contains(msg, "installation 3") || strings.Contains(msg, "suspended") {
			t.Errorf("merge queue of %s for alice tells: %s", repo, msg)
		}
		if first == "" {
			first = msg
		} else if msg != first {
			t.Errorf("merge queue: %s is refused as %q, %s as %q", others[0], first, repo, msg)
		}
	}
}

func apiErrorMessage(t *testing.T, r apiResponse) string {
	t.Helper()
	var eb APIErrorBody
	if err := json.Unmarshal(r.body, &eb); err != nil {
		t.Fatalf("not an error body: %s", r.body)
	}
	return eb.Error.Message
}
