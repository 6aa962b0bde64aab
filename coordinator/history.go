package coordinator

import (
	"context"
	"time"
)

// History returns the key's last HistoryLimit events, oldest first:
// acquisitions, takeovers of expired leases (EventPreempted, naming the
// lease taken over and how long it had been expired), releases and
// force-releases. It is for people debugging who held a resource when.
func (c *Coordinator) History(ctx context.Context, key string) ([]Event, error) {
	if err := validateKey(key); err != nil {
		return nil, err
	}
	return c.store.History(ctx, key, HistoryLimit)
}

// PruneHistory deletes the history of the keys nobody has held since
// before (and that hold no lease now), and returns how many keys' it
// deleted. Each busy key keeps its last HistoryLimit events anyway; this
// bounds the history of keys that are done with, such as the pull
// requests and issues of long ago.
func (c *Coordinator) PruneHistory(ctx context.Context, before time.Time) (int64, error) {
	return c.store.PruneHistory(ctx, before)
}
