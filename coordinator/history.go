package coordinator

import "context"

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
