//go:build !unix

package app

import "os"

// tryLock does not lock where flock is not available: baton is built and
// tested on Unix systems, and elsewhere one server per data directory is
// the operator's to keep.
func tryLock(*os.File) (bool, error) { return true, nil }
