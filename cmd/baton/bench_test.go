package main

import (
	"testing"
)

// bench --payload @- reads the payload from stdin, as submit's does.
func TestBenchPayloadFromStdin(t *testing.T) {
	t.Parallel()
	env := newCLIEnv(t, cliEnvOptions{})
	r := cliRun(t, `{"labels":["bench"]}`, "bench", "--action", "github.issues.add_labels", "--payload", "@-",
		"--resources", "issue:octo/demo#10", "--ops", "2", "--clients", "1", "--no-wait", "--json",
		"--server", env.URL, "--token", env.alice)
	if r.code != 0 {
		t.Fatalf("bench --payload @-: %+v", r)
	}
	var rep BenchReport
	cliDecodeJSON(t, r.stdout, &rep)
	if rep.Submitted != 2 || len(rep.SubmitErrors) != 0 || rep.Action != "github.issues.add_labels" {
		t.Errorf("bench report %+v", rep)
	}
	if r := cliRun(t, `not json`, "bench", "--payload", "@-", "--server", env.URL, "--token", env.alice); r.code != 2 {
		t.Errorf("bench with a bad payload on stdin: %+v", r)
	}
}
