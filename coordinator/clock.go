package coordinator

import "time"

// Clock is where the coordinator gets the time and its timers. Every
// decision that depends on time (is a lease expired, when is the local
// deadline, when is the next renewal) asks the Clock, never package time,
// so tests move time with a [FakeClock] instead of sleeping.
type Clock interface {
	// Now returns the current time. The system clock's readings carry
	// Go's monotonic reading, so local deadlines do not move when the wall
	// clock is set.
	Now() time.Time
	// NewTimer returns a timer that sends on its channel once d has
	// passed.
	NewTimer(d time.Duration) Timer
}

// Timer is the part of *time.Timer the coordinator uses, with Go 1.23
// semantics: after Stop or Reset returns, no value from the earlier
// schedule is received.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
	Reset(d time.Duration) bool
}

// SystemClock returns the clock of the machine: time.Now and time.Timer.
func SystemClock() Clock { return systemClock{} }

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) NewTimer(d time.Duration) Timer { return systemTimer{time.NewTimer(d)} }

type systemTimer struct{ t *time.Timer }

func (s systemTimer) C() <-chan time.Time        { return s.t.C }
func (s systemTimer) Stop() bool                 { return s.t.Stop() }
func (s systemTimer) Reset(d time.Duration) bool { return s.t.Reset(d) }
