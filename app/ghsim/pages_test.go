package ghsim

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-github/v62/github"
)

// The html_url of a comment, an issue or a pull request opens a page of
// the simulator's state instead of a 404: what a link baton reports shows
// what baton did. Bodies are escaped.
func TestPages(t *testing.T) {
	t.Parallel()
	e := seeded(t, Config{})
	c := ctx(t)
	cl := e.client(1)
	cm, _, err := cl.Issues.CreateComment(c, "octo", "demo", 10, &github.IssueComment{Body: github.String("done <script>alert(1)</script>")})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := cl.PullRequests.Merge(c, "octo", "demo", 1, "", &github.PullRequestOptions{SHA: DemoHeadSHA(1)}); err != nil {
		t.Fatal(err)
	}
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(url string) (int, string, http.Header) {
		t.Helper()
		resp, err := noFollow.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header
	}
	status, body, h := get(cm.GetHTMLURL())
	if status != 200 || !strings.HasPrefix(h.Get("Content-Type"), "text/html") ||
		!strings.Contains(body, "done &lt;script&gt;alert(1)&lt;/script&gt;") || strings.Contains(body, "<script>") ||
		!strings.Contains(body, `id="issuecomment-`) {
		t.Errorf("comment page: %d %s\n%s", status, h.Get("Content-Type"), body)
	}
	pr, _, err := cl.PullRequests.Get(c, "octo", "demo", 1)
	if err != nil {
		t.Fatal(err)
	}
	if status, body, _ := get(pr.GetHTMLURL()); status != 200 || !strings.Contains(body, "merged") || !strings.Contains(body, "#1") {
		t.Errorf("pull request page: %d\n%s", status, body)
	}
	// A pull request's issue page leads to its pull page, as on GitHub.
	if status, _, h := get(e.sim.URL() + "/octo/demo/issues/1"); status != http.StatusFound || h.Get("Location") != "/octo/demo/pull/1" {
		t.Errorf("issues/1: %d to %q", status, h.Get("Location"))
	}
	for _, path := range []string{"/octo/demo/issues/999", "/octo/nope/issues/10", "/octo/demo/issues/010", "/octo/demo/pull/x", "/repos/octo/issues/10"} {
		if status, _, _ := get(e.sim.URL() + path); status != http.StatusNotFound {
			t.Errorf("%s: %d, want 404", path, status)
		}
	}
}
