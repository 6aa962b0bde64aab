package executor

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v4"
)

// The App's JWTs, those of /app routes and of the installation-token
// exchange alike, are issued a minute in the past and expire ten minutes
// after that, as GitHub asks against clock drift: a JWT issued 30 s in the
// past was refused once this machine's clock ran 30 s ahead of GitHub's,
// and every operation failed as if its installation were gone.
func TestAppJWTToleratesClockDrift(t *testing.T) {
	t.Parallel()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pemKey := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	jwts := make(chan string, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if raw, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
			select {
			case jwts <- raw:
			default:
			}
		}
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Path == "/app":
			_, _ = w.Write([]byte(`{"id":1,"slug":"baton"}`))
		case strings.HasSuffix(r.URL.Path, "/access_tokens"):
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte(`{"token":"ghs_x","expires_at":"` + time.Now().Add(time.Hour).UTC().Format(time.RFC3339) + `"}`))
		default:
			_, _ = w.Write([]byte(`{}`))
		}
	}))
	defer srv.Close()
	g, err := NewGitHubClients(GitHubConfig{BaseURL: srv.URL, AppID: 1, PrivateKey: pemKey})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if _, _, err := g.App().Apps.Get(context.Background(), ""); err != nil {
		t.Fatal(err)
	}
	inst, err := g.Installation(7)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := inst.Issues.Get(context.Background(), "o", "r", 1); err != nil {
		t.Fatal(err)
	}
	close(jwts)
	n := 0
	for raw := range jwts {
		n++
		name := fmt.Sprintf("JWT %d", n)
		var claims jwt.RegisteredClaims
		if _, err := jwt.ParseWithClaims(raw, &claims, func(*jwt.Token) (any, error) { return &key.PublicKey, nil }); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		now := time.Now()
		iat, exp := claims.IssuedAt.Time, claims.ExpiresAt.Time
		if ahead := now.Sub(iat); ahead < JWTBackdate || ahead > JWTBackdate+5*time.Second {
			t.Errorf("%s: iat %s before now, want %s", name, ahead, JWTBackdate)
		}
		if life := exp.Sub(iat); life != JWTLifetime {
			t.Errorf("%s: exp %s after iat, want %s (GitHub's limit)", name, life, JWTLifetime)
		}
	}
	if n != 2 {
		t.Errorf("%d JWTs sent, want 2 (GET /app, the token exchange)", n)
	}
}
