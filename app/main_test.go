package app

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain is shared by every test file of package app: keep it the only
// one.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
