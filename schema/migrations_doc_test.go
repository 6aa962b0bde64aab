package schema

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// deploy/README.md, which operators read before an upgrade, names the
// newest migration: the one a binary older than it refuses a database
// for.
func TestDeployReadmeNamesTheNewestMigration(t *testing.T) {
	ms, err := Migrations()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join("..", "deploy", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	newest := ms[len(ms)-1].Name + ".sql"
	if !strings.Contains(strings.Join(strings.Fields(string(doc)), " "), "the newest, `"+newest+"`") {
		t.Errorf("deploy/README.md does not name the newest migration, %s, as the newest", newest)
	}
}
