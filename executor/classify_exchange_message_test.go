package executor

import (
	"testing"
	"time"

	"github.com/bradleyfalzon/ghinstallation/v2"
)

// A token exchange refused because the installation is suspended, or
// gone, is recorded in words that say so: "installation token: 403
// Forbidden" alone told the user nothing they could act on.
func TestExchangeRefusalSaysWhy(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"suspended", &ghinstallation.HTTPError{Message: "x", Response: withBody(resp(403),
			`{"message":"This installation has been suspended","documentation_url":"https://docs.github.com/rest"}`)},
			"installation token: 403 Forbidden: This installation has been suspended"},
		{"removed", &ghinstallation.HTTPError{Message: "x", Response: withBody(resp(404), `{"message":"Not Found"}`)},
			"installation token: 404 Not Found (the installation was removed, or the App cannot reach it)"},
		{"a page for a body", &ghinstallation.HTTPError{Message: "x", Response: withBody(resp(403), "<html>\n<p>Forbidden</p></html>")},
			"installation token: 403 Forbidden"},
	} {
		c := Classify(tc.err, time.Now())
		if c.Category != CategoryInstallationUnavailable || c.Message != tc.want {
			t.Errorf("%s: %s %q, want %s %q", tc.name, c.Category, c.Message, CategoryInstallationUnavailable, tc.want)
		}
	}
}
