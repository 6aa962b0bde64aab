package ghsim

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// issue is an issue or, when pr is set, a pull request: they share one
// number space per repository, and labels and comments work on both.
type issue struct {
	number    int
	id        int64
	title     string
	body      string
	user      *user
	state     string // "open" or "closed"
	createdAt time.Time
	updatedAt time.Time
	closedAt  time.Time
	labels    []*label
	comments  []*comment
	pr        *pull
	// deleted is set by DeleteIssue: GitHub answers 410 Gone for the
	// issue and everything under it.
	deleted bool
}

type label struct {
	id          int64
	name        string
	color       string
	description string
}

type comment struct {
	id        int64
	body      string
	user      *user
	app       *app // the App that posted it, if any
	createdAt time.Time
}

// Issue describes an issue (or the issue side of a pull request).
type Issue struct {
	Number   int           `json:"number"`
	Title    string        `json:"title"`
	State    string        `json:"state"`
	IsPull   bool          `json:"isPull"`
	Labels   []string      `json:"labels"`
	Comments []CommentInfo `json:"comments"`
}

// CommentInfo describes a comment.
type CommentInfo struct {
	ID     int64  `json:"id"`
	User   string `json:"user"`
	Body   string `json:"body"`
	ByApp  bool   `json:"byApp"`
	Posted string `json:"createdAt"`
}

// NewIssue is an issue to create with AddIssue.
type NewIssue struct {
	// Number is the issue's number; 0 takes the next free one.
	Number int    `json:"number,omitempty"`
	Title  string `json:"title"`
	Body   string `json:"body,omitempty"`
	// User is the author (default "monalisa").
	User string `json:"user,omitempty"`
}

func (r *repo) sortedNumbers() []int {
	ns := make([]int, 0, len(r.issues))
	for n := range r.issues {
		ns = append(ns, n)
	}
	sort.Ints(ns)
	return ns
}

// claimNumberLocked returns the number for a new issue or pull request.
func (r *repo) claimNumberLocked(n int) (int, error) {
	if n < 0 {
		return 0, fmt.Errorf("ghsim: number %d: %w", n, ErrInvalid)
	}
	if n == 0 {
		for r.issues[r.nextNumber] != nil {
			r.nextNumber++
		}
		n = r.nextNumber
	}
	if r.issues[n] != nil {
		return 0, fmt.Errorf("ghsim: %s#%d: %w", r.fullName, n, ErrExists)
	}
	if n >= r.nextNumber {
		r.nextNumber = n + 1
	}
	return n, nil
}

// AddIssue opens an issue in owner/repo and returns its number. It emits
// issues "opened".
func (s *Sim) AddIssue(owner, name string, in NewIssue) (int, error) {
	r, err := s.lookupRepo(owner, name)
	if err != nil {
		return 0, err
	}
	who := s.sender(in.User)
	r.mu.Lock()
	defer r.mu.Unlock()
	n, err := r.claimNumberLocked(in.Number)
	if err != nil {
		return 0, err
	}
	now := s.now()
	is := &issue{number: n, id: s.newID(), title: cmp.Or(in.Title, "Issue "+strconv.Itoa(n)), body: in.Body, user: who, state: "open", createdAt: now, updatedAt: now}
	r.issues[n] = is
	s.emitIssueLocked(r, is, "opened", who, nil)
	return n, nil
}

// DeleteIssue deletes issue n of owner/repo as a repository admin would
// (pull requests cannot be deleted), emitting issues "deleted". Afterwards
// GitHub answers 410 Gone ("This issue was deleted") to reading it, its
// comments or labels, and to commenting or labelling it.
func (s *Sim) DeleteIssue(owner, name string, n int, sender string) error {
	r, who, err := s.lockRepo(owner, name, sender)
	if err != nil {
		return err
	}
	defer r.mu.Unlock()
	is, ok := r.issues[n]
	switch {
	case !ok || is.deleted:
		return fmt.Errorf("ghsim: %s#%d: %w", r.fullName, n, ErrNotFound)
	case is.pr != nil:
		return fmt.Errorf("ghsim: %s#%d is a pull request, which cannot be deleted: %w", r.fullName, n, ErrInvalid)
	}
	is.deleted = true
	s.emitIssueLocked(r, is, "deleted", who, nil)
	return nil
}

// Issue returns the state of issue (or pull request) n of owner/repo.
func (s *Sim) Issue(owner, name string, n int) (Issue, error) {
	r, err := s.lookupRepo(owner, name)
	if err != nil {
		return Issue{}, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	is, ok := r.issues[n]
	if !ok {
		return Issue{}, fmt.Errorf("ghsim: %s#%d: %w", r.fullName, n, ErrNotFound)
	}
	return is.describe(), nil
}

func (is *issue) describe() Issue {
	d := Issue{Number: is.number, Title: is.title, State: is.state, IsPull: is.pr != nil, Labels: is.labelNames(), Comments: []CommentInfo{}}
	for _, cm := range is.comments {
		d.Comments = append(d.Comments, CommentInfo{ID: cm.id, User: cm.user.login, Body: cm.body, ByApp: cm.app != nil, Posted: formatTime(cm.createdAt)})
	}
	return d
}

func (is *issue) labelNames() []string {
	out := make([]string, 0, len(is.labels))
	for _, l := range is.labels {
		out = append(out, l.name)
	}
	return out
}

// AddLabel adds label to issue or pull request n as a person (sender,
// default "monalisa") would, emitting issues or pull_request "labeled".
// Adding a label already there does nothing.
func (s *Sim) AddLabel(owner, name string, n int, labelName, sender string) error {
	r, who, err := s.lockRepo(owner, name, sender)
	if err != nil {
		return err
	}
	defer r.mu.Unlock()
	is, ok := r.issues[n]
	if !ok {
		return fmt.Errorf("ghsim: %s#%d: %w", r.fullName, n, ErrNotFound)
	}
	if strings.TrimSpace(labelName) == "" {
		return fmt.Errorf("ghsim: empty label: %w", ErrInvalid)
	}
	s.addLabelsLocked(r, is, []string{labelName}, who)
	return nil
}

// RemoveLabel removes label from issue or pull request n as a person
// would, emitting "unlabeled". A label that is not there is ErrNotFound.
func (s *Sim) RemoveLabel(owner, name string, n int, labelName, sender string) error {
	r, who, err := s.lockRepo(owner, name, sender)
	if err != nil {
		return err
	}
	defer r.mu.Unlock()
	is, ok := r.issues[n]
	if !ok {
		return fmt.Errorf("ghsim: %s#%d: %w", r.fullName, n, ErrNotFound)
	}
	if !s.removeLabelLocked(r, is, labelName, who, false) {
		return fmt.Errorf("ghsim: label %q on %s#%d: %w", labelName, r.fullName, n, ErrNotFound)
	}
	return nil
}

// AddComment posts a comment on issue or pull request n as a person
// (sender, default "monalisa"), emitting issue_comment "created". It
// returns the comment's ID.
func (s *Sim) AddComment(owner, name string, n int, body, sender string) (int64, error) {
	r, who, err := s.lockRepo(owner, name, sender)
	if err != nil {
		return 0, err
	}
	defer r.mu.Unlock()
	is, ok := r.issues[n]
	if !ok {
		return 0, fmt.Errorf("ghsim: %s#%d: %w", r.fullName, n, ErrNotFound)
	}
	if body == "" {
		return 0, fmt.Errorf("ghsim: empty comment: %w", ErrInvalid)
	}
	cm, _ := s.addCommentLocked(r, is, body, who, nil)
	return cm.id, nil
}

// addCommentLocked posts a comment and returns it with its REST
// representation, rendered once for its issue_comment event and the REST
// answer alike (the event's payload is encoded before the call returns).
func (s *Sim) addCommentLocked(r *repo, is *issue, body string, who *user, by *app) (*comment, map[string]any) {
	now := s.now()
	cm := &comment{id: s.newID(), body: body, user: who, app: by, createdAt: now}
	is.comments = append(is.comments, cm)
	is.updatedAt = now
	rendered := s.renderComment(r, is, cm)
	s.emitRepoLocked(r, "issue_comment", "created", who, func() map[string]any {
		return map[string]any{"issue": s.renderIssue(r, is), "comment": rendered}
	})
	return cm, rendered
}

// addLabelsLocked adds labels (creating them in the repository if new) and
// emits "labeled" for each label that was not there.
func (s *Sim) addLabelsLocked(r *repo, is *issue, names []string, who *user) {
	for _, nm := range names {
		nm = strings.TrimSpace(nm)
		if nm == "" || slices.ContainsFunc(is.labels, func(l *label) bool { return strings.EqualFold(l.name, nm) }) {
			continue
		}
		l := r.labels[strings.ToLower(nm)]
		if l == nil {
			l = &label{id: s.newID(), name: nm, color: "ededed"}
			r.labels[strings.ToLower(nm)] = l
		}
		is.labels = append(is.labels, l)
		is.updatedAt = s.now()
		extra := func() map[string]any { return map[string]any{"label": s.renderLabel(r, l)} }
		if is.pr != nil {
			s.emitPullLocked(r, is, "labeled", who, extra)
		} else {
			s.emitIssueLocked(r, is, "labeled", who, extra)
		}
	}
}

// removeLabelLocked removes a label and emits "unlabeled"; it reports
// whether the label was there. With exact, the name must match in case
// too, as GitHub's REST removal requires.
func (s *Sim) removeLabelLocked(r *repo, is *issue, nm string, who *user, exact bool) bool {
	i := slices.IndexFunc(is.labels, func(l *label) bool { return l.name == nm || (!exact && strings.EqualFold(l.name, nm)) })
	if i < 0 {
		return false
	}
	l := is.labels[i]
	is.labels = slices.Delete(is.labels, i, i+1)
	is.updatedAt = s.now()
	extra := func() map[string]any { return map[string]any{"label": s.renderLabel(r, l)} }
	if is.pr != nil {
		s.emitPullLocked(r, is, "unlabeled", who, extra)
	} else {
		s.emitIssueLocked(r, is, "unlabeled", who, extra)
	}
	return true
}

func (s *Sim) issueRoutes() []*route {
	read := []string{"issues:read", "pull_requests:read"}
	write := []string{"issues:write", "pull_requests:write"}
	return []*route{
		{method: "GET", pattern: "/repos/{owner}/{repo}/issues/{number}", auth: authInstallation, perms: read, handle: s.getIssue},
		{method: "GET", pattern: "/repos/{owner}/{repo}/issues/{number}/comments", auth: authInstallation, perms: read, handle: s.listComments},
		{method: "POST", pattern: "/repos/{owner}/{repo}/issues/{number}/comments", auth: authInstallation, creates: true, perms: write, handle: s.createComment},
		{method: "GET", pattern: "/repos/{owner}/{repo}/issues/{number}/labels", auth: authInstallation, perms: read, handle: s.listLabels},
		{method: "POST", pattern: "/repos/{owner}/{repo}/issues/{number}/labels", auth: authInstallation, creates: true, perms: write, handle: s.addLabels},
		{method: "DELETE", pattern: "/repos/{owner}/{repo}/issues/{number}/labels/{name...}", auth: authInstallation, creates: true, perms: write, handle: s.removeLabel},
	}
}

// issueOf finds the call's issue and locks the repository; the caller
// unlocks it.
func (c *call) issueOf() (*issue, bool) {
	n, ok := c.intParam("number")
	c.repo.mu.Lock()
	if !ok {
		return nil, false
	}
	is, ok := c.repo.issues[n]
	return is, ok
}

// missingIssue is the answer for an issue issueOf did not find (404) or
// found deleted (410, as GitHub answers for a deleted issue); stop is
// false when the issue is there.
func missingIssue(is *issue, ok bool) (resp response, stop bool) {
	switch {
	case !ok:
		return notFound(), true
	case is.deleted:
		return errResponse(http.StatusGone, "This issue was deleted", docsRoot), true
	}
	return response{}, false
}

func (s *Sim) getIssue(c *call) response {
	is, ok := c.issueOf()
	defer c.repo.mu.Unlock()
	if resp, stop := missingIssue(is, ok); stop {
		return resp
	}
	return response{status: http.StatusOK, body: s.renderIssue(c.repo, is)}
}

func (s *Sim) listComments(c *call) response {
	is, ok := c.issueOf()
	defer c.repo.mu.Unlock()
	if resp, stop := missingIssue(is, ok); stop {
		return resp
	}
	all := is.comments
	if since := c.r.URL.Query().Get("since"); since != "" {
		t, err := time.Parse(time.RFC3339, since)
		if err != nil {
			return validationFailed("Issue", "since", "invalid", "")
		}
		all = slices.DeleteFunc(slices.Clone(all), func(cm *comment) bool { return cm.createdAt.Before(t) })
	}
	lo, hi, h := c.paginate(len(all))
	out := make([]any, 0, hi-lo)
	for _, cm := range all[lo:hi] {
		out = append(out, s.renderComment(c.repo, is, cm))
	}
	return response{status: http.StatusOK, header: h, body: out}
}

func (s *Sim) createComment(c *call) response {
	var req struct {
		Body string `json:"body"`
	}
	if resp, ok := c.decode("IssueComment", &req); !ok {
		return resp
	}
	if strings.TrimSpace(req.Body) == "" {
		return validationFailed("IssueComment", "body", "missing_field", "")
	}
	if len(req.Body) > 65536 {
		return validationFailed("IssueComment", "body", "custom", "Body is too long (maximum is 65536 characters)")
	}
	is, ok := c.issueOf()
	defer c.repo.mu.Unlock()
	if resp, stop := missingIssue(is, ok); stop {
		return resp
	}
	_, body := s.addCommentLocked(c.repo, is, req.Body, c.sender(), c.app)
	c.applied("issue:"+c.repo.fullName+"#"+strconv.Itoa(is.number), http.StatusCreated)
	return response{status: http.StatusCreated, body: body, header: http.Header{"Location": {body["url"].(string)}}}
}

func (s *Sim) listLabels(c *call) response {
	is, ok := c.issueOf()
	defer c.repo.mu.Unlock()
	if resp, stop := missingIssue(is, ok); stop {
		return resp
	}
	lo, hi, h := c.paginate(len(is.labels))
	out := make([]any, 0, hi-lo)
	for _, l := range is.labels[lo:hi] {
		out = append(out, s.renderLabel(c.repo, l))
	}
	return response{status: http.StatusOK, header: h, body: out}
}

// labelNames accepts the shapes GitHub takes for labels: ["a","b"],
// {"labels":["a"]}, and {"labels":[{"name":"a"}]}.
func labelNames(raw json.RawMessage) ([]string, bool) {
	var names []string
	if json.Unmarshal(raw, &names) == nil {
		return names, true
	}
	var obj struct {
		Labels json.RawMessage `json:"labels"`
	}
	if json.Unmarshal(raw, &obj) != nil || obj.Labels == nil {
		return nil, false
	}
	if json.Unmarshal(obj.Labels, &names) == nil {
		return names, true
	}
	var named []struct {
		Name string `json:"name"`
	}
	if json.Unmarshal(obj.Labels, &named) != nil {
		return nil, false
	}
	for _, l := range named {
		names = append(names, l.Name)
	}
	return names, true
}

func (s *Sim) addLabels(c *call) response {
	var raw json.RawMessage
	if resp, ok := c.decode("Label", &raw); !ok {
		return resp
	}
	names, ok := labelNames(raw)
	if !ok || len(names) == 0 {
		return validationFailed("Label", "labels", "missing_field", "")
	}
	for _, nm := range names {
		if strings.TrimSpace(nm) == "" || utf8.RuneCountInString(nm) > 50 { // characters, as GitHub counts
			return validationFailed("Label", "name", "invalid", "")
		}
	}
	is, ok := c.issueOf()
	defer c.repo.mu.Unlock()
	if resp, stop := missingIssue(is, ok); stop {
		return resp
	}
	s.addLabelsLocked(c.repo, is, names, c.sender())
	c.applied("issue:"+c.repo.fullName+"#"+strconv.Itoa(is.number), http.StatusOK)
	out := make([]any, 0, len(is.labels))
	for _, l := range is.labels {
		out = append(out, s.renderLabel(c.repo, l))
	}
	return response{status: http.StatusOK, body: out}
}

func (s *Sim) removeLabel(c *call) response {
	nm := c.r.PathValue("name")
	is, ok := c.issueOf()
	defer c.repo.mu.Unlock()
	if resp, stop := missingIssue(is, ok); stop {
		return resp
	}
	// GitHub removes only a label named exactly so: another case is
	// "Label does not exist", although adding is case-insensitive.
	if !s.removeLabelLocked(c.repo, is, nm, c.sender(), true) {
		return errResponse(http.StatusNotFound, "Label does not exist", docsRoot)
	}
	c.applied("issue:"+c.repo.fullName+"#"+strconv.Itoa(is.number), http.StatusOK)
	out := make([]any, 0, len(is.labels))
	for _, l := range is.labels {
		out = append(out, s.renderLabel(c.repo, l))
	}
	return response{status: http.StatusOK, body: out}
}

func (s *Sim) renderLabel(r *repo, l *label) map[string]any {
	return map[string]any{
		"id": l.id, "node_id": nodeID("LA_", l.id), "url": s.url + "/repos/" + r.fullName + "/labels/" + url.PathEscape(l.name),
		"name": l.name, "description": nilIfEmpty(l.description), "color": l.color, "default": false,
	}
}

func (s *Sim) renderComment(r *repo, is *issue, cm *comment) map[string]any {
	api := s.url + "/repos/" + r.fullName
	var via any
	if cm.app != nil {
		via = cm.app.json
	}
	created := formatTime(cm.createdAt)
	id, num := strconv.FormatInt(cm.id, 10), strconv.Itoa(is.number)
	self := api + "/issues/comments/" + id
	return map[string]any{
		"id": cm.id, "node_id": nodeID("IC_", cm.id), "url": self,
		"html_url":  s.url + "/" + r.fullName + "/issues/" + num + "#issuecomment-" + id,
		"issue_url": api + "/issues/" + num, "body": cm.body, "user": cm.user.json,
		"created_at": created, "updated_at": created,
		"author_association": association(r, cm.user), "performed_via_github_app": via,
		"reactions": reactions(self + "/reactions"),
	}
}

// renderIssue is the REST "issue" representation.
func (s *Sim) renderIssue(r *repo, is *issue) map[string]any {
	api := s.url + "/repos/" + r.fullName
	self := api + "/issues/" + strconv.Itoa(is.number)
	html := s.url + "/" + r.fullName + "/issues/" + strconv.Itoa(is.number)
	labels := make([]any, 0, len(is.labels))
	for _, l := range is.labels {
		labels = append(labels, s.renderLabel(r, l))
	}
	var stateReason any
	if is.state == "closed" {
		stateReason = "completed"
	}
	m := map[string]any{
		"id": is.id, "node_id": nodeID("I_", is.id), "url": self, "repository_url": api,
		"labels_url": self + "/labels{/name}", "comments_url": self + "/comments", "events_url": self + "/events",
		"html_url": html, "number": is.number, "state": is.state, "state_reason": stateReason, "title": is.title,
		"body": nilIfEmpty(is.body), "user": is.user.json, "labels": labels, "assignee": nil, "assignees": []any{},
		"milestone": nil, "locked": false, "active_lock_reason": nil, "comments": len(is.comments),
		"closed_at": formatTimePtr(is.closedAt), "created_at": formatTime(is.createdAt), "updated_at": formatTime(is.updatedAt),
		"closed_by": nil, "author_association": association(r, is.user), "performed_via_github_app": nil,
		"reactions": reactions(self + "/reactions"), "timeline_url": self + "/timeline",
	}
	if p := is.pr; p != nil {
		phtml := s.url + "/" + r.fullName + "/pull/" + strconv.Itoa(is.number)
		m["html_url"] = phtml
		m["pull_request"] = map[string]any{
			"url": api + "/pulls/" + strconv.Itoa(is.number), "html_url": phtml,
			"diff_url": phtml + ".diff", "patch_url": phtml + ".patch", "merged_at": formatTimePtr(p.mergedAt),
		}
		m["draft"] = false
	}
	return m
}

func reactions(u string) map[string]any {
	return map[string]any{"url": u, "total_count": 0, "+1": 0, "-1": 0, "laugh": 0, "confused": 0, "heart": 0, "hooray": 0, "eyes": 0, "rocket": 0}
}

// association is the author_association of u in r.
func association(r *repo, u *user) string {
	switch {
	case u.typ == "Bot":
		return "NONE"
	case strings.EqualFold(u.login, r.owner.login):
		return "OWNER"
	case r.collaborators[strings.ToLower(u.login)] != "":
		return "COLLABORATOR"
	}
	return "NONE"
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}
