package ghsim

import (
	"sync"
	"time"
)

// Effect is one REST request that applied a mutation. Seq is strictly
// increasing in the order the mutations were applied; effects on one
// repository are appended while its lock is held, so their order is the
// order of the repository's history.
type Effect struct {
	Seq            int64  `json:"seq"`
	InstallationID int64  `json:"installationId"`
	Method         string `json:"method"`
	Path           string `json:"path"`
	// Status is the status the request was (or, when Dropped, would have
	// been) answered with.
	Status    int    `json:"status"`
	RequestID string `json:"requestId"`
	// Resource names what the mutation touched, in baton's resource-key
	// form: "pull_request:octo/demo#1", "issue:octo/demo#10",
	// "ref:octo/demo:heads/main", "commit:octo/demo@<sha>".
	Resource string `json:"resource"`
	// StartedAt is when the request arrived, AppliedAt when the mutation
	// was applied, EndedAt when the answer was ready to be sent (or the
	// connection about to be dropped): a client's next call, made after it
	// read the answer, starts after EndedAt. EndedAt is zero (and left
	// out of the JSON) while the request is in flight. AppliedAt never
	// decreases with Seq.
	StartedAt time.Time `json:"startedAt"`
	AppliedAt time.Time `json:"appliedAt"`
	EndedAt   time.Time `json:"endedAt,omitzero"`
	// Dropped: the connection was closed without an answer after the
	// mutation was applied (FaultDropAfter).
	Dropped bool `json:"dropped,omitempty"`
}

type effectLog struct {
	mu      sync.Mutex
	effects []Effect
}

// add appends an effect, applied at now, and returns its index. AppliedAt
// is raised to the previous effect's when now is earlier (a reading taken
// before another request took the lock, or a clock set back through
// Config.Now), so AppliedAt follows Seq across repositories too.
func (l *effectLog) add(e Effect, now time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	e.Seq = int64(len(l.effects)) + 1
	e.AppliedAt = now
	if n := len(l.effects); n > 0 && e.AppliedAt.Before(l.effects[n-1].AppliedAt) {
		e.AppliedAt = l.effects[n-1].AppliedAt
	}
	l.effects = append(l.effects, e)
	return len(l.effects) - 1
}

// finish stamps the end of the request that applied the effects idx.
func (l *effectLog) finish(idx []int, now time.Time, dropped bool) {
	if len(idx) == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, i := range idx {
		l.effects[i].EndedAt = now
		l.effects[i].Dropped = dropped
	}
}

// Effects returns the effect log, oldest first.
func (s *Sim) Effects() []Effect { return s.EffectsSince(0) }

// EffectsSince returns the effects with Seq greater than seq, oldest first.
func (s *Sim) EffectsSince(seq int64) []Effect {
	s.effects.mu.Lock()
	defer s.effects.mu.Unlock()
	if seq < 0 {
		seq = 0
	}
	if seq >= int64(len(s.effects.effects)) {
		return []Effect{}
	}
	return append([]Effect(nil), s.effects.effects[seq:]...)
}
