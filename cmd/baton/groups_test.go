package main

import (
	"strings"
	"testing"
)

// A mistyped subcommand of a group is a usage error, not help and exit 0;
// the group alone prints its help.
func TestGroupCommandsRefuseUnknownSubcommands(t *testing.T) {
	for _, group := range []string{"lease", "dlq", "token", "queue"} {
		t.Run(group, func(t *testing.T) {
			r := cliRun(t, "", group, "bogus", "x")
			if r.code != 2 || !strings.Contains(r.stderr, `unknown command "bogus"`) {
				t.Errorf("baton %s bogus x: exit %d, stderr %q", group, r.code, r.stderr)
			}
			if r := cliRun(t, "", group); r.code != 0 || !strings.Contains(r.stdout, "Usage:") {
				t.Errorf("baton %s: exit %d, stdout %q", group, r.code, r.stdout)
			}
		})
	}
}
