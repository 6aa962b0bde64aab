package benchsuite

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/baton-dev/baton/app"
	"github.com/baton-dev/baton/coordinator"
	"github.com/baton-dev/baton/executor"
	"github.com/baton-dev/baton/schema"
)

// benchInstallations stubs the installation lookup with a fixed answer,
// without the SQLite read of app.Installations: octo/* is installation 1,
// nothing else is installed.
type benchInstallations struct{}

func (benchInstallations) InstallationOf(_ context.Context, owner, repo string) (int64, error) {
	if owner == "octo" {
		return 1, nil
	}
	return 0, schema.Errorf(schema.CodeForbidden, "baton is not installed on %s/%s", owner, repo)
}

// HTTPSubmit measures POST /v1/operations over real HTTP from 32
// concurrent clients (keep-alive connections): authentication, strict
// decoding and validation, the token's check against the installation (the
// installation lookup itself is stubbed, benchInstallations: a fixed
// answer, no SQLite read), the durable write and the acknowledged publish.
// Nothing carries the operations out, so only the submission path is
// measured.
func HTTPSubmit(b *testing.B) {
	ctx := context.Background()
	db := openDB(b)
	br := startBroker(b)
	store := executor.NewSQLiteStore(db, nil)
	exec, err := executor.New(executor.Config{Store: store, Dispatcher: br})
	if err != nil {
		fatalf(b, "%v", err)
	}
	if err := exec.Start(ctx); err != nil {
		fatalf(b, "start the executor: %v", err)
	}
	b.Cleanup(func() { stopWithin(exec.Stop) })
	coord, err := coordinator.New(coordinator.Config{DB: db})
	if err != nil {
		fatalf(b, "%v", err)
	}
	leases, err := app.NewCoordinatorLeases(coord)
	if err != nil {
		fatalf(b, "%v", err)
	}
	tokens, err := app.NewTokenStore(db, app.TokenStoreConfig{})
	if err != nil {
		fatalf(b, "%v", err)
	}
	token, _, err := tokens.CreateToken(ctx, app.TokenSpec{Actor: "bench", Installations: []int64{1}})
	if err != nil {
		fatalf(b, "%v", err)
	}
	api, err := app.NewAPI(app.APIConfig{Operations: exec, Leases: leases, DeadLetters: br,
		Installations: benchInstallations{}, Tokens: tokens})
	if err != nil {
		fatalf(b, "%v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fatalf(b, "%v", err)
	}
	srv := &http.Server{Handler: api}
	app.SetAPIServerTimeouts(srv)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(l)
	}()
	b.Cleanup(func() {
		stopWithin(srv.Shutdown)
		<-served
	})
	url := "http://" + l.Addr().String() + "/v1/operations"
	tr := &http.Transport{MaxIdleConns: 64, MaxIdleConnsPerHost: 64}
	b.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: tr, Timeout: time.Minute}
	var lat latencies
	resetTimer(b)
	spread(b, 32, &lat, func(i int) error {
		body := fmt.Sprintf(`{"idempotencyKey":"bench-%d","action":"github.issues.comment","resource":{"type":"issue","id":"octo/demo#%d"},"payload":{"body":"bench %d"}}`,
			i, 10+i%3, i)
		req, err := http.NewRequest("POST", url, bytes.NewReader([]byte(body)))
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			return errors.New(resp.Status)
		}
		return nil
	})
	b.StopTimer()
	reportRate(b)
	lat.report(b)
}
