package ghsim

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/bradleyfalzon/ghinstallation/v2"
	"github.com/google/go-github/v62/github"
)

// BenchmarkMutations measures the simulator under 32 concurrent clients
// making content-creating requests on 200 issues, with no limits and no
// faults: what baton's end-to-end benchmarks drive through it.
func BenchmarkMutations(b *testing.B) {
	sim, itr := benchSim(b, Config{})
	gh, _ := github.NewClient(&http.Client{Transport: itr}).WithEnterpriseURLs(sim.URL(), sim.URL())
	var next atomic.Int64
	b.SetParallelism(16) // 16 × GOMAXPROCS goroutines
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := next.Add(1)
			n := int(i%200) + 1
			var err error
			if i%2 == 0 {
				_, _, err = gh.Issues.CreateComment(context.Background(), "octo", "bench", n, &github.IssueComment{Body: github.String(fmt.Sprint(i))})
			} else {
				_, _, err = gh.Issues.AddLabelsToIssue(context.Background(), "octo", "bench", n, []string{"l" + fmt.Sprint(i%5)})
			}
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(len(sim.Effects()))/b.Elapsed().Seconds(), "effects/s")
}

// benchSim is a started simulator with octo/bench in installation 1 and
// its issues 1 to 200, and an installation-token transport for it.
func benchSim(b *testing.B, cfg Config) (*Sim, *ghinstallation.Transport) {
	b.Helper()
	cfg.PrivateKey = sharedKey(b)
	cfg.Limits = Limits{PrimaryLimit: -1}
	sim, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	if err := sim.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = sim.Close() })
	if _, err := sim.AddRepo("octo", "bench", 1); err != nil {
		b.Fatal(err)
	}
	for n := 1; n <= 200; n++ {
		if _, err := sim.AddIssue("octo", "bench", NewIssue{Number: n}); err != nil {
			b.Fatal(err)
		}
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	b.Cleanup(tr.CloseIdleConnections)
	itr, err := ghinstallation.New(tr, sim.AppID(), 1, sim.PrivateKeyPEM())
	if err != nil {
		b.Fatal(err)
	}
	itr.BaseURL = sim.URL()
	return sim, itr
}

// BenchmarkCreateComment measures what baton's end-to-end benchmark
// drives: 32 clients posting issue comments through go-github, client and
// simulator together.
func BenchmarkCreateComment(b *testing.B) {
	sim, itr := benchSim(b, Config{})
	gh, _ := github.NewClient(&http.Client{Transport: itr}).WithEnterpriseURLs(sim.URL(), sim.URL())
	var next atomic.Int64
	b.SetParallelism(16) // 16 × GOMAXPROCS goroutines
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := next.Add(1)
			_, _, err := gh.Issues.CreateComment(context.Background(), "octo", "bench", int(i%200)+1, &github.IssueComment{Body: github.String(fmt.Sprint(i))})
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkCreateCommentHandler is the simulator's share of a comment
// alone: the request goes straight into its handler, without a client or
// a connection. With a webhook, each comment is also rendered and queued
// as an issue_comment delivery (to a receiver that answers at once).
func BenchmarkCreateCommentHandler(b *testing.B) {
	for _, hook := range []bool{false, true} {
		b.Run("webhook="+strconv.FormatBool(hook), func(b *testing.B) {
			var cfg Config
			if hook {
				recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
				b.Cleanup(recv.Close)
				cfg.WebhookURL = recv.URL
			}
			sim, itr := benchSim(b, cfg)
			tok, err := itr.Token(context.Background())
			if err != nil {
				b.Fatal(err)
			}
			h := sim.Handler()
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				body := `{"body":"` + strconv.Itoa(i) + `"}` + "\n" // as go-github sends it
				req := httptest.NewRequest(http.MethodPost, "/api/v3/repos/octo/bench/issues/"+strconv.Itoa(i%200+1)+"/comments", strings.NewReader(body))
				req.Header.Set("Authorization", "token "+tok)
				req.Header.Set("Content-Type", "application/json")
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				if w.Code != http.StatusCreated {
					b.Fatalf("status %d: %s", w.Code, w.Body)
				}
			}
			b.StopTimer()
			if err := sim.WaitDeliveries(context.Background()); err != nil {
				b.Fatal(err)
			}
		})
	}
}
