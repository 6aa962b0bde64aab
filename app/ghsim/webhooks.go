package ghsim

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"
)

// SetWebhook sets the primary App's webhook: the URL deliveries go to (empty
// turns delivery off) and the secret that signs them (empty keeps the
// current one).
func (s *Sim) SetWebhook(url, secret string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.apps[s.primaryApp]
	a.webhookURL = url
	if secret != "" {
		a.webhookSecret = secret
	}
}

// WebhookSecret is the primary App's webhook secret.
func (s *Sim) WebhookSecret() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.apps[s.primaryApp].webhookSecret
}

// WebhookURL is the primary App's webhook URL ("" when none).
func (s *Sim) WebhookURL() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.apps[s.primaryApp].webhookURL
}

// WebhookFault makes deliveries fail as if the receiver were down: the
// delivery is not sent, and is logged with StatusCode (default 502).
type WebhookFault struct {
	StatusCode int `json:"statusCode,omitempty"`
	// Count limits the fault to the next Count deliveries; 0 means every
	// delivery until ClearWebhookFault.
	Count int `json:"count,omitempty"`
}

// SetWebhookFault makes the next deliveries fail.
func (s *Sim) SetWebhookFault(f WebhookFault) {
	if f.StatusCode == 0 {
		f.StatusCode = http.StatusBadGateway
	}
	s.hooks.mu.Lock()
	defer s.hooks.mu.Unlock()
	s.hooks.fault = &f
}

// ClearWebhookFault lets deliveries through again.
func (s *Sim) ClearWebhookFault() {
	s.hooks.mu.Lock()
	defer s.hooks.mu.Unlock()
	s.hooks.fault = nil
}

// SignPayload is what X-Hub-Signature-256 carries for body under secret.
func SignPayload(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// emitRepoLocked queues a delivery of event (with action, "" for events
// without one) about repository r, when r's installation's App has a
// webhook and subscribes to event, and the installation is not suspended. The caller holds r.mu: deliveries of one
// repository are queued, and sent, in the order of its history.
//
// fields (nil for none) renders the event's own fields; it is called only
// when there is a delivery to make, so that a simulator without a webhook
// (baton's benchmarks) does not render payloads nobody receives.
func (s *Sim) emitRepoLocked(r *repo, event, action string, sender *user, fields func() map[string]any) {
	s.mu.RLock()
	inst := s.installations[r.installationID]
	var a *app
	if inst != nil {
		a = s.apps[inst.appID]
	}
	// A suspended installation's App gets no events of its repositories:
	// GitHub blocks its webhooks for the account as well as its access.
	subscribed := a != nil && a.webhookURL != "" && slices.Contains(inst.events, event) && !inst.suspended()
	s.mu.RUnlock()
	if !subscribed {
		return
	}
	payload := map[string]any{
		"repository":   r.repr(),
		"sender":       sender.json,
		"installation": map[string]any{"id": inst.id, "node_id": nodeID("MDIz", inst.id)},
	}
	if owner := r.owner; owner.typ == "Organization" {
		payload["organization"] = s.renderOrganization(owner)
	}
	if action != "" {
		payload["action"] = action
	}
	if fields != nil {
		maps.Copy(payload, fields())
	}
	s.hooks.emit(a.id, "repo:"+strconv.FormatInt(r.id, 10), event, action, inst.id, r.id, payload)
}

func (s *Sim) renderOrganization(u *user) map[string]any {
	api := s.url + "/orgs/" + u.login
	return map[string]any{
		"login": u.login, "id": u.id, "node_id": nodeID("O_", u.id), "url": api,
		"repos_url": api + "/repos", "events_url": api + "/events", "hooks_url": api + "/hooks",
		"issues_url": api + "/issues", "members_url": api + "/members{/member}",
		"public_members_url": api + "/public_members{/member}", "avatar_url": s.url + "/avatars/u/" + strconv.FormatInt(u.id, 10),
		"description": nil,
	}
}

// emitPullLocked emits pull_request with action; extra (nil for none)
// renders fields of the action's own.
func (s *Sim) emitPullLocked(r *repo, is *issue, action string, who *user, extra func() map[string]any) {
	s.emitRepoLocked(r, "pull_request", action, who, func() map[string]any {
		pr := s.renderPull(r, is)
		pr["allow_auto_merge"] = false
		pr["allow_update_branch"] = true
		pr["delete_branch_on_merge"] = false
		pr["use_squash_pr_title_as_default"] = false
		fields := map[string]any{"number": is.number, "pull_request": pr}
		if extra != nil {
			maps.Copy(fields, extra())
		}
		return fields
	})
}

// emitIssueLocked emits issues with action; extra (nil for none) renders
// fields of the action's own.
func (s *Sim) emitIssueLocked(r *repo, is *issue, action string, who *user, extra func() map[string]any) {
	s.emitRepoLocked(r, "issues", action, who, func() map[string]any {
		fields := map[string]any{"issue": s.renderIssue(r, is)}
		if extra != nil {
			maps.Copy(fields, extra())
		}
		return fields
	})
}

// emitStatusLocked emits status (an event without action).
func (s *Sim) emitStatusLocked(r *repo, sha string, st *status) {
	s.emitRepoLocked(r, "status", "", st.creator, func() map[string]any {
		var branches []any
		for ref, v := range r.refs {
			if b, ok := cutHeads(ref); ok && v == sha {
				branches = append(branches, map[string]any{
					"name": b, "commit": map[string]any{"sha": sha, "url": s.url + "/repos/" + r.fullName + "/commits/" + sha}, "protected": r.protection[b] != nil,
				})
			}
		}
		if branches == nil {
			branches = []any{}
		}
		return map[string]any{
			"id": st.id, "sha": sha, "name": r.fullName, "target_url": nilIfEmpty(st.targetURL), "context": st.context,
			"description": nilIfEmpty(st.description), "state": st.state, "commit": s.renderCommitLocked(r, sha),
			"branches": branches, "created_at": formatTime(st.createdAt), "updated_at": formatTime(st.createdAt),
			"avatar_url": nil,
		}
	})
}

// renderCommitLocked is the REST "commit" shape a status event carries.
func (s *Sim) renderCommitLocked(r *repo, sha string) map[string]any {
	c := r.commits[sha]
	api := s.url + "/repos/" + r.fullName
	parents := []any{}
	message := ""
	at := s.now()
	if c != nil {
		message, at = c.message, c.at
		for _, p := range c.parents {
			parents = append(parents, map[string]any{"sha": p, "url": api + "/commits/" + p, "html_url": s.url + "/" + r.fullName + "/commit/" + p})
		}
	}
	gc := s.gitCommit(r, sha, message, at)
	gc["comment_count"] = 0
	return map[string]any{
		"sha": sha, "node_id": nodeID("C_", int64(len(sha))+r.id), "html_url": s.url + "/" + r.fullName + "/commit/" + sha,
		"url": api + "/commits/" + sha, "comments_url": api + "/commits/" + sha + "/comments",
		"commit": gc, "author": nil, "committer": nil, "parents": parents,
	}
}

// gitCommit is the git commit object of sha (author, committer,
// message, tree, verification), as a REST commit nests it and the git
// commits API answers it.
func (s *Sim) gitCommit(r *repo, sha, message string, at time.Time) map[string]any {
	api := s.url + "/repos/" + r.fullName
	person := map[string]any{"name": "Mona Lisa", "email": "monalisa@example.com", "date": formatTime(at)}
	tree := fakeSHA("tree", sha)
	return map[string]any{
		"author": person, "committer": person, "message": message,
		"tree":         map[string]any{"sha": tree, "url": api + "/git/trees/" + tree},
		"url":          api + "/git/commits/" + sha,
		"verification": map[string]any{"verified": false, "reason": "unsigned", "signature": nil, "payload": nil, "verified_at": nil},
	}
}

// emitPushLocked emits push for a ref update.
func (s *Sim) emitPushLocked(r *repo, ref, before, after string, existed bool, who *user) {
	if !existed {
		before = zeroSHA
	}
	s.emitRepoLocked(r, "push", "", who, func() map[string]any {
		forced := existed && after != zeroSHA && !r.isAncestor(before, after)
		var head any
		commits := []any{}
		if c := r.commits[after]; c != nil {
			hc := s.renderHeadCommit(r, c)
			pc := map[string]any{
				"id": c.sha, "tree_id": hc["tree_id"], "distinct": true, "message": c.message, "timestamp": hc["timestamp"],
				"url": s.url + "/" + r.fullName + "/commit/" + c.sha, "author": hc["author"], "committer": hc["committer"],
				"added": []any{}, "removed": []any{}, "modified": []any{},
			}
			head = pc
			commits = append(commits, pc)
		}
		return map[string]any{
			"ref": "refs/" + ref, "before": before, "after": after, "created": !existed, "deleted": after == zeroSHA,
			"forced": forced, "base_ref": nil, "compare": s.url + "/" + r.fullName + "/compare/" + before[:12] + "..." + after[:12],
			"commits": commits, "head_commit": head, "pusher": map[string]any{"name": who.login, "email": nil},
		}
	})
}

func cutHeads(ref string) (string, bool) {
	if len(ref) > 6 && ref[:6] == "heads/" {
		return ref[6:], true
	}
	return "", false
}

// emitInstallation emits installation with action.
func (s *Sim) emitInstallation(instID int64, action string) {
	sender := s.sender("")
	s.mu.RLock()
	inst := s.installations[instID]
	if inst == nil {
		s.mu.RUnlock()
		return
	}
	payload := s.installationPayloadLocked(inst, action, sender)
	appID := inst.appID
	s.mu.RUnlock()
	s.hooks.emit(appID, "installation:"+strconv.FormatInt(instID, 10), "installation", action, instID, 0, payload)
}

// installationPayloadLocked builds an installation event; the caller holds
// s.mu.
func (s *Sim) installationPayloadLocked(inst *installation, action string, sender *user) map[string]any {
	repos := []any{}
	for _, rid := range inst.repoIDs {
		repos = append(repos, s.reposByID[rid].minimal)
	}
	return map[string]any{
		"action": action, "installation": s.renderInstallationLocked(inst), "repositories": repos,
		"sender": sender.json, "requester": nil,
	}
}

// emitInstallationRepos emits installation_repositories with action
// ("added" or "removed") for repository r.
func (s *Sim) emitInstallationRepos(instID int64, action string, r *repo) {
	sender := s.sender("")
	s.mu.RLock()
	inst := s.installations[instID]
	if inst == nil {
		s.mu.RUnlock()
		return
	}
	added, removed := []any{}, []any{}
	if action == "added" {
		added = append(added, r.minimal)
	} else {
		removed = append(removed, r.minimal)
	}
	payload := map[string]any{
		"action": action, "installation": s.renderInstallationLocked(inst), "repository_selection": inst.repositorySelection,
		"repositories_added": added, "repositories_removed": removed, "requester": nil,
		"sender": sender.json,
	}
	appID := inst.appID
	s.mu.RUnlock()
	s.hooks.emit(appID, "installation:"+strconv.FormatInt(instID, 10), "installation_repositories", action, instID, 0, payload)
}

// dispatcher sends deliveries asynchronously: one queue per repository (or
// installation), drained by one goroutine at a time, so deliveries of one
// repository arrive in order and a slow receiver never blocks a REST
// handler.
type dispatcher struct {
	s      *Sim
	client *http.Client

	mu         sync.Mutex
	started    bool
	queues     map[string]*hookQueue
	pending    int
	idle       chan struct{} // closed while pending == 0
	fault      *WebhookFault
	deliveries []*Delivery // by ID
}

type hookQueue struct {
	items   []*outgoing
	running bool
}

// outgoing is a delivery waiting to be sent.
type outgoing struct {
	id         int64
	guid       string
	appID      int64
	key        string
	event      string
	action     string
	instID     int64
	repoID     int64
	body       []byte
	redelivery bool
}

func (d *dispatcher) init(s *Sim) {
	d.s = s
	d.client = &http.Client{Timeout: s.cfg.WebhookTimeout, Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	d.queues = map[string]*hookQueue{}
	d.idle = make(chan struct{})
	close(d.idle)
}

func (d *dispatcher) start() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.started = true
	for key, q := range d.queues {
		if len(q.items) > 0 && !q.running {
			d.runLocked(key, q)
		}
	}
}

func (d *dispatcher) closeIdle() {
	d.client.Transport.(*http.Transport).CloseIdleConnections()
}

// emit queues a new delivery.
func (d *dispatcher) emit(appID int64, key, event, action string, instID, repoID int64, payload map[string]any) {
	d.s.mu.RLock()
	a := d.s.apps[appID]
	active := a != nil && a.webhookURL != ""
	d.s.mu.RUnlock()
	if !active {
		return
	}
	body, err := encodeJSON(payload)
	if err != nil {
		return
	}
	d.enqueue(&outgoing{id: d.s.newID(), guid: newGUID(), appID: appID, key: key, event: event, action: action, instID: instID, repoID: repoID, body: body})
}

func (d *dispatcher) enqueue(o *outgoing) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.s.ctx.Err() != nil {
		return
	}
	q := d.queues[o.key]
	if q == nil {
		q = &hookQueue{}
		d.queues[o.key] = q
	}
	q.items = append(q.items, o)
	if d.pending == 0 {
		d.idle = make(chan struct{})
	}
	d.pending++
	if d.started && !q.running {
		d.runLocked(o.key, q)
	}
}

func (d *dispatcher) runLocked(key string, q *hookQueue) {
	q.running = true
	d.s.wg.Add(1)
	go func() {
		defer d.s.wg.Done()
		d.drain(key, q)
	}()
}

func (d *dispatcher) drain(key string, q *hookQueue) {
	for {
		d.mu.Lock()
		if len(q.items) == 0 || d.s.ctx.Err() != nil {
			if n := len(q.items); n > 0 {
				d.pending -= n
				if d.pending == 0 {
					close(d.idle)
				}
			}
			q.items = nil
			q.running = false
			delete(d.queues, key)
			d.mu.Unlock()
			return
		}
		o := q.items[0]
		q.items = q.items[1:]
		d.mu.Unlock()

		rec := d.send(o)

		d.mu.Lock()
		if rec != nil {
			i, _ := slices.BinarySearchFunc(d.deliveries, rec.ID, func(e *Delivery, id int64) int { return int(e.ID - id) })
			d.deliveries = slices.Insert(d.deliveries, i, rec)
			if keep := d.s.cfg.MaxDeliveries; keep > 0 && len(d.deliveries) > keep {
				d.deliveries = slices.Delete(d.deliveries, 0, len(d.deliveries)-keep) // the oldest
			}
		}
		d.pending--
		if d.pending == 0 {
			close(d.idle)
		}
		d.mu.Unlock()
	}
}

// send makes one delivery attempt and returns its record (nil when the
// simulator is stopping).
func (d *dispatcher) send(o *outgoing) *Delivery {
	s := d.s
	s.mu.RLock()
	a := s.apps[o.appID]
	var url, secret string
	var hookID int64
	if a != nil {
		url, secret, hookID = a.webhookURL, a.webhookSecret, a.hookID
	}
	s.mu.RUnlock()
	if url == "" {
		return nil
	}
	header := http.Header{}
	header.Set("Content-Type", "application/json")
	header.Set("User-Agent", "GitHub-Hookshot/ghsim")
	header.Set("X-GitHub-Event", o.event)
	header.Set("X-GitHub-Delivery", o.guid)
	header.Set("X-GitHub-Hook-ID", strconv.FormatInt(hookID, 10))
	header.Set("X-GitHub-Hook-Installation-Target-ID", strconv.FormatInt(o.appID, 10))
	header.Set("X-GitHub-Hook-Installation-Target-Type", "integration")
	header.Set("X-Hub-Signature-256", SignPayload(secret, o.body))
	m := hmac.New(sha1.New, []byte(secret))
	m.Write(o.body)
	header.Set("X-Hub-Signature", "sha1="+hex.EncodeToString(m.Sum(nil)))

	rec := &Delivery{
		ID: o.id, GUID: o.guid, DeliveredAt: s.now(), Redelivery: o.redelivery, Event: o.event, Action: o.action,
		InstallationID: o.instID, RepositoryID: o.repoID, AppID: o.appID, URL: url,
		RequestHeaders: flatten(header), Payload: o.body, ResponseHeaders: map[string]string{},
	}
	start := time.Now()
	defer func() { rec.Duration = time.Since(start).Seconds() }()

	d.mu.Lock()
	f := d.fault
	if f != nil {
		if f.Count > 0 {
			f.Count--
			if f.Count == 0 {
				d.fault = nil
			}
		}
	}
	d.mu.Unlock()
	if f != nil {
		rec.StatusCode = f.StatusCode
		rec.Status = "Invalid HTTP Response: " + strconv.Itoa(f.StatusCode)
		return rec
	}

	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.WebhookTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(o.body))
	if err != nil {
		rec.Status = "We couldn't deliver this payload: invalid URL"
		return rec
	}
	req.Header = header
	resp, err := d.client.Do(req)
	if err != nil {
		if s.ctx.Err() != nil {
			return nil
		}
		rec.Status = "We couldn't deliver this payload: " + deliveryFailure(err)
		return rec
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	rec.StatusCode = resp.StatusCode
	rec.ResponseHeaders = flatten(resp.Header)
	rec.ResponseBody = string(body)
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		rec.Status = "OK"
	} else {
		rec.Status = "Invalid HTTP Response: " + strconv.Itoa(resp.StatusCode)
	}
	return rec
}

func deliveryFailure(err error) string {
	if ue, ok := err.(interface{ Timeout() bool }); ok && ue.Timeout() {
		return "timed out"
	}
	return "failed to connect to host"
}

func flatten(h http.Header) map[string]string {
	out := make(map[string]string, len(h))
	for k, v := range h {
		if len(v) > 0 {
			out[k] = v[0]
		}
	}
	return out
}

// WaitDeliveries waits until every queued delivery has been attempted, or
// ctx ends.
func (s *Sim) WaitDeliveries(ctx context.Context) error {
	s.hooks.mu.Lock()
	idle := s.hooks.idle
	s.hooks.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
