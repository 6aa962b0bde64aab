package coordinator

import (
	"slices"
	"testing"
	"time"
)

// Fake timers fire when the time passes them, in order; Stop and Reset
// leave no stale value behind, as time.Timer does since Go 1.23.
func TestFakeClockTimers(t *testing.T) {
	t.Parallel()
	c := NewFakeClock(epoch)
	t1 := c.NewTimer(2 * time.Second)
	t2 := c.NewTimer(time.Second)
	t3 := c.NewTimer(3 * time.Second)
	if got := c.Timers(); !slices.EqualFunc(got, []time.Time{epoch.Add(time.Second), epoch.Add(2 * time.Second), epoch.Add(3 * time.Second)}, time.Time.Equal) {
		t.Fatalf("timers %v", got)
	}
	c.Advance(1500 * time.Millisecond)
	select {
	case at := <-t2.C():
		if !at.Equal(epoch.Add(1500 * time.Millisecond)) {
			t.Errorf("fired with %v", at)
		}
	default:
		t.Fatal("due timer did not fire")
	}
	select {
	case <-t1.C():
		t.Fatal("timer fired early")
	default:
	}
	if !t3.Stop() || t3.Stop() {
		t.Error("Stop results wrong")
	}
	c.Advance(time.Second) // t1 fires, its value waits in the channel
	if t1.Reset(time.Second) {
		t.Error("Reset of a fired timer reported it armed")
	}
	select {
	case <-t1.C():
		t.Fatal("stale value after Reset")
	default:
	}
	c.Advance(time.Second)
	<-t1.C()
	if n := len(c.Timers()); n != 0 {
		t.Errorf("%d timers left", n)
	}
	t4 := c.NewTimer(0) // due at once
	<-t4.C()
	c.Set(epoch) // back in time: nothing fires
	if !c.Now().Equal(epoch) {
		t.Error("Set")
	}
}

func TestSystemClock(t *testing.T) {
	t.Parallel()
	c := SystemClock()
	before := time.Now()
	if now := c.Now(); now.Before(before) {
		t.Fatal("system clock behind time.Now")
	}
	tm := c.NewTimer(time.Millisecond)
	<-tm.C()
	tm.Reset(time.Hour)
	if !tm.Stop() {
		t.Error("Stop of an armed timer")
	}
}
