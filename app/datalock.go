package app

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
)

// LockFile is the file in the data directory that a serving baton holds
// locked. Two servers on one data directory would run two embedded NATS
// servers over one JetStream store and two SQLite writers that starve each
// other; the second is refused instead. Client commands that open the
// database (`baton token`) do not take it.
const LockFile = "baton.lock"

// errDataDirLocked is wrapped by the error Start returns when another
// process serves from the same data directory.
var errDataDirLocked = errors.New("another baton is serving from this data directory")

// lockDataDir takes the data directory's lock for this process and writes
// its PID into the lock file, for the message a second server prints. The
// returned function releases it.
func lockDataDir(dir string) (release func() error, err error) {
	path := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("data directory lock: %w", err)
	}
	locked, err := tryLock(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("data directory lock %s: %w", path, err)
	}
	if !locked {
		holder := ""
		if b, err := io.ReadAll(f); err == nil {
			if pid, err := strconv.Atoi(string(bytes.TrimSpace(b))); err == nil && pid > 0 {
				holder = fmt.Sprintf(" (process %d)", pid)
			}
		}
		f.Close()
		return nil, fmt.Errorf("%w%s: %s; stop it first, or give this one its own --data", errDataDirLocked, holder, dir)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	// The file stays behind when the server stops: removing it would let a
	// third process lock a new file while a second still waits on the old.
	return f.Close, nil
}
