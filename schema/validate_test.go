package schema

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func validSubmission() Submission {
	return Submission{
		IdempotencyKey: "k-1",
		Action:         ActionComment,
		Resource:       Resource{Type: ResourceIssue, ID: "octo/app#1"},
		Payload:        json.RawMessage(`{"body":"hi"}`),
	}
}

func TestSubmissionValidate(t *testing.T) {
	t.Parallel()
	sha := strings.Repeat("a", 40)
	cases := []struct {
		name string
		edit func(*Submission)
		code Code // "" = valid
		msg  string
	}{
		{"valid", func(*Submission) {}, "", ""},
		{"key empty", func(s *Submission) { s.IdempotencyKey = "" }, CodeInvalidRequest, "idempotencyKey is required"},
		{"key 255", func(s *Submission) { s.IdempotencyKey = strings.Repeat("k", 255) }, "", ""},
		{"key 256", func(s *Submission) { s.IdempotencyKey = strings.Repeat("k", 256) }, CodeInvalidRequest, "longer than 255"},
		{"key unicode 255 runes", func(s *Submission) { s.IdempotencyKey = strings.Repeat("é", 255) }, "", ""},
		{"key control char", func(s *Submission) { s.IdempotencyKey = "a\nb" }, CodeInvalidRequest, "printable"},
		{"key bad utf8", func(s *Submission) { s.IdempotencyKey = "a\xffb" }, CodeInvalidRequest, "UTF-8"},
		{"action empty", func(s *Submission) { s.Action = "" }, CodeInvalidRequest, "action is required"},
		{"action unknown", func(s *Submission) { s.Action = "github.repos.delete" }, CodeInvalidRequest, "not one of"},
		{"resource type mismatch", func(s *Submission) { s.Resource.Type = ResourcePullRequest }, CodeInvalidRequest, "acts on resource type issue"},
		{"resource id no number", func(s *Submission) { s.Resource.ID = "octo/app" }, CodeInvalidRequest, "owner/repo#number"},
		{"resource id zero", func(s *Submission) { s.Resource.ID = "octo/app#0" }, CodeInvalidRequest, "number"},
		{"resource id leading zero", func(s *Submission) { s.Resource.ID = "octo/app#01" }, CodeInvalidRequest, "number"},
		{"resource bad owner", func(s *Submission) { s.Resource.ID = "-octo/app#1" }, CodeInvalidRequest, "repository"},
		{"resource dotdot repo", func(s *Submission) { s.Resource.ID = "octo/..#1" }, CodeInvalidRequest, "repository"},
		{"payload missing", func(s *Submission) { s.Payload = nil }, CodeInvalidRequest, "JSON object"},
		{"payload array", func(s *Submission) { s.Payload = json.RawMessage(`[1]`) }, CodeInvalidRequest, "JSON object"},
		{"payload unknown field", func(s *Submission) { s.Payload = json.RawMessage(`{"body":"x","bdy":1}`) }, CodeInvalidRequest, "unknown field"},
		{"payload field in another case", func(s *Submission) { s.Payload = json.RawMessage(`{"Body":"a"}`) }, CodeInvalidRequest, "unknown field payload.Body"},
		{"payload field twice", func(s *Submission) { s.Payload = json.RawMessage(`{"body":"x","body":"y"}`) }, CodeInvalidRequest, "payload.body appears more than once"},
		{"payload field twice in two cases", func(s *Submission) { s.Payload = json.RawMessage(`{"body":"x","Body":"y"}`) }, CodeInvalidRequest, "payload.Body"},
		{"payload invalid UTF-8", func(s *Submission) { s.Payload = json.RawMessage("{\"body\":\"\xff\"}") }, CodeInvalidRequest, "UTF-8"},
		{"payload wrong type", func(s *Submission) { s.Payload = json.RawMessage(`{"body":5}`) }, CodeInvalidRequest, "body"},
		{"payload too large", func(s *Submission) {
			s.Payload = json.RawMessage(`{"body":"` + strings.Repeat("x", MaxPayloadBytes) + `"}`)
		}, CodePayloadTooLarge, "256 KiB"},
		{"comment blank", func(s *Submission) { s.Payload = json.RawMessage(`{"body":"  "}`) }, CodeInvalidRequest, "body is required"},
		{"correlation 128", func(s *Submission) { s.CorrelationID = strings.Repeat("c", 128) }, "", ""},
		{"correlation 129", func(s *Submission) { s.CorrelationID = strings.Repeat("c", 129) }, CodeInvalidRequest, "correlationId"},
		{"maxAttempts 10", func(s *Submission) { s.MaxAttempts = 10 }, "", ""},
		{"maxAttempts 11", func(s *Submission) { s.MaxAttempts = 11 }, CodeInvalidRequest, "maxAttempts"},
		{"maxAttempts negative", func(s *Submission) { s.MaxAttempts = -1 }, CodeInvalidRequest, "maxAttempts"},
		{"installation negative", func(s *Submission) { s.InstallationID = -4 }, CodeInvalidRequest, "installationId"},
		{"merge ok", func(s *Submission) {
			s.Action, s.Resource = ActionMerge, Resource{ResourcePullRequest, "octo/app#4"}
			s.Payload = json.RawMessage(`{"sha":"` + sha + `","method":"squash"}`)
		}, "", ""},
		{"merge short sha", func(s *Submission) {
			s.Action, s.Resource = ActionMerge, Resource{ResourcePullRequest, "octo/app#4"}
			s.Payload = json.RawMessage(`{"sha":"abc"}`)
		}, CodeInvalidRequest, "sha"},
		{"merge bad method", func(s *Submission) {
			s.Action, s.Resource = ActionMerge, Resource{ResourcePullRequest, "octo/app#4"}
			s.Payload = json.RawMessage(`{"sha":"` + sha + `","method":"octopus"}`)
		}, CodeInvalidRequest, "method"},
		{"ref ok", func(s *Submission) {
			s.Action, s.Resource = ActionUpdateRef, Resource{ResourceRef, "octo/app:heads/release/1.x"}
			s.Payload = json.RawMessage(`{"sha":"` + sha + `"}`)
		}, "", ""},
		{"ref bad name", func(s *Submission) {
			s.Action, s.Resource = ActionUpdateRef, Resource{ResourceRef, "octo/app:heads/a..b"}
			s.Payload = json.RawMessage(`{"sha":"` + sha + `"}`)
		}, CodeInvalidRequest, "ref name"},
		{"ref bad utf8", func(s *Submission) {
			s.Action, s.Resource = ActionUpdateRef, Resource{ResourceRef, "octo/app:heads/a\xffb"}
			s.Payload = json.RawMessage(`{"sha":"` + sha + `"}`)
		}, CodeInvalidRequest, "UTF-8"},
		{"ref not heads", func(s *Submission) {
			s.Action, s.Resource = ActionUpdateRef, Resource{ResourceRef, "octo/app:main"}
			s.Payload = json.RawMessage(`{"sha":"` + sha + `"}`)
		}, CodeInvalidRequest, "heads/"},
		{"status ok", func(s *Submission) {
			s.Action, s.Resource = ActionCreateStatus, Resource{ResourceCommit, "octo/app@" + sha}
			s.Payload = json.RawMessage(`{"state":"success","context":"ci","targetUrl":"https://ci.example/1"}`)
		}, "", ""},
		{"status bad state", func(s *Submission) {
			s.Action, s.Resource = ActionCreateStatus, Resource{ResourceCommit, "octo/app@" + sha}
			s.Payload = json.RawMessage(`{"state":"green","context":"ci"}`)
		}, CodeInvalidRequest, "state"},
		{"status bad url", func(s *Submission) {
			s.Action, s.Resource = ActionCreateStatus, Resource{ResourceCommit, "octo/app@" + sha}
			s.Payload = json.RawMessage(`{"state":"success","context":"ci","targetUrl":"javascript:x"}`)
		}, CodeInvalidRequest, "targetUrl"},
		{"labels empty", func(s *Submission) {
			s.Action, s.Payload = ActionAddLabels, json.RawMessage(`{"labels":[]}`)
		}, CodeInvalidRequest, "labels"},
		{"label too long", func(s *Submission) {
			s.Action, s.Payload = ActionRemoveLabel, json.RawMessage(`{"label":"`+strings.Repeat("l", 51)+`"}`)
		}, CodeInvalidRequest, "label"},
		// GitHub refuses a name with spaces around it (422 "Validation
		// Failed", name invalid) when the label exists without them.
		{"label with a leading space", func(s *Submission) {
			s.Action, s.Payload = ActionAddLabels, json.RawMessage(`{"labels":["ok"," bug"]}`)
		}, CodeInvalidRequest, "labels"},
		{"label with a trailing space", func(s *Submission) {
			s.Action, s.Payload = ActionRemoveLabel, json.RawMessage(`{"label":"bug "}`)
		}, CodeInvalidRequest, "label"},
		// remove_label puts the name in the URL path (slashes as they
		// are): a "." or ".." part would name another resource.
		{"label dot-dot", func(s *Submission) {
			s.Action, s.Payload = ActionRemoveLabel, json.RawMessage(`{"label":".."}`)
		}, CodeInvalidRequest, "label"},
		{"label dot", func(s *Submission) {
			s.Action, s.Payload = ActionRemoveLabel, json.RawMessage(`{"label":"."}`)
		}, CodeInvalidRequest, "label"},
		{"label traversal", func(s *Submission) {
			s.Action, s.Payload = ActionRemoveLabel, json.RawMessage(`{"label":"../../../git/refs/heads/victim"}`)
		}, CodeInvalidRequest, "label"},
		{"labels with a dot-dot part", func(s *Submission) {
			s.Action, s.Payload = ActionAddLabels, json.RawMessage(`{"labels":["ok","kind/../x"]}`)
		}, CodeInvalidRequest, "labels"},
		{"label with URL characters ok", func(s *Submission) {
			s.Action, s.Payload = ActionRemoveLabel, json.RawMessage(`{"label":"ready? 50% #1 kind/bug ...x"}`)
		}, "", ""},
		{"update branch ok", func(s *Submission) {
			s.Action, s.Resource = ActionUpdateBranch, Resource{ResourcePullRequest, "octo/app#4"}
			s.Payload = json.RawMessage(`{"expectedHeadSha":"` + sha + `"}`)
		}, "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := validSubmission()
			c.edit(&s)
			err := s.Validate()
			if c.code == "" {
				if err != nil {
					t.Fatalf("valid submission refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("invalid submission accepted")
			}
			if ErrorCode(err) != c.code {
				t.Errorf("code = %s, want %s (%v)", ErrorCode(err), c.code, err)
			}
			if !strings.Contains(err.Error(), c.msg) {
				t.Errorf("message %q does not mention %q", err, c.msg)
			}
		})
	}
}

func validRecord() Record {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	return Record{
		OperationID:     strings.Repeat("a", 64),
		IdempotencyHash: strings.Repeat("b", 64),
		IdempotencyKey:  "k",
		Actor:           "alice",
		Action:          ActionComment,
		Resource:        Resource{ResourceIssue, "octo/app#1"},
		Payload:         json.RawMessage(`{"body":"hi"}`),
		Status:          StatusQueued,
		MaxAttempts:     3,
		CreatedAt:       now,
		UpdatedAt:       now,
	}
}

func TestRecordValidate(t *testing.T) {
	t.Parallel()
	now := time.Now()
	cases := []struct {
		name string
		edit func(*Record)
		ok   bool
	}{
		{"queued", func(*Record) {}, true},
		{"running needs startedAt", func(r *Record) { r.Status = StatusRunning }, false},
		{"running", func(r *Record) { r.Status, r.StartedAt = StatusRunning, &now }, true},
		{"succeeded without completedAt", func(r *Record) { r.Status, r.Outcome = StatusSucceeded, OutcomeSucceeded }, false},
		{"succeeded without outcome", func(r *Record) { r.Status, r.CompletedAt = StatusSucceeded, &now }, false},
		{"succeeded wrong outcome", func(r *Record) { r.Status, r.CompletedAt, r.Outcome = StatusSucceeded, &now, OutcomeFailed }, false},
		{"succeeded", func(r *Record) { r.Status, r.CompletedAt, r.Outcome = StatusSucceeded, &now, OutcomeSucceeded }, true},
		{"queued with outcome", func(r *Record) { r.Outcome = OutcomeFailed }, false},
		{"unknown status", func(r *Record) { r.Status = "paused" }, false},
		{"attempts over max", func(r *Record) { r.Attempts = 4 }, false},
		{"maxAttempts 0", func(r *Record) { r.MaxAttempts = 0 }, false},
		{"bad id", func(r *Record) { r.OperationID = "xyz" }, false},
		{"no actor", func(r *Record) { r.Actor = "" }, false},
		{"result not object", func(r *Record) { r.Result = json.RawMessage(`"x"`) }, false},
		{"no createdAt", func(r *Record) { r.CreatedAt = time.Time{} }, false},
	}
	for _, c := range cases {
		r := validRecord()
		c.edit(&r)
		err := r.Validate()
		if c.ok && err != nil {
			t.Errorf("%s: refused: %v", c.name, err)
		}
		if !c.ok && err == nil {
			t.Errorf("%s: accepted", c.name)
		}
	}
}

func TestTransitions(t *testing.T) {
	t.Parallel()
	allowed := map[[2]Status]bool{
		{StatusQueued, StatusQueued}:     true,
		{StatusQueued, StatusRunning}:    true,
		{StatusQueued, StatusCancelled}:  true,
		{StatusRunning, StatusRunning}:   true,
		{StatusRunning, StatusSucceeded}: true,
		{StatusRunning, StatusFailed}:    true,
		{StatusRunning, StatusCancelled}: true,
	}
	for _, from := range Statuses {
		for _, to := range Statuses {
			if got := CanTransition(from, to); got != allowed[[2]Status{from, to}] {
				t.Errorf("CanTransition(%s, %s) = %v", from, to, got)
			}
		}
	}
}

func TestViewRefusesIncompleteTerminal(t *testing.T) {
	t.Parallel()
	r := validRecord()
	r.Status = StatusFailed
	if _, err := r.View(); err == nil {
		t.Fatal("a failed record without completedAt/outcome was converted")
	}
	now := time.Now().UTC()
	r.CompletedAt, r.Outcome = &now, OutcomeFailed
	v, err := r.View()
	if err != nil {
		t.Fatal(err)
	}
	if v.ResourceKey != "issue:octo/app#1" || string(v.Result) != "{}" || v.AttemptLog == nil {
		t.Errorf("view = %+v", v)
	}
	b, _ := json.Marshal(v)
	if strings.Contains(string(b), "dispatched") {
		t.Errorf("view leaks internal fields: %s", b)
	}
}

func TestParseResourceKey(t *testing.T) {
	t.Parallel()
	good := map[string]Target{
		"pull_request:octo/app#42":    {Owner: "octo", Repo: "app", Number: 42},
		"ref:octo/app:heads/main":     {Owner: "octo", Repo: "app", Ref: "heads/main"},
		"repo:octo/app.go":            {Owner: "octo", Repo: "app.go"},
		"commit:o/r@" + sha40("c"):    {Owner: "o", Repo: "r", SHA: sha40("c")},
		"issue:my_org-1/some.repo#77": {Owner: "my_org-1", Repo: "some.repo", Number: 77},
		"issue:Octo/Demo#11":          {Owner: "octo", Repo: "demo", Number: 11},
		"ref:Octo/App:heads/Main":     {Owner: "octo", Repo: "app", Ref: "heads/Main"},
	}
	for key, want := range good {
		_, got, err := ParseResourceKey(key)
		if err != nil || got != want {
			t.Errorf("ParseResourceKey(%q) = %+v, %v; want %+v", key, got, err, want)
		}
	}
	for _, key := range []string{"", "issue", ":x", "issue:", "widget:a/b", "issue:a/b#x", "commit:a/b@ABC", "ref:a/b:heads/", "ref:a/b:heads/x.lock",
		// git refuses ".lock" at the end of any part, not only the last.
		"ref:a/b:heads/x.lock/y", "ref:a/b:tags/v1.lock/rc",
		// Ref names go into URL paths (segment by segment, escaped): no
		// dot segments, no '?' or spaces.
		"ref:a/b:heads/..", "ref:a/b:heads/../../issues", "ref:a/b:heads/./x", "ref:a/b:heads/x/.", "ref:a/b:heads/a?b", "ref:a/b:heads/a b", "ref:a/b:heads/a\\b", "ref:../b:heads/x", "ref:a/..:heads/x"} {
		if _, _, err := ParseResourceKey(key); err == nil || ErrorCode(err) != CodeInvalidRequest {
			t.Errorf("ParseResourceKey(%q) = %v, want invalid_request", key, err)
		}
	}
}

func sha40(c string) string { return strings.Repeat(c, 40) }

func TestValidRepository(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		owner, name string
		ok          bool
	}{{"octo", "demo", true}, {"o-c-t-o", "my.repo_x", true}, {"octocat_acme", "demo", true}, {"-octo", "demo", false},
		{"octo", "..", false}, {"octo", ".", false}, {"octo", "a/b", false}, {"", "demo", false}, {"octo", "", false},
		{strings.Repeat("o", 40), "demo", false}, {"octo", strings.Repeat("r", 101), false}, {"oct o", "demo", false}} {
		if ValidRepository(c.owner, c.name) != c.ok {
			t.Errorf("ValidRepository(%q, %q) != %v", c.owner, c.name, c.ok)
		}
	}
}

func TestMigrationsNumbered(t *testing.T) {
	t.Parallel()
	ms, err := Migrations()
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) == 0 || ms[0].Name != "0001_operations" {
		t.Fatalf("migrations = %+v", ms)
	}
}

func TestErrorCode(t *testing.T) {
	t.Parallel()
	err := ConflictError("abc")
	if ErrorCode(err) != CodeIdempotencyConflict || ErrorDetails(err)["operationId"] != "abc" {
		t.Errorf("conflict error = %v %v", ErrorCode(err), ErrorDetails(err))
	}
	if ErrorCode(errPlain("boom")) != CodeInternal || PublicMessage(errPlain("boom")) != "internal error" {
		t.Error("an uncoded error must be internal and hidden")
	}
	if ErrorCode(nil) != "" {
		t.Error("nil has a code")
	}
}

type errPlain string

func (e errPlain) Error() string { return string(e) }

func FuzzSubmissionValidate(f *testing.F) {
	f.Add("k-1", ActionComment, "issue", "octo/app#1", `{"body":"hi"}`, "", 0)
	f.Add("k", ActionMerge, "pull_request", "o/r#2", `{"sha":"`+sha40("a")+`"}`, "corr", 3)
	f.Add("\x00", "x", "ref", "o/r:heads/a", `[`, "", 11)
	f.Fuzz(func(t *testing.T, key, action, typ, id, payload, corr string, maxAttempts int) {
		s := Submission{IdempotencyKey: key, Action: action, Resource: Resource{typ, id},
			Payload: json.RawMessage(payload), CorrelationID: corr, MaxAttempts: maxAttempts}
		err := s.Validate()
		if err != nil {
			if c := ErrorCode(err); c != CodeInvalidRequest && c != CodePayloadTooLarge {
				t.Fatalf("validation error with code %s: %v", c, err)
			}
			return
		}
		// Whatever validates must make a valid record.
		r := validRecord()
		r.IdempotencyKey, r.Action, r.Resource, r.Payload, r.CorrelationID = key, action, s.Resource, s.Payload, corr
		if maxAttempts != 0 {
			r.MaxAttempts = maxAttempts
		}
		if err := r.Validate(); err != nil {
			t.Fatalf("submission valid but record not: %v", err)
		}
	})
}
