package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"unicode/utf8"
)

// The actions baton performs on GitHub.
const (
	ActionMerge        = "github.pulls.merge"
	ActionUpdateBranch = "github.pulls.update_branch"
	ActionComment      = "github.issues.comment"
	ActionAddLabels    = "github.issues.add_labels"
	ActionRemoveLabel  = "github.issues.remove_label"
	ActionUpdateRef    = "github.git.update_ref"
	ActionCreateStatus = "github.repos.create_status"
)

// ActionSpec describes one registered action: the resource type it acts on
// and how its payload is checked.
type ActionSpec struct {
	Name         string
	ResourceType string
	// newPayload returns a pointer to the action's payload struct.
	newPayload func() payload
}

// payload is implemented by every action's payload struct.
type payload interface{ validate() error }

// Actions lists the registered actions by name.
var Actions = map[string]ActionSpec{
	ActionMerge:        {ActionMerge, ResourcePullRequest, func() payload { return new(MergePayload) }},
	ActionUpdateBranch: {ActionUpdateBranch, ResourcePullRequest, func() payload { return new(UpdateBranchPayload) }},
	ActionComment:      {ActionComment, ResourceIssue, func() payload { return new(CommentPayload) }},
	ActionAddLabels:    {ActionAddLabels, ResourceIssue, func() payload { return new(AddLabelsPayload) }},
	ActionRemoveLabel:  {ActionRemoveLabel, ResourceIssue, func() payload { return new(RemoveLabelPayload) }},
	ActionUpdateRef:    {ActionUpdateRef, ResourceRef, func() payload { return new(UpdateRefPayload) }},
	ActionCreateStatus: {ActionCreateStatus, ResourceCommit, func() payload { return new(CreateStatusPayload) }},
}

// ActionNames returns the registered action names, sorted.
func ActionNames() []string {
	names := make([]string, 0, len(Actions))
	for n := range Actions {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// MergePayload is the payload of github.pulls.merge. The merge happens only
// if the pull request's head is still SHA.
type MergePayload struct {
	SHA           string `json:"sha"`
	Method        string `json:"method,omitempty"`
	CommitTitle   string `json:"commitTitle,omitempty"`
	CommitMessage string `json:"commitMessage,omitempty"`
}

func (p *MergePayload) validate() error {
	if !ValidSHA(p.SHA) {
		return Invalidf("payload.sha must be the full 40-character head commit sha")
	}
	switch p.Method {
	case "", "merge", "squash", "rebase":
	default:
		return Invalidf("payload.method must be merge, squash or rebase")
	}
	if utf8.RuneCountInString(p.CommitTitle) > 1024 {
		return Invalidf("payload.commitTitle is longer than 1024 characters")
	}
	if len(p.CommitMessage) > 65536 {
		return Invalidf("payload.commitMessage is longer than 65536 bytes")
	}
	return nil
}

// dropDefaults leaves out the method "merge": it is GitHub's default
// merge_method, which GitHub applies to a merge that names none.
func (p *MergePayload) dropDefaults() {
	if p.Method == "merge" {
		p.Method = ""
	}
}

// UpdateBranchPayload is the payload of github.pulls.update_branch.
type UpdateBranchPayload struct {
	ExpectedHeadSHA string `json:"expectedHeadSha"`
}

func (p *UpdateBranchPayload) validate() error {
	if !ValidSHA(p.ExpectedHeadSHA) {
		return Invalidf("payload.expectedHeadSha must be the full 40-character head commit sha")
	}
	return nil
}

// MaxCommentBytes is GitHub's limit on a comment body, less room for the
// hidden marker baton appends to find its own comments.
const MaxCommentBytes = 65536 - 128

// CommentPayload is the payload of github.issues.comment.
type CommentPayload struct {
	Body string `json:"body"`
}

func (p *CommentPayload) validate() error {
	if strings.TrimSpace(p.Body) == "" {
		return Invalidf("payload.body is required")
	}
	if len(p.Body) > MaxCommentBytes {
		return Invalidf("payload.body is longer than %d bytes", MaxCommentBytes)
	}
	return nil
}

// AddLabelsPayload is the payload of github.issues.add_labels.
type AddLabelsPayload struct {
	Labels []string `json:"labels"`
}

func (p *AddLabelsPayload) validate() error {
	if len(p.Labels) == 0 || len(p.Labels) > 100 {
		return Invalidf("payload.labels must hold 1 to 100 labels")
	}
	for _, l := range p.Labels {
		if err := validLabel(l, "payload.labels"); err != nil {
			return err
		}
	}
	return nil
}

// RemoveLabelPayload is the payload of github.issues.remove_label.
type RemoveLabelPayload struct {
	Label string `json:"label"`
}

func (p *RemoveLabelPayload) validate() error { return validLabel(p.Label, "payload.label") }

func validLabel(l, field string) error {
	if strings.TrimSpace(l) == "" || utf8.RuneCountInString(l) > 50 {
		return Invalidf("%s: a label name has 1 to 50 characters", field)
	}
	if strings.TrimSpace(l) != l {
		// GitHub refuses such a name (422, name invalid) where the label
		// exists without the spaces, and removes only by exact name.
		return Invalidf("%s: a label name does not begin or end with a space", field)
	}
	for _, r := range l {
		if r < 0x20 || r == 0x7f {
			return Invalidf("%s: a label name has no control characters", field)
		}
	}
	// remove_label puts the name in the URL path, where GitHub takes a
	// slash as is ("kind/bug"): a part that is "." or ".." would be read
	// as a relative path and name another resource.
	for _, part := range strings.Split(l, "/") {
		if part == "." || part == ".." {
			return Invalidf(`%s: a label name cannot be "." or "..", nor have such a part between slashes`, field)
		}
	}
	return nil
}

// UpdateRefPayload is the payload of github.git.update_ref. Without Force
// the update must be a fast-forward; with ExpectedSHA it happens only if
// the ref still points there.
type UpdateRefPayload struct {
	SHA         string `json:"sha"`
	ExpectedSHA string `json:"expectedSha,omitempty"`
	Force       bool   `json:"force,omitempty"`
}

func (p *UpdateRefPayload) validate() error {
	if !ValidSHA(p.SHA) {
		return Invalidf("payload.sha must be a full 40-character commit sha")
	}
	if p.ExpectedSHA != "" && !ValidSHA(p.ExpectedSHA) {
		return Invalidf("payload.expectedSha must be a full 40-character commit sha")
	}
	return nil
}

// CreateStatusPayload is the payload of github.repos.create_status.
type CreateStatusPayload struct {
	State       string `json:"state"`
	Context     string `json:"context"`
	Description string `json:"description,omitempty"`
	TargetURL   string `json:"targetUrl,omitempty"`
}

func (p *CreateStatusPayload) validate() error {
	switch p.State {
	case "error", "failure", "pending", "success":
	default:
		return Invalidf("payload.state must be error, failure, pending or success")
	}
	if strings.TrimSpace(p.Context) == "" || utf8.RuneCountInString(p.Context) > 255 {
		return Invalidf("payload.context is required (at most 255 characters)")
	}
	if utf8.RuneCountInString(p.Description) > 140 {
		return Invalidf("payload.description is longer than 140 characters")
	}
	if p.TargetURL != "" {
		u, err := url.Parse(p.TargetURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return Invalidf("payload.targetUrl must be an http(s) URL")
		}
	}
	return nil
}

// DecodePayload decodes raw into the payload struct of action (one of the
// *Payload types of this package) and validates it. The decoding is
// strict (see DecodeStrict): field names match exactly, no name appears
// twice, strings are valid UTF-8, and unknown fields are an error.
func DecodePayload(action string, raw json.RawMessage) (any, error) {
	spec, ok := Actions[action]
	if !ok {
		return nil, Invalidf("action %q is not one of %s", truncate(action, 60), strings.Join(ActionNames(), ", "))
	}
	p := spec.newPayload()
	if err := DecodeStrict(raw, p, "payload", "payload"); err != nil {
		return nil, err
	}
	if err := p.validate(); err != nil {
		return nil, err
	}
	if err := refuseNUL(p, "payload"); err != nil {
		return nil, err
	}
	return p, nil
}

// refuseNUL refuses a payload with a NUL character (U+0000, which JSON
// carries as \u0000) in one of its strings: no GitHub text means one,
// GitHub refuses or mangles it, and it would otherwise fail (or post
// something else) at GitHub rather than at submission. It is checked on
// submissions only (DecodePayload): a record stored by an earlier baton
// is carried out as that baton would have.
func refuseNUL(p payload, prefix string) error {
	v := reflect.ValueOf(p).Elem()
	for i := range v.NumField() {
		name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("json"), ",")
		f := v.Field(i)
		var ss []string
		switch f.Kind() {
		case reflect.String:
			ss = []string{f.String()}
		case reflect.Slice:
			if f.Type().Elem().Kind() == reflect.String {
				ss = f.Interface().([]string)
			}
		}
		for _, s := range ss {
			if strings.ContainsRune(s, 0) {
				return Invalidf("%s.%s must not contain NUL characters (\\u0000)", prefix, name)
			}
		}
	}
	return nil
}

// DecodeStoredPayload decodes the payload of a stored record. It is
// DecodePayload, except that a payload DecodePayload refuses is read
// again as baton read payloads before they were decoded strictly (Go's
// encoding/json: member names matched whatever their case, unknown members
// refused): a record an older baton accepted and stored as it was sent,
// still queued when baton is upgraded, is carried out as that baton would
// have carried it out, instead of failing every delivery until it is
// dead-lettered. What it asks for must still pass today's validation.
// Submissions are decoded by DecodePayload alone.
func DecodeStoredPayload(action string, raw json.RawMessage) (any, error) {
	p, err := DecodePayload(action, raw)
	if err == nil {
		return p, nil
	}
	lp, decoded := decodeLegacyPayload(action, raw)
	if !decoded {
		return nil, err
	}
	if err := lp.validate(); err != nil {
		return nil, err
	}
	return lp, nil
}

// decodeLegacyPayload decodes raw by the rules of the earlier versions of
// baton that stored payloads without decoding them strictly; decoded is
// false when those rules refuse it too.
func decodeLegacyPayload(action string, raw json.RawMessage) (p payload, decoded bool) {
	spec, ok := Actions[action]
	if !ok || !isObject(raw) {
		return nil, false
	}
	p = spec.newPayload()
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if dec.Decode(p) != nil {
		return nil, false
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, false
	}
	return p, true
}
