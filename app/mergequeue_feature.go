package app

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/baton-dev/baton/app/mergequeue"
	"github.com/baton-dev/baton/schema"
)

// MergeQueueConfig is what an operator sets of the merge queue
// (mergequeue.Config's fields of the same names).
type MergeQueueConfig struct {
	// Label puts a pull request in the queue. Defaults to "baton:queue".
	Label string
	// RequiredChecks, if not empty, are the check run names or status
	// contexts a gate requires, instead of the base branch's protection.
	RequiredChecks []string
	// MergeMethod is merge, squash or rebase. Defaults to merge.
	MergeMethod string
	// GateTimeout is how long a pull request's required checks may stay
	// pending after it joined or moved to a new head before it bounces
	// (mergequeue.Config.GateTimeout). Defaults to 60m; between 1m and
	// 24h.
	GateTimeout time.Duration
}

// check refuses the settings mergequeue.New would refuse, so that a bad
// one fails NewServer, before anything is opened, rather than Start.
func (c MergeQueueConfig) check() error {
	if err := mergequeue.CheckSettings(c.Label, c.RequiredChecks, c.MergeMethod); err != nil {
		return fmt.Errorf("merge queue: %w", err)
	}
	if err := mergequeue.CheckGateTimeout(c.GateTimeout); err != nil {
		return fmt.Errorf("merge queue: %w", err)
	}
	return nil
}

// MergeQueueHandler is the event handler of the merge queue q: it turns
// webhook deliveries into the queue's events and the queue's errors into
// the dispatcher's (a *mergequeue.RetryError into RetryAfter,
// mergequeue.ErrInvalidEvent into Permanent). The server subscribes it;
// so can a stack wired by hand (tests).
func MergeQueueHandler(q *mergequeue.Queue) EventHandler { return mergeQueueHandler{q} }

type mergeQueueHandler struct{ q *mergequeue.Queue }

func (h mergeQueueHandler) Events() []string { return h.q.Events() }

func (h mergeQueueHandler) HandleEvent(ctx context.Context, d Delivery) error {
	err := h.q.HandleEvent(ctx, mergequeue.Event{
		DeliveryID:     d.ID,
		Name:           d.Event,
		Action:         d.Action,
		InstallationID: d.InstallationID,
		Repository:     d.Repository,
		Payload:        d.Payload,
	})
	var re *mergequeue.RetryError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &re):
		return RetryAfter(re.After, err)
	case errors.Is(err, mergequeue.ErrInvalidEvent):
		return Permanent(err)
	}
	return err
}

// startMergeQueue builds the merge queue, subscribes it and mounts its
// routes. It runs before the event dispatcher starts.
func (s *Server) startMergeQueue(ctx context.Context) error {
	q, err := mergequeue.New(mergequeue.Config{
		DB:            s.db,
		Leases:        s.coord,
		Operations:    s.exec,
		DeadLetters:   s.broker,
		GitHub:        s.gh.Installation,
		Installations: s.installs.CurrentNames(),
		Repositories: func(ctx context.Context) ([]mergequeue.Repository, error) {
			all, err := s.installs.ListInstallations(ctx)
			if err != nil {
				return nil, err
			}
			var out []mergequeue.Repository
			for _, in := range all {
				if in.Suspended {
					continue
				}
				for _, r := range in.Repositories {
					out = append(out, mergequeue.Repository{InstallationID: in.ID, FullName: r})
				}
			}
			return out, nil
		},
		Label:          s.cfg.MergeQueue.Label,
		RequiredChecks: s.cfg.MergeQueue.RequiredChecks,
		MergeMethod:    s.cfg.MergeQueue.MergeMethod,
		GateTimeout:    s.cfg.MergeQueue.GateTimeout,
		Logger:         s.log,
		Registerer:     s.reg,
	})
	if err != nil {
		return err
	}
	if err := s.dispatcher.Subscribe("mergequeue", MergeQueueHandler(q)); err != nil {
		return err
	}
	// The queue learns what became of its operations (a merge that
	// succeeded or was refused).
	s.finished = append(s.finished, q.OnOperationFinished)
	// Mounted route by route, so that a wrong method or an unknown path
	// is answered before the token is asked for, as beside the API's own
	// routes.
	s.api.HandleAuthenticatedRoutes("/v1/repos/", mergequeue.Routes(), mergequeue.NewHandler(q, s.authorizeRepository))
	if err := q.Start(ctx); err != nil {
		return err
	}
	s.onStop(q.Stop)
	return nil
}

// authorizeRepository lets a token read and reconcile a repository's
// queue when it may act on the repository's installation; the caller is
// the token's ID.
func (s *Server) authorizeRepository(r *http.Request, owner, repo string) (string, error) {
	if err := authorizeRepositoryOf(r, s.installs.CurrentNames(), owner, repo); err != nil {
		return "", err
	}
	p, _ := PrincipalFromContext(r.Context())
	return "token:" + strconv.FormatInt(p.TokenID, 10), nil
}

// authorizeRepositoryOf is authorizeRepository with the installations
// registry given. A token bound to installations learns of other
// repositories only that it may not act on them (principalInstallation).
func authorizeRepositoryOf(r *http.Request, installs RepositoryInstallations, owner, repo string) error {
	p, ok := PrincipalFromContext(r.Context())
	if !ok {
		return schema.ErrUnauthorized
	}
	inst, err := installs.InstallationOf(r.Context(), owner, repo)
	if err != nil && p.Admin && schema.ErrorCode(err) == schema.CodeForbidden && !errors.Is(err, ErrInstallationUnavailable) {
		return schema.Errorf(schema.CodeNotFound, "baton is not installed on %s/%s", owner, repo)
	}
	_, err = principalInstallation(p, owner+"/"+repo, inst, err)
	return err
}
