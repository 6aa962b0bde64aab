//go:build !unix

package benchsuite

import "time"

// processCPU is not measured on this system: the table has no CPU per op.
func processCPU() (time.Duration, bool) { return 0, false }
