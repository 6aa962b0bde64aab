package app

import "maps"

// AppManifest is a GitHub App manifest: what GitHub creates an App from in
// the manifest flow. deploy/github-app-manifest.json is
// NewAppManifest("baton", "https://baton.example.com").
type AppManifest struct {
	Name        string `json:"name"`
	URL         string `json:"url"`
	Description string `json:"description"`
	// HookAttributes is the App's webhook.
	HookAttributes ManifestHook `json:"hook_attributes"`
	// RedirectURL is where GitHub sends the browser back with the code.
	RedirectURL string `json:"redirect_url"`
	// Public false: only the owner's account can install the App.
	Public                bool              `json:"public"`
	RequestOAuthOnInstall bool              `json:"request_oauth_on_install"`
	DefaultPermissions    map[string]string `json:"default_permissions"`
	DefaultEvents         []string          `json:"default_events"`
}

// ManifestHook is a manifest's webhook.
type ManifestHook struct {
	URL    string `json:"url"`
	Active bool   `json:"active"`
}

// AppPermissions are the repository permissions baton asks for, and no
// more:
//
//   - pull_requests write: read pull requests, update their branches;
//   - contents write: merge pull requests, update refs;
//   - issues write: comment, add and remove labels;
//   - statuses write: set commit statuses (the merge queue's position);
//   - checks read: read check runs and suites (merge queue gates);
//   - administration read: read branch protection's required status
//     checks (merge queue gates) — read only, nothing is administered;
//   - metadata read: every App has it.
func AppPermissions() map[string]string {
	return maps.Clone(appPermissions)
}

var appPermissions = map[string]string{
	"administration": "read",
	"checks":         "read",
	"contents":       "write",
	"issues":         "write",
	"metadata":       "read",
	"pull_requests":  "write",
	"statuses":       "write",
}

// AppEvents are the events baton subscribes to: pull_request (opened,
// labeled, synchronize, closed…), issue_comment (commands such as
// "/baton queue"), check_suite, check_run and status (gates), and
// repository (created, renamed, deleted: which installation covers a
// repository). installation and installation_repositories are sent to
// every App without asking. push is left out: a pull request's new commits
// arrive as pull_request.synchronize, and pushes to other branches are not
// baton's business.
func AppEvents() []string {
	return []string{"check_run", "check_suite", "issue_comment", "pull_request", "repository", "status"}
}

// NewAppManifest returns the manifest of baton's App, named name, served
// at publicURL (its webhook is publicURL/webhooks/github, the manifest
// flow returns to publicURL/setup/callback).
func NewAppManifest(name, publicURL string) AppManifest {
	base := trimTrailingSlash(publicURL)
	return AppManifest{
		Name:               name,
		URL:                base,
		Description:        "baton performs GitHub repository mutations durably: merges, comments, labels, refs and statuses, each exactly once, in order per resource.",
		HookAttributes:     ManifestHook{URL: base + "/webhooks/github", Active: true},
		RedirectURL:        base + "/setup/callback",
		Public:             false,
		DefaultPermissions: AppPermissions(),
		DefaultEvents:      AppEvents(),
	}
}
