package ghsim

import (
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v4"
	"github.com/google/go-github/v62/github"
)

func TestAppEndpoints(t *testing.T) {
	t.Parallel()
	e := seeded(t, Config{})
	if _, err := e.sim.AddRepo("acme", "widgets", 2); err != nil {
		t.Fatal(err)
	}
	app := e.appClient()
	c := ctx(t)

	a, _, err := app.Apps.Get(c, "")
	if err != nil || a.GetID() != e.sim.AppID() || a.GetSlug() != "baton-sim" {
		t.Fatalf("GET /app = %v, %v", a, err)
	}
	insts, _, err := app.Apps.ListInstallations(c, nil)
	if err != nil || len(insts) != 2 || insts[0].GetID() != 1 || insts[1].GetAccount().GetLogin() != "acme" {
		t.Fatalf("GET /app/installations = %v, %v", insts, err)
	}
	inst, _, err := app.Apps.GetInstallation(c, 1)
	if err != nil || inst.GetAppID() != e.sim.AppID() || inst.GetPermissions().GetPullRequests() != "write" {
		t.Fatalf("GET /app/installations/1 = %v, %v", inst, err)
	}
	_, _, err = app.Apps.GetInstallation(c, 99)
	wantStatus(t, err, http.StatusNotFound)

	tok, resp, err := app.Apps.CreateInstallationToken(c, 1, nil)
	if err != nil || resp.StatusCode != http.StatusCreated || tok.GetToken() == "" {
		t.Fatalf("POST access_tokens = %v, %v", tok, err)
	}
	if d := time.Until(tok.GetExpiresAt().Time); d < 59*time.Minute || d > 61*time.Minute {
		t.Errorf("token expires in %v, want 1h", d)
	}
	_, _, err = app.Apps.CreateInstallationToken(c, 99, nil)
	wantStatus(t, err, http.StatusNotFound)

	repos, _, err := e.client(1).Apps.ListRepos(c, nil)
	if err != nil || repos.GetTotalCount() != 1 || repos.Repositories[0].GetFullName() != "octo/demo" {
		t.Fatalf("GET /installation/repositories = %v, %v", repos, err)
	}
	lim, _, err := e.client(2).RateLimit.Get(c)
	if err != nil || lim.GetCore().Limit != 5000 {
		t.Fatalf("GET /rate_limit = %v, %v", lim, err)
	}
}

func TestTokenReachesOnlyItsInstallation(t *testing.T) {
	t.Parallel()
	e := seeded(t, Config{})
	if _, err := e.sim.AddRepo("acme", "widgets", 2); err != nil {
		t.Fatal(err)
	}
	c := ctx(t)
	_, _, err := e.client(2).PullRequests.Get(c, "octo", "demo", 1)
	wantStatus(t, err, http.StatusNotFound)
	if _, _, err := e.client(1).PullRequests.Get(c, "octo", "demo", 1); err != nil {
		t.Fatal(err)
	}
	_, _, err = e.client(1).Issues.Get(c, "acme", "widgets", 1)
	wantStatus(t, err, http.StatusNotFound)
}

func TestTokenNarrowed(t *testing.T) {
	t.Parallel()
	e := seeded(t, Config{})
	if _, err := e.sim.AddRepo("octo", "other", 1); err != nil {
		t.Fatal(err)
	}
	c := ctx(t)
	tok, _, err := e.appClient().Apps.CreateInstallationToken(c, 1, &github.InstallationTokenOptions{
		Repositories: []string{"other"},
		Permissions:  &github.InstallationPermissions{Issues: ptr("read"), PullRequests: ptr("read")},
	})
	if err != nil || len(tok.Repositories) != 1 {
		t.Fatalf("narrowed token = %v, %v", tok, err)
	}
	cl := e.gh(&tokenTransport{base: e.validating(), token: tok.GetToken()})
	_, _, err = cl.Issues.Get(c, "octo", "demo", 10)
	wantStatus(t, err, http.StatusNotFound)
	if _, err := e.sim.AddIssue("octo", "other", NewIssue{Title: "x"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := cl.Issues.Get(c, "octo", "other", 1); err != nil {
		t.Fatal(err)
	}
	_, _, err = cl.Issues.CreateComment(c, "octo", "other", 1, &github.IssueComment{Body: ptr("hi")})
	wantStatus(t, err, http.StatusForbidden)

	_, _, err = e.appClient().Apps.CreateInstallationToken(c, 1, &github.InstallationTokenOptions{Repositories: []string{"nope"}})
	wantStatus(t, err, http.StatusUnprocessableEntity)
	_, _, err = e.appClient().Apps.CreateInstallationToken(c, 1, &github.InstallationTokenOptions{
		Permissions: &github.InstallationPermissions{Administration: ptr("write")},
	})
	wantStatus(t, err, http.StatusUnprocessableEntity)
}

// tokenTransport authenticates with a fixed installation token.
type tokenTransport struct {
	base  http.RoundTripper
	token string
}

func (tt *tokenTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "token "+tt.token)
	return tt.base.RoundTrip(r)
}

func TestTokenExpires(t *testing.T) {
	t.Parallel()
	clk := newClock()
	e := seeded(t, Config{Now: clk.Now, TokenTTL: 30 * time.Minute})
	c := ctx(t)
	tok, _, err := e.appClient().Apps.CreateInstallationToken(c, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	cl := e.gh(&tokenTransport{base: e.validating(), token: tok.GetToken()})
	if _, _, err := cl.PullRequests.Get(c, "octo", "demo", 1); err != nil {
		t.Fatal(err)
	}
	clk.Advance(30 * time.Minute)
	_, _, err = cl.PullRequests.Get(c, "octo", "demo", 1)
	wantStatus(t, err, http.StatusUnauthorized)
	_, _, err = e.gh(&tokenTransport{base: e.validating(), token: "ghs_forged"}).PullRequests.Get(c, "octo", "demo", 1)
	wantStatus(t, err, http.StatusUnauthorized)
}

func TestJWTChecked(t *testing.T) {
	t.Parallel()
	e := seeded(t, Config{})
	other, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	id := strconv.FormatInt(e.sim.AppID(), 10)
	sign := func(key *rsa.PrivateKey, method jwt.SigningMethod, claims jwt.MapClaims) string {
		s, err := jwt.NewWithClaims(method, claims).SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	good := jwt.MapClaims{"iss": id, "iat": now.Add(-30 * time.Second).Unix(), "exp": now.Add(5 * time.Minute).Unix()}
	for name, tc := range map[string]struct {
		token string
		want  int
	}{
		"valid":           {sign(sharedKey(t), jwt.SigningMethodRS256, good), http.StatusOK},
		"client id":       {sign(sharedKey(t), jwt.SigningMethodRS256, jwt.MapClaims{"iss": e.sim.apps[e.sim.AppID()].clientID, "iat": good["iat"], "exp": good["exp"]}), http.StatusOK},
		"other key":       {sign(other, jwt.SigningMethodRS256, good), http.StatusUnauthorized},
		"RS512":           {sign(sharedKey(t), jwt.SigningMethodRS512, good), http.StatusUnauthorized},
		"expired":         {sign(sharedKey(t), jwt.SigningMethodRS256, jwt.MapClaims{"iss": id, "iat": now.Add(-20 * time.Minute).Unix(), "exp": now.Add(-10 * time.Minute).Unix()}), http.StatusUnauthorized},
		"exp too far":     {sign(sharedKey(t), jwt.SigningMethodRS256, jwt.MapClaims{"iss": id, "iat": now.Unix(), "exp": now.Add(30 * time.Minute).Unix()}), http.StatusUnauthorized},
		"iat in future":   {sign(sharedKey(t), jwt.SigningMethodRS256, jwt.MapClaims{"iss": id, "iat": now.Add(5 * time.Minute).Unix(), "exp": now.Add(8 * time.Minute).Unix()}), http.StatusUnauthorized},
		"fractional iat":  {sign(sharedKey(t), jwt.SigningMethodRS256, jwt.MapClaims{"iss": id, "iat": float64(now.Unix()) + 0.5, "exp": good["exp"]}), http.StatusUnauthorized},
		"unknown app":     {sign(sharedKey(t), jwt.SigningMethodRS256, jwt.MapClaims{"iss": "424242", "iat": good["iat"], "exp": good["exp"]}), http.StatusUnauthorized},
		"not a JWT":       {"garbage", http.StatusUnauthorized},
		"installation tk": {"ghs_abc", http.StatusUnauthorized},
	} {
		cl := e.gh(&bearerTransport{base: e.validating(), token: tc.token})
		_, resp, err := cl.Apps.Get(ctx(t), "")
		if resp == nil || resp.StatusCode != tc.want {
			t.Errorf("%s: GET /app = %v (%v), want %d", name, resp, err, tc.want)
		}
	}
}

type bearerTransport struct {
	base  http.RoundTripper
	token string
}

func (bt *bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+bt.token)
	return bt.base.RoundTrip(r)
}

func TestSuspendedAndDeletedInstallations(t *testing.T) {
	t.Parallel()
	e := seeded(t, Config{})
	c := ctx(t)
	cl := e.client(1)
	if _, _, err := cl.Issues.Get(c, "octo", "demo", 10); err != nil {
		t.Fatal(err)
	}
	if err := e.sim.SuspendInstallation(1, true); err != nil {
		t.Fatal(err)
	}
	_, _, err := cl.Issues.Get(c, "octo", "demo", 10)
	wantStatus(t, err, http.StatusForbidden)
	_, _, err = e.appClient().Apps.CreateInstallationToken(c, 1, nil)
	wantStatus(t, err, http.StatusForbidden)
	inst, _, err := e.appClient().Apps.GetInstallation(c, 1)
	if err != nil || inst.SuspendedAt == nil {
		t.Fatalf("suspended installation = %v, %v", inst, err)
	}
	if err := e.sim.SuspendInstallation(1, false); err != nil {
		t.Fatal(err)
	}
	if _, _, err := cl.Issues.Get(c, "octo", "demo", 10); err != nil {
		t.Fatal(err)
	}
	if err := e.sim.DeleteInstallation(1); err != nil {
		t.Fatal(err)
	}
	_, _, err = cl.Issues.Get(c, "octo", "demo", 10)
	if statusOf(err) != http.StatusUnauthorized && err == nil {
		t.Fatalf("deleted installation's token still works: %v", err)
	}
	_, _, err = e.appClient().Apps.GetInstallation(c, 1)
	wantStatus(t, err, http.StatusNotFound)
}

// Narrower permissions accepted for an installation apply to the tokens
// issued after: here, without administration, branch protection's
// required checks are refused.
func TestInstallationPermissionsChanged(t *testing.T) {
	t.Parallel()
	e := seeded(t, Config{})
	c := ctx(t)
	if err := e.sim.SetRequiredChecks("octo", "demo", "main", []string{"ci"}, false); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.client(1).Repositories.GetRequiredStatusChecks(c, "octo", "demo", "main"); err != nil {
		t.Fatalf("with administration:read: %v", err)
	}
	perms := map[string]string{"contents": "write", "issues": "write", "metadata": "read", "pull_requests": "write"}
	if err := e.sim.SetInstallationPermissions(1, perms); err != nil {
		t.Fatal(err)
	}
	_, _, err := e.client(1).Repositories.GetRequiredStatusChecks(c, "octo", "demo", "main")
	wantStatus(t, err, http.StatusForbidden)
	if _, _, err := e.client(1).Issues.Get(c, "octo", "demo", 10); err != nil {
		t.Errorf("issues:write still reads issues: %v", err)
	}
	if err := e.sim.SetInstallationPermissions(1, map[string]string{"issues": "sometimes"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("a bad level: %v", err)
	}
	if err := e.sim.SetInstallationPermissions(99, perms); !errors.Is(err, ErrNotFound) {
		t.Errorf("an unknown installation: %v", err)
	}
}
