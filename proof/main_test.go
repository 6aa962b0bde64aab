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
// goleak checks that no goroutine of the test process outlives them. The
// cleanup removes the binary's directory and exits with the run's code (a
// cleanup replaces VerifyTestMain's own os.Exit).
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "baton-proof-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	binDir = dir
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		os.RemoveAll(dir)
		os.Exit(code)
	}))
}
