package app

import (
	"context"
	"errors"
	"time"

	"github.com/baton-dev/baton/coordinator"
)

// CoordinatorLeases serves the API's lease routes from the lease
// coordinator, the one the executor's operations use: an outside holder of
// a key makes the operations on it wait, and the other way round. The API
// keeps no handle between requests, so renew and release go by fence (key,
// owner, token).
type CoordinatorLeases struct {
	c *coordinator.Coordinator
}

var _ LeaseService = (*CoordinatorLeases)(nil)

// NewCoordinatorLeases adapts c to LeaseService.
func NewCoordinatorLeases(c *coordinator.Coordinator) (*CoordinatorLeases, error) {
	if c == nil {
		return nil, errors.New("app: NewCoordinatorLeases needs a coordinator")
	}
	return &CoordinatorLeases{c: c}, nil
}

// Acquire implements LeaseService.
func (l *CoordinatorLeases) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (LeaseGrant, error) {
	lease, err := l.c.Acquire(ctx, key, owner, ttl)
	if err != nil {
		return LeaseGrant{}, err
	}
	return LeaseGrant{Key: lease.Key, Owner: lease.Owner, Token: lease.Token, ExpiresAt: lease.ExpiresAt()}, nil
}

// Renew implements LeaseService.
func (l *CoordinatorLeases) Renew(ctx context.Context, key, owner string, token int64, ttl time.Duration) (LeaseGrant, error) {
	g, err := l.c.RenewFence(ctx, coordinator.Fence{Key: key, Owner: owner, Token: token}, ttl)
	if err != nil {
		return LeaseGrant{}, err
	}
	return LeaseGrant{Key: g.Key, Owner: g.Owner, Token: g.Token, ExpiresAt: g.ExpiresAt}, nil
}

// Release implements LeaseService.
func (l *CoordinatorLeases) Release(ctx context.Context, key, owner string, token int64) error {
	return l.c.ReleaseFence(ctx, coordinator.Fence{Key: key, Owner: owner, Token: token})
}

// Check implements LeaseService.
func (l *CoordinatorLeases) Check(ctx context.Context, key string) (LeaseState, error) {
	st, err := l.c.Check(ctx, key)
	if err != nil {
		return LeaseState{}, err
	}
	return LeaseState{Key: st.Key, Locked: st.Locked, Owner: st.Owner, Token: st.Token, ExpiresIn: st.ExpiresIn}, nil
}
