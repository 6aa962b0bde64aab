package client

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// A redirect to another origin (another port of the same host here: what
// a proxy's "http to https" or sign-in redirect looks like) does not carry
// the API token there, and the call fails saying where it was sent.
func TestRedirectElsewhereKeepsTheToken(t *testing.T) {
	t.Parallel()
	var leaked atomic.Value
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		leaked.Store(r.Header.Get("Authorization"))
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"operationId":"x"}`)
	}))
	defer other.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer srv.Close()
	c, err := New(srv.URL, WithToken("baton_secret"), WithRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Get(context.Background(), strings.Repeat("a", 64))
	if v, _ := leaked.Load().(string); v != "" {
		t.Errorf("the redirect's target got Authorization %q", v)
	}
	if err == nil || !strings.Contains(err.Error(), other.URL) {
		t.Errorf("Get through a redirect elsewhere = %v, want an error naming %s", err, other.URL)
	}
}

// A submission answered with a redirect that would turn it into a GET (a
// 301, 302 or 303) is not followed: the GET would list operations, and
// the submission, never made, would look made.
func TestSubmitRedirectedToAGetFails(t *testing.T) {
	t.Parallel()
	var posts, gets atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/old/v1/operations":
			posts.Add(1)
			http.Redirect(w, r, "/v1/operations", http.StatusMovedPermanently)
		case r.Method == http.MethodGet:
			gets.Add(1)
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"operations":[],"nextCursor":""}`)
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	defer srv.Close()
	c, err := New(srv.URL+"/old", WithToken("baton_x"), WithRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	op, _, err := c.Submit(context.Background(), SubmitRequest{IdempotencyKey: "k", Action: "github.issues.comment"})
	if err == nil {
		t.Errorf("Submit answered by a redirect to a GET = %+v, nil error (POSTs %d, GETs %d)", op, posts.Load(), gets.Load())
	}
	if gets.Load() != 0 {
		t.Errorf("the redirect was followed with %d GETs", gets.Load())
	}
}
