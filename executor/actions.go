package executor

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/google/go-github/v62/github"

	"github.com/baton-dev/baton/schema"
)

// action is one kind of GitHub mutation baton performs.
type action interface {
	// do makes the call and returns the result to record.
	do(ctx context.Context, c *github.Client, op *schema.Record, t schema.Target, payload any) (result any, resp *github.Response, err error)
	// probe checks the action's post-condition after an ambiguous failure:
	// done is true (with the result) when the effect is already in place,
	// so the operation succeeds without mutating again.
	probe(ctx context.Context, c *github.Client, op *schema.Record, t schema.Target, payload any) (done bool, result any, resp *github.Response, err error)
}

// probeless is implemented by the actions whose probe checks nothing
// (an ambiguous failure is simply retried).
type probeless interface{ noProbe() }

// hasProbe reports whether act can check its post-condition.
func hasProbe(act action) bool {
	_, none := act.(probeless)
	return act != nil && !none
}

// actions maps every registered action name to its implementation.
var actions = map[string]action{
	schema.ActionMerge:        mergeAction{},
	schema.ActionUpdateBranch: updateBranchAction{},
	schema.ActionComment:      commentAction{},
	schema.ActionAddLabels:    addLabelsAction{},
	schema.ActionRemoveLabel:  removeLabelAction{},
	schema.ActionUpdateRef:    updateRefAction{},
	schema.ActionCreateStatus: createStatusAction{},
}

// actionError is a failure an action decides itself (a compare-and-swap
// it checked on its own, for example); Classify returns its
// classification as is.
type actionError struct{ c Classification }

func (e *actionError) Error() string { return e.c.Message }

// unprocessable reports whether a failed call was refused with 422 and a
// message containing want (case-insensitive).
func unprocessable(resp *github.Response, err error, want string) bool {
	var ere *github.ErrorResponse
	return resp != nil && resp.StatusCode == http.StatusUnprocessableEntity && asErrorResponse(err, &ere) &&
		strings.Contains(strings.ToLower(ere.Message), want)
}

// mergeRefusedForNow reports whether a merge was refused with a 405 that
// a later attempt can get past, and how to take it:
//   - "Base branch was modified. Review and try the merge again.": the base
//     moved just before the merge, which GitHub did not apply;
//   - "Merge already in progress": GitHub is still carrying out an earlier
//     merge of the pull request, most likely ours after a timeout. That
//     merge may land: the refusal is ambiguous, so the pull request is
//     probed (merged at the sha?) before another attempt, and before the
//     operation is given up after its last attempt.
//
// Any other 405 ("Pull Request is not mergeable", a merge method the
// repository does not allow) is a refusal.
func mergeRefusedForNow(resp *github.Response, err error) (msg string, ambiguous, ok bool) {
	var ere *github.ErrorResponse
	if resp == nil || resp.StatusCode != http.StatusMethodNotAllowed || !asErrorResponse(err, &ere) {
		return "", false, false
	}
	switch m := strings.ToLower(ere.Message); {
	case strings.Contains(m, "base branch was modified"):
		return "base branch was modified; trying again", false, true
	case strings.Contains(m, "merge already in progress"):
		return "a merge of the pull request is already in progress; trying again", true, true
	}
	return "", false, false
}

// guardKey carries, in a call's context, the check an action runs
// immediately before its mutating request when it makes another request
// first (the lease's AssertOwned).
type guardKey struct{}

// guardError is the check's refusal: the mutating request was not made.
type guardError struct{ err error }

func (e *guardError) Error() string { return "not sent: " + e.err.Error() }
func (e *guardError) Unwrap() error { return e.err }

func withGuard(ctx context.Context, check func() error) context.Context {
	return context.WithValue(ctx, guardKey{}, check)
}

// saveKey carries, in a call's context, the save of the operation's
// record (fenced by the lease), for an action that must make something it
// learnt durable before its mutating request.
type saveKey struct{}

func withSave(ctx context.Context, save func() error) context.Context {
	return context.WithValue(ctx, saveKey{}, save)
}

// persist saves the record through the save ctx carries, if any. A failure
// is a guardError: the mutating request is not made.
func persist(ctx context.Context) error {
	if save, ok := ctx.Value(saveKey{}).(func() error); ok {
		if err := save(); err != nil {
			return &guardError{err}
		}
	}
	return nil
}

// appIdentity is who baton's GitHub App is: its slug, which names the bot
// account its comments are posted as.
type appIdentity struct {
	Slug string
}

// appKey carries, in a probe's context, how to learn the App's identity.
type appKey struct{}

func withApp(ctx context.Context, identity func(context.Context) (appIdentity, error)) context.Context {
	return context.WithValue(ctx, appKey{}, identity)
}

// clockKey carries, in a probe's context, how far GitHub's clock is
// ahead of this machine's (negative: behind), as baton has learnt it.
type clockKey struct{}

func withGitHubClock(ctx context.Context, skew func() time.Duration) context.Context {
	return context.WithValue(ctx, clockKey{}, skew)
}

// onGitHubClock returns t, a time of this machine's clock, on GitHub's
// clock (t itself when ctx carries no clock, or GitHub's agrees).
func onGitHubClock(ctx context.Context, t time.Time) time.Time {
	if skew, ok := ctx.Value(clockKey{}).(func() time.Duration); ok {
		return t.Add(skew())
	}
	return t
}

// madeByApp reports whether the App posted cm: its author is a bot
// account, the App's own ("<slug>[bot]"). Without an identity in ctx (an
// action called outside Process) any bot account passes.
func madeByApp(ctx context.Context, cm *github.IssueComment) (bool, error) {
	u := cm.GetUser()
	if u.GetType() != "Bot" {
		return false, nil
	}
	identity, ok := ctx.Value(appKey{}).(func(context.Context) (appIdentity, error))
	if !ok {
		return true, nil
	}
	id, err := identity(ctx)
	if err != nil {
		return false, err
	}
	return strings.EqualFold(u.GetLogin(), id.Slug+"[bot]"), nil
}

// guard runs the check ctx carries, if any.
func guard(ctx context.Context) error {
	if check, ok := ctx.Value(guardKey{}).(func() error); ok {
		if err := check(); err != nil {
			return &guardError{err}
		}
	}
	return nil
}

// --- github.pulls.merge ---

type mergeAction struct{}

type mergeResult struct {
	Merged  bool   `json:"merged"`
	SHA     string `json:"sha,omitempty"`
	HeadSHA string `json:"headSha"`
	Message string `json:"message,omitempty"`
	Probed  bool   `json:"probed,omitempty"`
}

func (mergeAction) do(ctx context.Context, c *github.Client, _ *schema.Record, t schema.Target, p any) (any, *github.Response, error) {
	pl := p.(*schema.MergePayload)
	opts := &github.PullRequestOptions{SHA: pl.SHA, MergeMethod: pl.Method, CommitTitle: pl.CommitTitle}
	r, resp, err := c.PullRequests.Merge(ctx, t.Owner, t.Repo, t.Number, pl.CommitMessage, opts)
	if err != nil {
		if msg, ambiguous, ok := mergeRefusedForNow(resp, err); ok {
			// GitHub refuses a merge when the base branch moved just before
			// (another merge landed) or while a merge is still being carried
			// out: this request was not applied, and trying again after the
			// usual wait works (after a probe, when a merge may be landing).
			return nil, resp, &actionError{Classification{Category: CategoryConflict, Retryable: true, Ambiguous: ambiguous,
				Status: resp.StatusCode, RequestID: requestID(resp.Response), Message: msg}}
		}
		return nil, resp, err
	}
	return mergeResult{Merged: r.GetMerged(), SHA: r.GetSHA(), HeadSHA: pl.SHA, Message: r.GetMessage()}, resp, nil
}

func (mergeAction) probe(ctx context.Context, c *github.Client, _ *schema.Record, t schema.Target, p any) (bool, any, *github.Response, error) {
	pl := p.(*schema.MergePayload)
	pr, resp, err := c.PullRequests.Get(ctx, t.Owner, t.Repo, t.Number)
	if err != nil {
		return false, nil, resp, err
	}
	if pr.GetMerged() && pr.GetHead().GetSHA() == pl.SHA {
		return true, mergeResult{Merged: true, SHA: pr.GetMergeCommitSHA(), HeadSHA: pl.SHA, Probed: true}, resp, nil
	}
	return false, nil, resp, nil
}

// --- github.pulls.update_branch ---

type updateBranchAction struct{}

type updateBranchResult struct {
	Accepted bool `json:"accepted"`
	// UpToDate is set when GitHub had nothing to do: the base has no
	// commits the head lacks (Accepted is then false).
	UpToDate bool   `json:"upToDate,omitempty"`
	Message  string `json:"message,omitempty"`
	HeadSHA  string `json:"headSha,omitempty"`
	Probed   bool   `json:"probed,omitempty"`
}

func (updateBranchAction) do(ctx context.Context, c *github.Client, _ *schema.Record, t schema.Target, p any) (any, *github.Response, error) {
	pl := p.(*schema.UpdateBranchPayload)
	sha := pl.ExpectedHeadSHA
	r, resp, err := c.PullRequests.UpdateBranch(ctx, t.Owner, t.Repo, t.Number, &github.PullRequestBranchUpdateOptions{ExpectedHeadSHA: &sha})
	var accepted *github.AcceptedError
	if asAccepted(err, &accepted) {
		// 202 is how GitHub answers a successful update-branch.
		var body struct {
			Message string `json:"message"`
		}
		_ = json.Unmarshal(accepted.Raw, &body)
		return updateBranchResult{Accepted: true, Message: body.Message}, resp, nil
	}
	if err != nil {
		if unprocessable(resp, err, "expected head sha") {
			// The head moved: expected_head_sha is the compare-and-swap.
			// (Other 422s — a closed pull request, a merge conflict — are
			// classified as any other.)
			return nil, resp, &actionError{Classification{Category: CategoryConflict, Status: resp.StatusCode,
				RequestID: resp.Header.Get("X-Github-Request-Id"), Message: "head is no longer expectedHeadSha"}}
		}
		if unprocessable(resp, err, "no new commits on the base branch") {
			// GitHub refuses to update a branch that already has every
			// commit of its base ("There are no new commits on the base
			// branch."): what was asked for is in place, as after an
			// earlier attempt that GitHub applied.
			var ere *github.ErrorResponse
			_ = asErrorResponse(err, &ere)
			return updateBranchResult{UpToDate: true, Message: ere.Message}, resp, nil
		}
		return nil, resp, err
	}
	return updateBranchResult{Accepted: true, Message: r.GetMessage()}, resp, nil
}

func (updateBranchAction) probe(ctx context.Context, c *github.Client, _ *schema.Record, t schema.Target, p any) (bool, any, *github.Response, error) {
	pl := p.(*schema.UpdateBranchPayload)
	pr, resp, err := c.PullRequests.Get(ctx, t.Owner, t.Repo, t.Number)
	if err != nil {
		return false, nil, resp, err
	}
	// The update replaces the head with a merge of the base into it: a
	// commit whose first parent is the expected head, and the second the
	// base's. Any other head is someone else's push (the branch was not
	// updated): the operation goes on, and re-sending fails the
	// compare-and-swap, a conflict. (A push on top of the update, within
	// the moments before the probe, is taken for one too.)
	h := pr.GetHead().GetSHA()
	if h == "" || h == pl.ExpectedHeadSHA {
		return false, nil, resp, nil
	}
	cm, resp, err := c.Git.GetCommit(ctx, t.Owner, t.Repo, h)
	if err != nil {
		return false, nil, resp, err
	}
	if ps := cm.Parents; len(ps) == 2 && ps[0].GetSHA() == pl.ExpectedHeadSHA {
		return true, updateBranchResult{Accepted: true, HeadSHA: h, Probed: true}, resp, nil
	}
	return false, nil, resp, nil
}

// --- github.issues.comment ---

type commentAction struct{}

type commentResult struct {
	CommentID int64  `json:"commentId"`
	URL       string `json:"url,omitempty"`
	Probed    bool   `json:"probed,omitempty"`
}

// CommentMarker is the hidden marker baton appends to the comments it
// posts, so that a retry after an ambiguous failure finds the comment
// instead of posting it twice.
func CommentMarker(operationID string) string {
	return "<!-- baton:operation=" + operationID + " -->"
}

func (commentAction) do(ctx context.Context, c *github.Client, op *schema.Record, t schema.Target, p any) (any, *github.Response, error) {
	pl := p.(*schema.CommentPayload)
	body := pl.Body + "\n\n" + CommentMarker(op.OperationID)
	cm, resp, err := c.Issues.CreateComment(ctx, t.Owner, t.Repo, t.Number, &github.IssueComment{Body: &body})
	if err != nil {
		return nil, resp, err
	}
	return commentResult{CommentID: cm.GetID(), URL: cm.GetHTMLURL()}, resp, nil
}

// endsWithMarker reports whether a comment's body ends with marker, as
// the body of the operation's comment does. A marker elsewhere in the body
// is not the operation's: a comment's body is anyone's text, and another
// operation's comment, which the App posts, may quote it (baton appends
// that operation's own marker after it).
func endsWithMarker(body, marker string) bool {
	return strings.HasSuffix(strings.TrimRight(body, " \t\r\n"), marker)
}

func (commentAction) probe(ctx context.Context, c *github.Client, op *schema.Record, t schema.Target, _ any) (bool, any, *github.Response, error) {
	marker := CommentMarker(op.OperationID)
	// Comments created before the operation cannot carry its marker.
	// GitHub dates its comments, and selects them by since, on its own
	// clock: the operation's creation is taken on it (baton runs on with
	// this machine's clock far from GitHub's, see jwtClockTransport), and
	// the margin covers what is left of the difference.
	since := onGitHubClock(ctx, op.CreatedAt).Add(-10 * time.Minute)
	opts := &github.IssueListCommentsOptions{Since: &since, ListOptions: github.ListOptions{PerPage: 100}}
	var last *github.Response
	for {
		cms, resp, err := c.Issues.ListComments(ctx, t.Owner, t.Repo, t.Number, opts)
		last = resp
		if err != nil {
			return false, nil, resp, err
		}
		for _, cm := range cms {
			// since selects by update time: a comment created before it
			// and edited since is listed too. It cannot be this
			// operation's, but it can carry its marker: the comment of an
			// operation of the same ID, made with the same key before
			// retention deleted its record.
			if !endsWithMarker(cm.GetBody(), marker) || cm.GetCreatedAt().Before(since) {
				continue
			}
			// Anyone who can comment can copy the marker: only the
			// App's own comment is the effect.
			mine, err := madeByApp(ctx, cm)
			if err != nil {
				return false, nil, nil, err
			}
			if mine {
				return true, commentResult{CommentID: cm.GetID(), URL: cm.GetHTMLURL(), Probed: true}, resp, nil
			}
		}
		if resp.NextPage == 0 {
			return false, nil, last, nil
		}
		opts.Page = resp.NextPage
	}
}

// --- github.issues.add_labels / remove_label ---

type addLabelsAction struct{}

type labelsResult struct {
	Labels []string `json:"labels"`
	Probed bool     `json:"probed,omitempty"`
}

func labelNames(ls []*github.Label) []string {
	out := make([]string, 0, len(ls))
	for _, l := range ls {
		out = append(out, l.GetName())
	}
	return out
}

func (addLabelsAction) do(ctx context.Context, c *github.Client, _ *schema.Record, t schema.Target, p any) (any, *github.Response, error) {
	pl := p.(*schema.AddLabelsPayload)
	ls, resp, err := c.Issues.AddLabelsToIssue(ctx, t.Owner, t.Repo, t.Number, pl.Labels)
	if err != nil {
		return nil, resp, err
	}
	return labelsResult{Labels: labelNames(ls)}, resp, nil
}

func (addLabelsAction) probe(ctx context.Context, c *github.Client, _ *schema.Record, t schema.Target, p any) (bool, any, *github.Response, error) {
	pl := p.(*schema.AddLabelsPayload)
	have, resp, err := issueLabels(ctx, c, t)
	if err != nil {
		return false, nil, resp, err
	}
	for _, want := range pl.Labels {
		if !containsFold(have, want) {
			return false, nil, resp, nil
		}
	}
	return true, labelsResult{Labels: have, Probed: true}, resp, nil
}

type removeLabelAction struct{}

func (removeLabelAction) do(ctx context.Context, c *github.Client, _ *schema.Record, t schema.Target, p any) (any, *github.Response, error) {
	pl := p.(*schema.RemoveLabelPayload)
	res, absent, resp, err := deleteLabel(ctx, c, t, pl.Label)
	if err != nil || !absent {
		return res, resp, err
	}
	// GitHub finds the label to remove by its exact name ("Stale" does
	// not remove "stale": 404 "Label does not exist"), although label
	// names are case-insensitive everywhere else (adding "Stale" puts
	// "stale" on). The label may be on the issue under another case: it
	// is removed by its own name.
	have, lresp, err := issueLabels(ctx, c, t)
	if err != nil {
		return nil, lresp, err
	}
	i := slices.IndexFunc(have, func(l string) bool { return strings.EqualFold(l, pl.Label) })
	if i < 0 {
		// Absent is the state asked for: removing is idempotent.
		return labelsResult{Labels: have}, resp, nil
	}
	if err := guard(ctx); err != nil {
		return nil, nil, err
	}
	res, absent, resp, err = deleteLabel(ctx, c, t, have[i])
	switch {
	case err == nil && absent && have[i] == pl.Label:
		// Not found by the very name GitHub lists: the label is still
		// there, whatever GitHub makes of its name in the path.
		return nil, resp, &actionError{Classification{Category: CategoryValidation, Status: resp.StatusCode,
			RequestID: requestID(resp.Response), Message: "GitHub lists the label on the issue but does not find it to remove"}}
	case err == nil && absent:
		// Removed by someone else in between.
		return labelsResult{Labels: slices.Delete(have, i, i+1)}, resp, nil
	}
	return res, resp, err
}

// deleteLabel removes the label named exactly name from the issue. absent
// is true when GitHub answered that the issue has no label of that name.
func deleteLabel(ctx context.Context, c *github.Client, t schema.Target, name string) (res any, absent bool, resp *github.Response, err error) {
	// Not Issues.RemoveLabelForIssue: go-github puts the name in the path
	// unescaped, so "?" or "#" would end the path and ".." parts would be
	// resolved (a label could name any other route of the repository).
	path, ok := labelPath(name)
	if !ok {
		// schema refuses such names, and Process decodes stored payloads
		// by today's rules too (a record stored before the rule fails
		// there); this guards the action itself, whoever calls it.
		return nil, false, nil, &actionError{Classification{Category: CategoryValidation,
			Message: `a label name cannot be "." or "..", nor have such a part between slashes`}}
	}
	u := fmt.Sprintf("repos/%s/%s/issues/%d/labels/%s", t.Owner, t.Repo, t.Number, path)
	req, err := c.NewRequest(http.MethodDelete, u, nil)
	if err != nil {
		return nil, false, nil, err
	}
	// GitHub answers the removal with the labels that remain on the
	// issue; they are recorded as they are (a list asked for afterwards
	// would cost a request and could lag behind the removal).
	var remaining []*github.Label
	resp, err = c.Do(ctx, req, &remaining)
	if err != nil {
		var ere *github.ErrorResponse
		if resp != nil && resp.StatusCode == http.StatusNotFound && asErrorResponse(err, &ere) &&
			strings.Contains(strings.ToLower(ere.Message), "label does not exist") {
			return nil, true, resp, nil
		}
		if resp != nil && resp.StatusCode == http.StatusOK {
			// The removal happened; only its answer could not be read,
			// and the label list is only informative.
			return labelsResult{Labels: nil}, false, resp, nil
		}
		return nil, false, resp, err
	}
	return labelsResult{Labels: labelNames(remaining)}, false, resp, nil
}

// labelPath escapes a label name for the URL path. Each part between
// slashes is escaped and the slashes are kept, as go-github does for ref
// names: GitHub takes a label's slash as is ("kind/bug") and does not find
// the label when it is sent as %2F. A part that is "." or ".." would be
// resolved as a relative path: ok is false for such a name.
func labelPath(label string) (path string, ok bool) {
	parts := strings.Split(label, "/")
	for i, part := range parts {
		if part == "." || part == ".." {
			return "", false
		}
		parts[i] = url.PathEscape(part)
	}
	return strings.Join(parts, "/"), true
}

func (removeLabelAction) probe(ctx context.Context, c *github.Client, _ *schema.Record, t schema.Target, p any) (bool, any, *github.Response, error) {
	pl := p.(*schema.RemoveLabelPayload)
	have, resp, err := issueLabels(ctx, c, t)
	if err != nil {
		return false, nil, resp, err
	}
	if containsFold(have, pl.Label) {
		return false, nil, resp, nil
	}
	return true, labelsResult{Labels: have, Probed: true}, resp, nil
}

func issueLabels(ctx context.Context, c *github.Client, t schema.Target) ([]string, *github.Response, error) {
	var (
		all  []string
		opts = &github.ListOptions{PerPage: 100}
	)
	for {
		ls, resp, err := c.Issues.ListLabelsByIssue(ctx, t.Owner, t.Repo, t.Number, opts)
		if err != nil {
			return nil, resp, err
		}
		all = append(all, labelNames(ls)...)
		if resp.NextPage == 0 {
			return all, resp, nil
		}
		opts.Page = resp.NextPage
	}
}

// containsFold: GitHub label names are case-insensitive.
func containsFold(list []string, s string) bool {
	for _, v := range list {
		if strings.EqualFold(v, s) {
			return true
		}
	}
	return false
}

// --- github.git.update_ref ---

type updateRefAction struct{}

type updateRefResult struct {
	Ref    string `json:"ref"`
	SHA    string `json:"sha"`
	Probed bool   `json:"probed,omitempty"`
}

func (updateRefAction) do(ctx context.Context, c *github.Client, op *schema.Record, t schema.Target, p any) (any, *github.Response, error) {
	pl := p.(*schema.UpdateRefPayload)
	switch {
	case pl.ExpectedSHA == "" && pl.Force:
		// A forced update moves the ref from wherever it is, so a retry
		// could undo a push made on top of an earlier attempt that was
		// applied unseen (the probe only sees that the ref is not at sha).
		// The first attempt records where the ref was before it (saved
		// before the update is sent); later ones use that as an implicit
		// expectedSha.
		ref, resp, err := c.Git.GetRef(ctx, t.Owner, t.Repo, t.Ref)
		if err != nil {
			return nil, resp, err
		}
		cur := ref.GetObject().GetSHA()
		if op.RefBeforeSHA == "" {
			op.RefBeforeSHA = cur
			if err := persist(ctx); err != nil {
				return nil, nil, err
			}
		} else if cur != op.RefBeforeSHA && cur != pl.SHA {
			return nil, resp, &actionError{Classification{Category: CategoryConflict, Status: resp.StatusCode,
				RequestID: resp.Header.Get("X-Github-Request-Id"),
				Message: fmt.Sprintf("ref moved from %s to %s since the first attempt; not forced over it (an earlier attempt may have been applied, then pushed on)",
					short(op.RefBeforeSHA), short(cur))}}
		}
		if err := guard(ctx); err != nil {
			return nil, nil, err
		}
	case pl.ExpectedSHA != "":
		// GitHub's API has no compare-and-swap on a ref's old value, so
		// baton checks it first. Other baton operations on this ref wait
		// for the lease; a push from outside between the check and the
		// update is still caught by the fast-forward rule unless force.
		ref, resp, err := c.Git.GetRef(ctx, t.Owner, t.Repo, t.Ref)
		if err != nil {
			return nil, resp, err
		}
		if cur := ref.GetObject().GetSHA(); cur != pl.ExpectedSHA && cur != pl.SHA {
			return nil, resp, &actionError{Classification{Category: CategoryConflict, Status: resp.StatusCode,
				RequestID: resp.Header.Get("X-Github-Request-Id"), Message: "ref no longer points at expectedSha"}}
		}
		// The lease was checked before the read; the update is a second
		// call, so it is checked again.
		if err := guard(ctx); err != nil {
			return nil, nil, err
		}
	}
	sha := pl.SHA
	full := "refs/" + t.Ref
	r, resp, err := c.Git.UpdateRef(ctx, t.Owner, t.Repo, &github.Reference{Ref: &full, Object: &github.GitObject{SHA: &sha}}, pl.Force)
	if err != nil {
		if unprocessable(resp, err, "not a fast forward") {
			// Another push moved the ref: the fast-forward rule is the
			// compare-and-swap. ("Reference does not exist", "Object does
			// not exist" and other 422s are classified as any other.)
			return nil, resp, &actionError{Classification{Category: CategoryConflict, Status: resp.StatusCode,
				RequestID: resp.Header.Get("X-Github-Request-Id"), Message: "update is not a fast forward"}}
		}
		return nil, resp, err
	}
	return updateRefResult{Ref: r.GetRef(), SHA: r.GetObject().GetSHA()}, resp, nil
}

func (updateRefAction) probe(ctx context.Context, c *github.Client, _ *schema.Record, t schema.Target, p any) (bool, any, *github.Response, error) {
	pl := p.(*schema.UpdateRefPayload)
	ref, resp, err := c.Git.GetRef(ctx, t.Owner, t.Repo, t.Ref)
	if err != nil {
		return false, nil, resp, err
	}
	if ref.GetObject().GetSHA() == pl.SHA {
		return true, updateRefResult{Ref: ref.GetRef(), SHA: pl.SHA, Probed: true}, resp, nil
	}
	return false, nil, resp, nil
}

// short abbreviates a commit sha for messages.
func short(sha string) string { return sha[:min(len(sha), 12)] }

// --- github.repos.create_status ---

type createStatusAction struct{}

type statusResult struct {
	StatusID int64  `json:"statusId"`
	State    string `json:"state"`
	Context  string `json:"context"`
}

func (createStatusAction) do(ctx context.Context, c *github.Client, _ *schema.Record, t schema.Target, p any) (any, *github.Response, error) {
	pl := p.(*schema.CreateStatusPayload)
	st := &github.RepoStatus{State: &pl.State, Context: &pl.Context}
	if pl.Description != "" {
		st.Description = &pl.Description
	}
	if pl.TargetURL != "" {
		st.TargetURL = &pl.TargetURL
	}
	r, resp, err := c.Repositories.CreateStatus(ctx, t.Owner, t.Repo, t.SHA, st)
	if err != nil {
		return nil, resp, err
	}
	return statusResult{StatusID: r.GetID(), State: r.GetState(), Context: r.GetContext()}, resp, nil
}

func (createStatusAction) noProbe() {}

// probe: a commit status is idempotent (the latest of a context wins), so
// after an ambiguous failure it is simply sent again.
func (createStatusAction) probe(context.Context, *github.Client, *schema.Record, schema.Target, any) (bool, any, *github.Response, error) {
	return false, nil, nil, nil
}
