package proof

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// binDir holds the baton binary the process tests build (once) and run.
var binDir string

// TestMain is shared by every test of the package: keep it the only one.
// The child processes the tests start are killed by the tests themselves;
// goleak checks that no goroutine of the test process outlives them.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "baton-proof-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
