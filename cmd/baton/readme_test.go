package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/baton-dev/baton/app/ghsim"
	"github.com/baton-dev/baton/executor"
)

// README.md's walkthrough shows what `serve --dev` and the CLI print, and
// says the operation IDs and head shas are the reader's too: the
// simulator's pull request heads, the merge asked at #1's head, and for
// each key the operation ID of that key for the actor dev, as the submit
// after it prints it.
func TestReadmeWalkthroughValues(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	for n := 1; n <= 3; n++ {
		if want := fmt.Sprintf("#%d head %s", n, ghsim.DemoHeadSHA(n)); !strings.Contains(readme, want) {
			t.Errorf("README.md does not show %q", want)
		}
	}
	if want := `--payload '{"sha":"` + ghsim.DemoHeadSHA(1) + `"}'`; !strings.Contains(readme, want) {
		t.Errorf("README.md's merge is not asked at #1's head: no %s", want)
	}
	keys := regexp.MustCompile(`submit --key (\S+)`).FindAllStringSubmatchIndex(readme, -1)
	if len(keys) < 3 {
		t.Fatalf("README.md submits %d keys", len(keys))
	}
	for _, k := range keys {
		key := readme[k[2]:k[3]]
		id, err := executor.OperationID("dev", key)
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(`(?m)^operation +(\S+)$`).FindStringSubmatch(readme[k[1]:])
		if m == nil || m[1] != id {
			t.Errorf("README.md: the submit of key %s prints operation %v; its ID is %s", key, m, id)
		}
	}
}
