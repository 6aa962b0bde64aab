package app

import (
	"context"
	"net/http"
)

// InstallationList is the body of GET /v1/installations.
type InstallationList struct {
	Installations []Installation `json:"installations"`
}

// installationLister is what the installations route needs; the registry
// (*Installations) has it. An APIConfig.Installations without it lists
// nothing.
type installationLister interface {
	ListInstallations(ctx context.Context) ([]Installation, error)
}

// listInstallations is GET /v1/installations: the installations baton
// knows, with their repositories, that the token may act on (an admin
// token: all).
func (a *API) listInstallations(w http.ResponseWriter, r *http.Request, p *Principal) error {
	if _, err := apiQuery(r); err != nil {
		return err
	}
	out := InstallationList{Installations: []Installation{}}
	if l, ok := a.installations.(installationLister); ok {
		all, err := l.ListInstallations(r.Context())
		if err != nil {
			return err
		}
		for _, in := range all {
			if p.Admin || p.MayActOn(in.ID) {
				out.Installations = append(out.Installations, in)
			}
		}
	}
	a.writeJSON(w, http.StatusOK, out)
	return nil
}
