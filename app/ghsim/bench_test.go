package ghsim

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/bradleyfalzon/ghinstallation/v2"
	"github.com/google/go-github/v62/github"
)

// BenchmarkMutations measures the simulator under 32 concurrent clients
// making content-creating requests on 200 issues, with no limits and no
// faults: what baton's end-to-end benchmarks drive through it.
func BenchmarkMutations(b *testing.B) {
	sim, err := New(Config{PrivateKey: sharedKey(b), Limits: Limits{PrimaryLimit: -1}})
	if err != nil {
		b.Fatal(err)
	}
	if err := sim.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	defer sim.Close()
	if _, err := sim.AddRepo("octo", "bench", 1); err != nil {
		b.Fatal(err)
	}
	for n := 1; n <= 200; n++ {
		if _, err := sim.AddIssue("octo", "bench", NewIssue{Number: n}); err != nil {
			b.Fatal(err)
		}
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	defer tr.CloseIdleConnections()
	itr, err := ghinstallation.New(tr, sim.AppID(), 1, sim.PrivateKeyPEM())
	if err != nil {
		b.Fatal(err)
	}
	itr.BaseURL = sim.URL()
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
