package mergequeue

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Event is one webhook delivery as the queue sees it. The wiring fills it
// from the delivery ledger: ID, X-GitHub-Event, the payload's action,
// installation.id and repository.full_name, and the body GitHub signed.
type Event struct {
	// DeliveryID is X-GitHub-Delivery, the same on every redelivery; it is
	// part of the idempotency key of every operation the event leads to.
	DeliveryID string
	// Name is X-GitHub-Event: "pull_request", "check_run", …
	Name string
	// Action is the payload's action ("labeled", "completed", …), "" for
	// events without one (status).
	Action string
	// InstallationID is the payload's installation.id.
	InstallationID int64
	// Repository is the payload's repository.full_name ("owner/name").
	Repository string
	// Payload is the delivery's body.
	Payload []byte
}

// Events lists the X-GitHub-Event names the queue acts on.
func (q *Queue) Events() []string {
	return []string{"pull_request", "issue_comment", "check_run", "check_suite", "status"}
}

// RetryError is returned by HandleEvent when the event cannot be handled
// yet: the repository's lease is held (by another event, a reconcile, or
// the outcome of an operation being applied), the lease was lost while the
// event was handled, or GitHub asked baton to wait. The event must be
// handed to HandleEvent again after After; it is not a failure and must
// not be dropped (app's wiring turns it into app.RetryAfter).
type RetryError struct {
	After time.Duration
	Err   error
}

func (e *RetryError) Error() string {
	return fmt.Sprintf("mergequeue: retry after %s: %v", e.After, e.Err)
}

func (e *RetryError) Unwrap() error { return e.Err }

// ErrInvalidEvent is wrapped by the errors of HandleEvent for an event it
// cannot use (a payload that is not the JSON GitHub sends, no repository,
// no installation). Retrying cannot help (app's wiring turns it into
// app.Permanent).
var ErrInvalidEvent = errors.New("mergequeue: invalid event")

// payload is the part of GitHub's webhook payloads the queue reads.
type payload struct {
	Action      string       `json:"action"`
	Number      int          `json:"number"`
	PullRequest *pullPayload `json:"pull_request"`
	Label       *struct {
		Name string `json:"name"`
	} `json:"label"`
	Issue *struct {
		Number      int             `json:"number"`
		PullRequest json.RawMessage `json:"pull_request"`
	} `json:"issue"`
	Comment *struct {
		ID   int64       `json:"id"`
		Body string      `json:"body"`
		User userPayload `json:"user"`
	} `json:"comment"`
	// Changes says what an edit changed; the queue looks at the base
	// (pull_request edited: the pull request was retargeted).
	Changes *struct {
		Base json.RawMessage `json:"base"`
	} `json:"changes"`
	Sender   userPayload `json:"sender"`
	CheckRun *struct {
		HeadSHA string `json:"head_sha"`
		Status  string `json:"status"`
	} `json:"check_run"`
	CheckSuite *struct {
		HeadSHA string `json:"head_sha"`
		Status  string `json:"status"`
	} `json:"check_suite"`
	// status
	SHA     string `json:"sha"`
	State   string `json:"state"`
	Context string `json:"context"`

	Repository *struct {
		FullName string `json:"full_name"`
	} `json:"repository"`
	Installation *struct {
		ID int64 `json:"id"`
	} `json:"installation"`
}

type pullPayload struct {
	Number int    `json:"number"`
	State  string `json:"state"`
	Merged bool   `json:"merged"`
	Head   struct {
		SHA string `json:"sha"`
	} `json:"head"`
	Labels []labelPayload `json:"labels"`
}

type labelPayload struct {
	Name string `json:"name"`
}

type userPayload struct {
	Login string `json:"login"`
	Type  string `json:"type"`
}

// intentKind is what an event asks of the queue.
type intentKind int

const (
	intentJoin       intentKind = iota + 1 // the label was added, or reopened with it
	intentLeave                            // the label was removed
	intentCommand                          // "/baton queue" or "/baton dequeue": permission first
	intentClosed                           // the pull request was closed (merged or not)
	intentReevaluate                       // new commits
	intentGate                             // a check or status completed on a head
	intentRetarget                         // the base branch was changed
)

// intent is what the queue makes of one event.
type intent struct {
	kind intentKind
	pr   int
	// sha is, for intentGate, the commit the check reported on; for an
	// intentJoin, the head the pull request had when it was labelled or
	// reopened (the payload's pull_request.head.sha; "" if it has none).
	sha    string
	merged bool // intentClosed
	// intentCommand
	dequeue bool
	// user is, for intentCommand, the commenter; for intentReevaluate, the
	// pusher; for intentJoin from a reopening, who reopened it, and from a
	// label, the person who added it ("" for an App). Apps (bot accounts)
	// are asked about like people when they push or reopen: the workflow
	// of a fork pushes to its branch as github-actions[bot].
	user string
	// labeled is set for an intentJoin from the label being added, and
	// for an intentReevaluate whose pull request carried the label when
	// it was pushed to.
	labeled bool
	// commentID is, for intentCommand, the GitHub ID of the comment (0 if
	// the payload has none).
	commentID int64
	// labelUnknown is set for an intentLeave from an unlabeled delivery
	// that does not say which label went (one deleted from the
	// repository): the pull request leaves only if GitHub says it no
	// longer has the queue's label.
	labelUnknown bool
}

// isLabel tells whether l is the queue's label (case and surrounding
// blanks aside).
func (q *Queue) isLabel(l labelPayload) bool {
	return strings.EqualFold(strings.TrimSpace(l.Name), q.cfg.Label)
}

// command finds a merge queue command in a comment: a line that is
// "/baton queue" or "/baton dequeue" (case and surrounding blanks aside).
func command(body string) (cmd string, ok bool) {
	for line := range strings.SplitSeq(body, "\n") {
		f := strings.Fields(strings.ToLower(line))
		if len(f) == 2 && f[0] == "/baton" && (f[1] == "queue" || f[1] == "dequeue") {
			return f[1], true
		}
	}
	return "", false
}

// parse reads what ev asks of the queue: nil when the event cannot
// concern it (another label, a comment without a command, a check still
// running, the queue's own status).
func (q *Queue) parse(ev Event) (*intent, error) {
	var p payload
	if err := json.Unmarshal(ev.Payload, &p); err != nil {
		return nil, fmt.Errorf("%w: %s payload: %v", ErrInvalidEvent, ev.Name, err)
	}
	action := p.Action
	switch ev.Name {
	case "pull_request":
		pr := p.PullRequest
		if pr == nil || pr.Number <= 0 {
			return nil, fmt.Errorf("%w: pull_request without pull_request.number", ErrInvalidEvent)
		}
		switch action {
		case "labeled", "unlabeled":
			if p.Label == nil && action == "unlabeled" && !slices.ContainsFunc(pr.Labels, q.isLabel) {
				// A label deleted from the repository is taken off every
				// pull request that had it, and GitHub's deliveries of that
				// carry no label: it may have been the queue's (the pull
				// request's labels, as they were after, no longer have it).
				return &intent{kind: intentLeave, pr: pr.Number, labelUnknown: true}, nil
			}
			if p.Label == nil || !q.isLabel(labelPayload{Name: p.Label.Name}) {
				return nil, nil
			}
			if action == "labeled" {
				// Who added the label must be able to merge: GitHub lets
				// triage add labels, but not merge. An App that labels is
				// one the repository's admins installed with write access
				// to issues (baton itself, labelling for a "/baton queue"
				// command it checked); a fork's workflow cannot label the
				// base repository's pull requests.
				user := p.Sender.Login
				if p.Sender.Type == "Bot" {
					user = ""
				}
				return &intent{kind: intentJoin, pr: pr.Number, user: user, labeled: true, sha: pr.Head.SHA}, nil
			}
			return &intent{kind: intentLeave, pr: pr.Number}, nil
		case "closed":
			return &intent{kind: intentClosed, pr: pr.Number, merged: pr.Merged}, nil
		case "edited":
			// Only a new base concerns the queue (a title or body edit
			// does not).
			if p.Changes == nil || len(p.Changes.Base) == 0 || string(p.Changes.Base) == "null" {
				return nil, nil
			}
			return &intent{kind: intentRetarget, pr: pr.Number}, nil
		case "synchronize":
			// Who pushed: someone without write permission takes the pull
			// request out of the queue (reevaluate).
			labeled := slices.ContainsFunc(pr.Labels, q.isLabel)
			return &intent{kind: intentReevaluate, pr: pr.Number, sha: pr.Head.SHA, user: p.Sender.Login, labeled: labeled}, nil
		case "reopened":
			if slices.ContainsFunc(pr.Labels, q.isLabel) {
				// Who reopened it: the label was put there for the pull
				// request as it was, and its author may reopen it (after
				// pushing to its branch while it was closed).
				return &intent{kind: intentJoin, pr: pr.Number, user: p.Sender.Login, sha: pr.Head.SHA}, nil
			}
		}
		return nil, nil
	case "issue_comment":
		if action != "created" || p.Issue == nil || p.Comment == nil || len(p.Issue.PullRequest) == 0 || string(p.Issue.PullRequest) == "null" {
			return nil, nil
		}
		if p.Sender.Type == "Bot" || p.Comment.User.Type == "Bot" {
			return nil, nil // baton's own comments, and other Apps'
		}
		cmd, ok := command(p.Comment.Body)
		if !ok {
			return nil, nil
		}
		user := p.Comment.User.Login
		if user == "" {
			user = p.Sender.Login
		}
		return &intent{kind: intentCommand, pr: p.Issue.Number, dequeue: cmd == "dequeue", user: user, commentID: p.Comment.ID}, nil
	case "check_run":
		if action != "completed" || p.CheckRun == nil || p.CheckRun.HeadSHA == "" {
			return nil, nil
		}
		return &intent{kind: intentGate, sha: p.CheckRun.HeadSHA}, nil
	case "check_suite":
		if action != "completed" || p.CheckSuite == nil || p.CheckSuite.HeadSHA == "" {
			return nil, nil
		}
		return &intent{kind: intentGate, sha: p.CheckSuite.HeadSHA}, nil
	case "status":
		if p.SHA == "" || p.State == "pending" || p.Context == q.cfg.StatusContext {
			return nil, nil
		}
		return &intent{kind: intentGate, sha: p.SHA}, nil
	}
	return nil, nil
}

// eventRepo returns the repository and installation of ev, from the
// fields the wiring filled or else from the payload.
func eventRepo(ev Event) (owner, name string, inst int64, err error) {
	full, inst := ev.Repository, ev.InstallationID
	if full == "" || inst == 0 {
		var p payload
		if err := json.Unmarshal(ev.Payload, &p); err != nil {
			return "", "", 0, fmt.Errorf("%w: %s payload: %v", ErrInvalidEvent, ev.Name, err)
		}
		if full == "" && p.Repository != nil {
			full = p.Repository.FullName
		}
		if inst == 0 && p.Installation != nil {
			inst = p.Installation.ID
		}
	}
	owner, name, ok := splitFullName(full)
	if !ok {
		return "", "", 0, fmt.Errorf("%w: %s without a repository", ErrInvalidEvent, ev.Name)
	}
	if inst <= 0 {
		return "", "", 0, fmt.Errorf("%w: %s without an installation", ErrInvalidEvent, ev.Name)
	}
	return owner, name, inst, nil
}
