package client

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// An installation read by the client and written again (baton
// installations --json) has every field the API always sends, empty ones
// included.
func TestInstallationKeepsItsShape(t *testing.T) {
	t.Parallel()
	const api = `{"id":7,"account":"octo","accountType":"","repositorySelection":"selected","repositories":[],"permissions":{},"events":[],"suspended":false,"updatedAt":"2030-01-01T00:00:00Z"}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"installations":[`+api+`]}`)
	}))
	defer srv.Close()
	c, err := New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	list, err := c.Installations(context.Background())
	if err != nil || len(list) != 1 {
		t.Fatalf("Installations = %v, %v", list, err)
	}
	b, err := json.Marshal(list[0])
	if err != nil {
		t.Fatal(err)
	}
	var got, want map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(api), &want); err != nil {
		t.Fatal(err)
	}
	for k := range want {
		if _, ok := got[k]; !ok {
			t.Errorf("%s is left out: %s", k, b)
		}
	}
}
