package executor

import (
	"context"
	"testing"
	"time"

	"github.com/baton-dev/baton/app/ghsim"
	"github.com/baton-dev/baton/schema"
)

func TestExploreRefNames(t *testing.T) {
	sim, gh := newSim(t, ghsim.Config{})
	c := installationClient(t, gh)
	ctx := context.Background()
	base, _ := sim.Ref("octo", "demo", "heads/main")
	for _, name := range []string{"heads/feat/50%off", "heads/a#b", "heads/a+b&c=d", "heads/ü/x", "tags/v1.0", "heads/a;b,c", "heads/a%2Fb"} {
		if err := sim.SetRef("octo", "demo", name, base, ""); err != nil {
			t.Fatal(err)
		}
		next, _ := sim.AddCommit("octo", "demo", ghsim.Commit{Parents: []string{base}})
		rec, tg, p := actionRecord(t, schema.ActionUpdateRef, schema.Resource{Type: "ref", ID: "octo/demo:" + name}, `{"sha":"`+next+`","expectedSha":"`+base+`"}`)
		a := actions[rec.Action]
		_, _, err := a.do(ctx, c, rec, tg, p)
		got, _ := sim.Ref("octo", "demo", name)
		done, _, _, perr := a.probe(ctx, c, rec, tg, p)
		t.Logf("%s: err=%v cl=%+v moved=%v probe=%v %v", name, err, Classify(err, time.Now()).Category, got == next, done, perr)
	}
}
