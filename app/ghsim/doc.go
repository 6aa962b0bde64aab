// Package ghsim is a GitHub simulator served over real HTTP: the subset of
// GitHub's REST API that baton calls, GitHub App authentication, rate
// limits, webhooks and the App manifest flow, faithful enough that code
// which works against it works against GitHub. baton's tests use it, `baton
// serve --dev` runs it in-process, and `baton ghsim` serves it on its own for
// anyone developing automations offline. It imports nothing of baton's.
//
// # What it simulates
//
// Authentication: App JWTs (RS256, iss = App ID or client ID, iat and exp
// checked with GitHub's 60 s drift and 10 min lifetime), exchanged at
// POST /app/installations/{id}/access_tokens for installation tokens
// ("ghs_…", one hour by default, narrowed by repositories and permissions
// if asked). Every REST call checks its token: expired or unknown is 401, a
// repository outside the token's installation is 404, a missing permission
// 403, a suspended installation 403, a write to an archived repository
// 403. A renamed repository's old name (RenameRepo) is redirected to its
// new one, 301 for GET and HEAD and 307 for other methods, until a
// repository is created under the old name.
//
// REST routes (also under /api/v3, as GitHub Enterprise Server has them):
// GET /app, /app/installations[/{id}], /installation/repositories,
// /rate_limit; GET /repos/{owner}/{repo} (the full repository, its
// permissions those of the token); pull requests (get, list, merge with its
// sha check — 409 — and its mergeability and required-checks refusals —
// 405 —, update-branch with expected_head_sha — 422 — and, as GitHub, 422 "There
// are no new commits on the base branch." when the head has every commit of
// the base, is-merged); issues,
// issue comments (with per_page/page pagination and Link headers) and labels
// (pull requests are issues too: one number space per repository; a
// deleted issue answers 410 Gone; adding a label matches an existing one
// whatever its case, but removing one needs its exact name, else 404
// "Label does not exist", as on GitHub); git refs
// (get, create, update with fast-forward checks on a commit graph — 422
// "Update is not a fast forward" —, delete); git commits (get, with
// their parents); a branch (get; a renamed
// branch's old name answers 301 to its new one); commit statuses (create,
// combined, list; a context is case-insensitive, as GitHub's), check runs and suites, branch protection's required
// status checks, collaborator permissions; the App's webhook deliveries log
// (list with cursor, get, redeliver); and the manifest conversion. The
// html_url of an issue, a pull request or a comment opens a plain page of
// its state (title, labels, comments; merged or not), read-only. Status
// codes, headers and JSON shapes follow GitHub's REST documentation (a
// request body that is not JSON is 400 "Problems parsing JSON", JSON that
// is not an object 400 "Body should be a JSON object", an object with a
// field of the wrong type 422 "Validation Failed"); the
// package's tests validate every response, and every webhook payload,
// against GitHub's published OpenAPI description.
//
// Every response carries X-GitHub-Request-Id and a Date on the
// simulator's clock (Config.Now), the clock of its rate-limit resets;
// every REST response carries the x-ratelimit-* headers.
//
// # Guarantees
//
//   - Mutations of one repository are serialised by a lock of that
//     repository; a mutation, its entry in the effect log and its webhooks
//     are applied together. There is no global lock across I/O: with no
//     limits and no faults configured the simulator answers at once, and
//     concurrent clients on different repositories do not wait on each
//     other.
//   - The effect log (Effects, GET /_ghsim/effects) holds every REST request
//     that applied a mutation, exactly once, with Seq strictly increasing in
//     the order the mutations were applied and AppliedAt never decreasing
//     with Seq (across repositories too), including requests whose
//     connection was dropped after the effect (FaultDropAfter). An effect
//     whose request is still in flight has no EndedAt (zero, and left out
//     of the admin API's JSON).
//   - Webhook deliveries are asynchronous — a REST handler never waits for
//     the receiver — and ordered per repository (per installation for
//     installation events).
//   - Time (token expiry, rate-limit windows, timestamps) comes from
//     Config.Now. App JWTs are checked against Config.JWTNow, the wall
//     clock by default, as the clients that sign them use theirs (set it
//     off the wall clock to simulate a GitHub whose clock differs).
//
// # Use
//
//	sim, err := ghsim.New(ghsim.Config{})      // listens on 127.0.0.1:0
//	err = sim.Start(ctx)
//	defer sim.Close()
//	err = sim.SeedDemo()                        // installation 1, octo/demo
//	itr, _ := ghinstallation.New(http.DefaultTransport, sim.AppID(), 1, sim.PrivateKeyPEM())
//	itr.BaseURL = sim.URL()
//	client, _ := github.NewClient(&http.Client{Transport: itr}).WithEnterpriseURLs(sim.URL(), sim.URL())
//
// Tests shape "GitHub" through the Go API (AddRepo, AddPull, AddIssue,
// AddLabel, AddComment, PushPull, ClosePull, SetPullBase, SetRef, RenameBranch,
// AddCommit, SetStatus, AddCheckRun, CompleteCheckRun, SetRequiredChecks,
// SetPermission, DeleteIssue, ArchiveRepo, RenameRepo, SuspendInstallation,
// DeleteInstallation, …) and inspect it (Pull, Issue, Ref, Effects,
// Deliveries). Scripts use the same operations over the admin
// API under /_ghsim/, which has no authentication: the simulator listens on
// loopback addresses only and answers admin requests from loopback only.
// Actions taken through the Go or admin API are those of people (the
// sender is "monalisa" unless named) and emit the webhooks GitHub would;
// REST mutations are the App's and emit theirs too.
//
// # Admin API
//
// JSON in and out; errors are {"error": "..."} with 404 (no such thing),
// 409 (exists already) or 422 (invalid). Each route has a Go method of the
// same effect.
//
//	GET    /_ghsim/app                                   URL, App ID, webhook URL and secret
//	POST   /_ghsim/seed                                  SeedDemo
//	GET    /_ghsim/installations                         Installations
//	POST   /_ghsim/installations {id, account}           AddInstallation
//	DELETE /_ghsim/installations/{id}                    DeleteInstallation
//	POST   /_ghsim/installations/{id}/suspend|unsuspend  SuspendInstallation
//	GET    /_ghsim/repos                                 Repos
//	POST   /_ghsim/repos {owner, name, installationId}   AddRepo: 201; 200 if it moved the repository from another installation or put back one removed with RemoveRepo; 409 if it is in that one already
//	DELETE /_ghsim/repos/{owner}/{name}                  RemoveRepo
//	POST   /_ghsim/repos/{o}/{r}/issues {number?, title, body?, user?}          AddIssue
//	GET    /_ghsim/repos/{o}/{r}/issues/{n}                                     Issue
//	POST   /_ghsim/repos/{o}/{r}/pulls {number?, headSha?, head?, base?, mergeable?, title?, user?}  AddPull
//	GET    /_ghsim/repos/{o}/{r}/pulls/{n}                                      Pull
//	PATCH  /_ghsim/repos/{o}/{r}/pulls/{n} {mergeable?, state?, user?}          SetMergeable, ClosePull
//	POST   /_ghsim/repos/{o}/{r}/pulls/{n}/push {sha?, user?}                   PushPull
//	POST   /_ghsim/repos/{o}/{r}/issues/{n}/labels {labels, user?}              AddLabel
//	DELETE /_ghsim/repos/{o}/{r}/issues/{n}/labels/{label}?user=                RemoveLabel
//	POST   /_ghsim/repos/{o}/{r}/issues/{n}/comments {body, user?}              AddComment
//	POST   /_ghsim/repos/{o}/{r}/commits {sha?, parents, message?}              AddCommit
//	GET    /_ghsim/repos/{o}/{r}/commits/{sha}                                  GetCommit
//	GET    /_ghsim/repos/{o}/{r}/refs[/{ref...}]                                Refs, Ref
//	PUT    /_ghsim/repos/{o}/{r}/refs/{ref...} {sha, user?}                     SetRef
//	POST   /_ghsim/repos/{o}/{r}/statuses/{sha} {state, context?, description?, targetUrl?, user?}  SetStatus
//	GET    /_ghsim/repos/{o}/{r}/statuses/{sha}                                 Statuses
//	POST   /_ghsim/repos/{o}/{r}/check-runs {name, headSha, status?, conclusion?}  AddCheckRun
//	POST   /_ghsim/repos/{o}/{r}/check-runs/{id}/complete {conclusion}          CompleteCheckRun
//	GET    /_ghsim/repos/{o}/{r}/commits/{sha}/check-runs                       CheckRuns
//	PUT    /_ghsim/repos/{o}/{r}/branches/{b}/protection {contexts, strict?}    SetRequiredChecks
//	DELETE /_ghsim/repos/{o}/{r}/branches/{b}/protection                        SetRequiredChecks(nil)
//	PUT    /_ghsim/repos/{o}/{r}/collaborators/{user} {permission}              SetPermission
//	GET    /_ghsim/faults · POST /_ghsim/faults {route, kind, installationId?, status?, retryAfterSeconds?, latencyMs?, count?, probability?}
//	DELETE /_ghsim/faults[/{id}]                         ClearFaults, ClearFault
//	GET|PUT /_ghsim/limits {primaryLimit, primaryWindowSeconds, primaryStatus, secondaryLimit, secondaryWindowSeconds, secondaryRetryAfter: "off"|"auto"|seconds}
//	                                                     SetLimits: omitted fields take their defaults; primaryLimit -1 is unlimited, 0 is refused (422)
//	POST   /_ghsim/limits/reset                          ResetRateLimits
//	GET    /_ghsim/effects?since=SEQ                     EffectsSince
//	GET|PUT /_ghsim/webhook {url, secret}                SetWebhook
//	PUT|DELETE /_ghsim/webhook/fault {statusCode?, count?}  SetWebhookFault, ClearWebhookFault
//	GET    /_ghsim/deliveries                            Deliveries
//	POST   /_ghsim/deliveries/{id}/redeliver             Redeliver
//
// # Rate limits
//
// Each installation has a primary budget (Limits.PrimaryLimit requests per
// PrimaryWindow, 5000 an hour by default; the App's JWT requests have their
// own); past it requests get 403 (or 429) with x-ratelimit-remaining 0 and
// "API rate limit exceeded for installation ID …". The secondary limit,
// off unless Limits.SecondaryLimit is set, counts content-creating requests
// (comments, labels, statuses, merges, branch updates, ref writes) of each
// installation in a sliding SecondaryWindow (a minute by default) and
// refuses the one over the limit with 403 and GitHub's "You have exceeded
// a secondary rate limit" message, with or without Retry-After
// (SecondaryRetryAfter). SetLimits changes them at run time.
//
// # Faults
//
// SetFault (or POST /_ghsim/faults) injects faults into the REST requests
// matching a route pattern, "METHOD /path" with {name} matching one path
// segment and a final {name...} the rest ("PUT
// /repos/{owner}/{repo}/pulls/{number}/merge"): a 5xx, a 429 with
// Retry-After, added latency, a connection dropped before the request is
// applied, one dropped after it was applied and logged, or a merge refused
// with 405 "Base branch was modified" (FaultBaseModified, not applied, as
// GitHub answers a merge that comes just after its base moved) or with 405
// "Merge already in progress" (FaultMergeInProgress, not applied, as GitHub
// answers a merge while an earlier one is being carried out), or any request
// refused with 401 "Bad credentials" (FaultUnauthorized, not applied). A fault fires on
// the next Count matching requests, or on a random fraction (Probability,
// seeded by Config.Seed), or always until cleared. Note that Go's HTTP
// client itself retries idempotent requests (GET, HEAD) whose reused
// connection was dropped; drop faults are meant for mutations.
//
// # Webhooks
//
// Config.WebhookURL and WebhookSecret (or SetWebhook, PUT /_ghsim/webhook)
// set the App's webhook. Deliveries carry X-GitHub-Event, X-GitHub-Delivery,
// X-GitHub-Hook-ID, X-GitHub-Hook-Installation-Target-ID/-Type,
// X-Hub-Signature-256 (SignPayload) and a GitHub-Hookshot User-Agent, and
// are kept in a deliveries log like GitHub's (GET /app/hook/deliveries with
// the App JWT, cursor-paginated; POST …/{id}/attempts redelivers with the
// same GUID and redelivery true; the log keeps the newest
// Config.MaxDeliveries attempts). SetWebhookFault makes deliveries fail
// (logged with status 502, not sent) so that recovery loops can be tested;
// WaitDeliveries waits until every queued delivery was attempted. As on
// GitHub, a suspended installation's App gets no events of its
// repositories (only the installation's own suspend and unsuspend).
//
// # Manifest flow
//
// POST /settings/apps/new (or /organizations/{org}/settings/apps/new) with
// a manifest form field creates an App at once (GitHub would ask the person
// to confirm) and redirects to the manifest's redirect_url with code and
// state; POST /app-manifests/{code}/conversions returns its ID, slug,
// client ID and secret, webhook secret and private key (PEM). The new App
// becomes the simulator's primary App: the installations move to it and
// its webhook is the manifest's hook_attributes.url. The previous App's
// JWTs are still accepted.
package ghsim
