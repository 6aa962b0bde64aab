package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// token create on a data directory without a database says it created one
// (a mistyped --data would otherwise go unnoticed); on an existing one it
// prints only the token.
func TestTokenCreateSaysWhenItCreatesADatabase(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "new-data")
	r := cliRun(t, "", "token", "create", "--actor", "ci", "--all-installations", "--data", dir)
	if r.code != 0 || !strings.HasPrefix(r.stdout, "baton_") ||
		!strings.Contains(r.stderr, "created a new database at "+filepath.Join(dir, "baton.db")) {
		t.Fatalf("first create: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	r = cliRun(t, "", "token", "create", "--actor", "ci", "--all-installations", "--data", dir)
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("second create: exit %d, stderr %q", r.code, r.stderr)
	}
}

// token on a data directory whose database is damaged fails naming the
// file, as serve does, so that the operator knows what to restore.
func TestTokenNamesADamagedDatabase(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "baton.db")
	if err := os.WriteFile(path, []byte(strings.Repeat("not a database ", 100)), 0o600); err != nil {
		t.Fatal(err)
	}
	r := cliRun(t, "", "token", "list", "--data", dir)
	if r.code == 0 || !strings.Contains(r.stderr, "database "+path+": ") || !strings.Contains(r.stderr, "not a database") {
		t.Fatalf("token list on a damaged database: exit %d, stderr %q", r.code, r.stderr)
	}
}
