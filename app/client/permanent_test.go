package client

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// An error that trying again cannot mend is reported at once, not after
// the retries of a passing failure: a certificate the client does not
// trust (here the test server's own, which the default client does not
// know), and a header value the client cannot send (a control character
// in the token or the User-Agent), which is refused when the client is
// made.
func TestPermanentErrorsNotRetried(t *testing.T) {
	t.Parallel()
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"status":"ok"}`))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	defer srv.Close()
	c, err := New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = c.Health(context.Background())
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("Health over a certificate not trusted: %v", err)
	}
	if n := conns.Load(); n != 1 || time.Since(start) > 2*time.Second {
		t.Errorf("a certificate not trusted was tried %d times over %s, want once", n, time.Since(start).Round(time.Millisecond))
	}

	for _, opt := range []Option{WithToken("baton_\x01abc"), WithToken("baton_abc\x7f"), WithUserAgent("tool\x00")} {
		if _, err := New(srv.URL, opt); err == nil || !strings.Contains(err.Error(), "control character") {
			t.Errorf("New with a control character in a header: %v", err)
		}
	}
	// A tab is a header value's own blank, not a control character.
	if _, err := New(srv.URL, WithUserAgent("tool\tv1")); err != nil {
		t.Error(err)
	}
}

// A Wait that met a certificate it does not trust after the server had
// answered (the server came back with another certificate) returns at
// once: it is not a restart to ride through for minutes.
func TestWaitReportsAnUntrustedCertificateAtOnce(t *testing.T) {
	t.Parallel()
	other := selfSigned(t)
	var swapped atomic.Bool
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Each answer on a connection of its own: the next request
		// shakes hands again, and meets the other certificate.
		w.Header().Set("Connection", "close")
		io.WriteString(w, `{"operationId":"x","status":"running"}`)
		swapped.Store(true)
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	defer srv.Close()
	own := srv.TLS.Certificates[0]
	srv.TLS.GetCertificate = func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		if swapped.Load() {
			return &other, nil
		}
		return &own, nil
	}
	srv.TLS.Certificates = nil
	c, err := New(srv.URL, WithHTTPClient(srv.Client()))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = c.Wait(context.Background(), strings.Repeat("ab", 32), time.Minute)
	if err == nil || !strings.Contains(err.Error(), "certificate") || time.Since(start) > 5*time.Second {
		t.Errorf("Wait that met an untrusted certificate: %v after %s, want a certificate error at once", err, time.Since(start).Round(time.Millisecond))
	}
}

// selfSigned makes a certificate for 127.0.0.1 no client trusts.
func selfSigned(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "other"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}
