package ghsim

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/bradleyfalzon/ghinstallation/v2"
	"github.com/google/go-github/v62/github"
)

// Request bodies are refused as GitHub's REST documentation describes
// client errors: a well-formed JSON object whose field has the wrong type
// is 422 Validation Failed (validated against GitHub's description, which
// lists 422 for these operations), JSON that is not an object is 400
// "Body should be a JSON object", and a body that is not JSON 400
// "Problems parsing JSON". Nothing is applied.
func TestRequestBodyErrors(t *testing.T) {
	t.Parallel()
	e := seeded(t, Config{})
	c := ctx(t)
	cl := e.client(1)
	main, _ := e.sim.Ref("octo", "demo", "heads/main")

	for _, tc := range []struct {
		method, path     string
		body             map[string]any
		resource, field  string
		wantMessageStart string
	}{
		{"PATCH", "repos/octo/demo/git/refs/heads/main", map[string]any{"sha": 5}, "Reference", "sha", "sha is not a string"},
		{"POST", "repos/octo/demo/issues/10/comments", map[string]any{"body": true}, "IssueComment", "body", "body is not a string"},
		{"PUT", "repos/octo/demo/pulls/1/merge", map[string]any{"sha": []int{1}}, "PullRequest", "sha", "sha is not a string"},
	} {
		before := e.validated.Load()
		req, err := cl.NewRequest(tc.method, tc.path, tc.body)
		if err != nil {
			t.Fatal(err)
		}
		_, err = cl.Do(c, req, nil)
		wantStatus(t, err, http.StatusUnprocessableEntity)
		var er *github.ErrorResponse
		if !errors.As(err, &er) || er.Message != "Validation Failed" || len(er.Errors) != 1 ||
			er.Errors[0].Resource != tc.resource || er.Errors[0].Field != tc.field || er.Errors[0].Code != "invalid" ||
			!strings.HasPrefix(er.Errors[0].Message, tc.wantMessageStart) {
			t.Errorf("%s %s: %v", tc.method, tc.path, err)
		}
		if route, _ := e.spec.find(tc.method, "/"+tc.path); route == nil || route.Operation.Responses.Status(422) == nil {
			t.Errorf("%s %s: GitHub's description lists no 422: the answer was not fully validated", tc.method, tc.path)
		}
		if e.validated.Load() == before {
			t.Errorf("%s %s: the answer was not validated", tc.method, tc.path)
		}
	}

	// 400s: GitHub's description does not list them for these operations,
	// so the raw answers are checked here.
	itr, err := ghinstallation.New(e.tr, e.sim.AppID(), 1, e.sim.PrivateKeyPEM())
	if err != nil {
		t.Fatal(err)
	}
	itr.BaseURL = e.sim.URL()
	raw := &http.Client{Transport: itr}
	for _, tc := range []struct{ body, want string }{
		{`{"sha":`, "Problems parsing JSON"},
		{`["` + main + `"]`, "Body should be a JSON object"},
		{`"` + main + `"`, "Body should be a JSON object"},
	} {
		req, _ := http.NewRequestWithContext(c, "PATCH", e.sim.URL()+"/repos/octo/demo/git/refs/heads/main", strings.NewReader(tc.body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := raw.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), `"message":"`+tc.want+`"`) {
			t.Errorf("body %s: %d %s, want 400 %q", tc.body, resp.StatusCode, b, tc.want)
		}
	}
	if n := len(e.sim.Effects()); n != 0 {
		t.Errorf("%d effects from refused requests", n)
	}
}
