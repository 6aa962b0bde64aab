package main

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// A submission whose answer is lost after baton created the operation is
// sent again and finds it: the command's own operation, not one "submitted
// before". With a generated key nothing else can have used the key, so
// no note at all; with --key the note says it may be this command's.
func TestCLISubmitResentAfterLostAnswer(t *testing.T) {
	t.Parallel()
	env := newCLIEnv(t, cliEnvOptions{})
	var posts atomic.Int32
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		req, err := http.NewRequestWithContext(r.Context(), r.Method, env.URL+r.URL.RequestURI(), bytes.NewReader(body))
		if err != nil {
			t.Error(err)
			return
		}
		req.Header = r.Header.Clone()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return
		}
		defer resp.Body.Close()
		if r.Method == http.MethodPost && posts.Add(1)%2 == 1 {
			// baton answered (201); the connection is lost before the
			// answer reaches the client.
			if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
				conn.Close()
			}
			return
		}
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	}))
	defer proxy.Close()

	r := cliRun(t, "", "submit", "--action", "github.issues.comment", "--resource", "issue:octo/demo#10",
		"--payload", cliComment, "--server", proxy.URL, "--token", env.alice)
	if r.code != 0 || !strings.Contains(r.stdout, "status") || strings.Contains(r.stderr, "existing operation") {
		t.Errorf("submit with a generated key, first answer lost: %+v", r)
	}
	r = cliRun(t, "", "submit", "--key", "lost-1", "--action", "github.issues.comment", "--resource", "issue:octo/demo#10",
		"--payload", cliComment, "--server", proxy.URL, "--token", env.alice)
	if r.code != 0 || !strings.Contains(r.stderr, "perhaps by this command") {
		t.Errorf("submit --key, first answer lost: %+v", r)
	}
	if n := posts.Load(); n != 4 {
		t.Errorf("%d submissions reached baton, want 4 (two each)", n)
	}
}
