package executor

import (
	"testing"
	"time"
)

// Of the attempts that meet a pause's rate limit, only the one that
// begins the pause says so: extending a pause in force is not news.
func TestPauseBeginsOnce(t *testing.T) {
	p := newPauses()
	now := time.Unix(1000, 0)
	if !p.set(1, now, now.Add(time.Minute)) {
		t.Error("the first pause did not begin")
	}
	if p.set(1, now.Add(time.Second), now.Add(2*time.Minute)) || p.set(1, now.Add(time.Second), now.Add(time.Second)) {
		t.Error("a pause in force began again")
	}
	if !p.set(2, now, now.Add(time.Minute)) {
		t.Error("another installation's pause did not begin")
	}
	if !p.set(1, now.Add(3*time.Minute), now.Add(4*time.Minute)) {
		t.Error("a pause after the last one ended did not begin")
	}
}
