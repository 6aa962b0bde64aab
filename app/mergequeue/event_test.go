package mergequeue

import (
	"errors"
	"fmt"
	"testing"
)

func parser() *Queue {
	return &Queue{cfg: Config{Label: DefaultLabel, StatusContext: DefaultStatusContext}}
}

func TestParse(t *testing.T) {
	t.Parallel()
	q := parser()
	repo := `"repository":{"full_name":"octo/demo"},"installation":{"id":7}`
	pull := func(action, extra string) Event {
		return Event{DeliveryID: "d", Name: "pull_request", Action: action, Payload: []byte(
			fmt.Sprintf(`{"action":%q,"number":4,"pull_request":{"number":4,"state":"open","merged":false,"head":{"sha":"abc"},"labels":[{"name":"Baton:Queue"}]},%s%s}`, action, repo, extra))}
	}
	comment := func(body, userType string) Event {
		return Event{DeliveryID: "d", Name: "issue_comment", Action: "created", Payload: []byte(fmt.Sprintf(
			`{"action":"created","issue":{"number":9,"pull_request":{"url":"x"}},"comment":{"body":%q,"user":{"login":"mona","type":%q}},"sender":{"login":"mona","type":%q},%s}`,
			body, userType, userType, repo))}
	}
	for _, c := range []struct {
		name string
		ev   Event
		want *intent
	}{
		{"our label added", pull("labeled", `,"label":{"name":"baton:queue"}`), &intent{kind: intentJoin, pr: 4, labeled: true, sha: "abc"}},
		{"our label, other case", pull("labeled", `,"label":{"name":"BATON:QUEUE"}`), &intent{kind: intentJoin, pr: 4, labeled: true, sha: "abc"}},
		{"our label added by a person", pull("labeled", `,"label":{"name":"baton:queue"},"sender":{"login":"tri","type":"User"}`),
			&intent{kind: intentJoin, pr: 4, user: "tri", labeled: true, sha: "abc"}},
		{"our label added by an App", pull("labeled", `,"label":{"name":"baton:queue"},"sender":{"login":"baton[bot]","type":"Bot"}`),
			&intent{kind: intentJoin, pr: 4, labeled: true, sha: "abc"}},
		{"our label removed", pull("unlabeled", `,"label":{"name":"baton:queue"}`), &intent{kind: intentLeave, pr: 4}},
		{"another label", pull("labeled", `,"label":{"name":"bug"}`), nil},
		{"a label deleted while the pull request still has ours", pull("unlabeled", ""), nil},
		{"a label deleted, ours gone", Event{DeliveryID: "d", Name: "pull_request", Action: "unlabeled", Payload: []byte(
			`{"action":"unlabeled","number":4,"pull_request":{"number":4,"state":"open","head":{"sha":"abc","repo":null},"labels":[]},` + repo + `}`)},
			&intent{kind: intentLeave, pr: 4, labelUnknown: true}},
		{"closed", pull("closed", ""), &intent{kind: intentClosed, pr: 4}},
		{"new commits", pull("synchronize", ""), &intent{kind: intentReevaluate, pr: 4, sha: "abc", labeled: true}},
		{"reopened with the label", pull("reopened", ""), &intent{kind: intentJoin, pr: 4, sha: "abc"}},
		{"opened", pull("opened", ""), nil},
		{"queue command", comment("LGTM\r\n  /Baton   QUEUE  \n", "User"), &intent{kind: intentCommand, pr: 9, user: "mona"}},
		{"dequeue command", comment("/baton dequeue", "User"), &intent{kind: intentCommand, pr: 9, dequeue: true, user: "mona"}},
		{"not a command", comment("please /baton queue this", "User"), nil},
		{"a command with more words", comment("/baton queue now", "User"), nil},
		{"a bot's comment", comment("/baton queue", "Bot"), nil},
		{"a comment on an issue", Event{DeliveryID: "d", Name: "issue_comment", Action: "created", Payload: []byte(
			`{"action":"created","issue":{"number":9,"pull_request":null},"comment":{"body":"/baton queue","user":{"login":"m","type":"User"}},` + repo + `}`)}, nil},
		{"check run completed", Event{DeliveryID: "d", Name: "check_run", Action: "completed", Payload: []byte(
			`{"action":"completed","check_run":{"head_sha":"abc","status":"completed"},` + repo + `}`)}, &intent{kind: intentGate, sha: "abc"}},
		{"check run created", Event{DeliveryID: "d", Name: "check_run", Action: "created", Payload: []byte(
			`{"action":"created","check_run":{"head_sha":"abc","status":"queued"},` + repo + `}`)}, nil},
		{"check suite completed", Event{DeliveryID: "d", Name: "check_suite", Action: "completed", Payload: []byte(
			`{"action":"completed","check_suite":{"head_sha":"abc","status":"completed"},` + repo + `}`)}, &intent{kind: intentGate, sha: "abc"}},
		{"status success", Event{DeliveryID: "d", Name: "status", Payload: []byte(`{"sha":"abc","state":"success","context":"ci",` + repo + `}`)}, &intent{kind: intentGate, sha: "abc"}},
		{"status pending", Event{DeliveryID: "d", Name: "status", Payload: []byte(`{"sha":"abc","state":"pending","context":"ci",` + repo + `}`)}, nil},
		{"the queue's own status", Event{DeliveryID: "d", Name: "status", Payload: []byte(`{"sha":"abc","state":"success","context":"baton/queue",` + repo + `}`)}, nil},
		{"push", Event{DeliveryID: "d", Name: "push", Payload: []byte(`{}`)}, nil},
	} {
		got, err := q.parse(c.ev)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if (got == nil) != (c.want == nil) || (got != nil && *got != *c.want) {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
	if _, err := q.parse(Event{Name: "pull_request", Payload: []byte(`{"action":`)}); !errors.Is(err, ErrInvalidEvent) {
		t.Errorf("broken JSON: %v", err)
	}
	if _, err := q.parse(Event{Name: "pull_request", Payload: []byte(`{"action":"labeled"}`)}); !errors.Is(err, ErrInvalidEvent) {
		t.Errorf("pull_request without a pull request: %v", err)
	}
	owner, name, inst, err := eventRepo(pull("closed", ""))
	if err != nil || owner != "octo" || name != "demo" || inst != 7 {
		t.Errorf("eventRepo: %s %s %d %v", owner, name, inst, err)
	}
	if _, _, _, err := eventRepo(Event{Name: "status", Payload: []byte(`{"repository":{"full_name":"octo/demo"}}`)}); !errors.Is(err, ErrInvalidEvent) {
		t.Errorf("no installation: %v", err)
	}
}

// Whatever GitHub (or anyone who has the secret) sends, parsing neither
// panics nor fails with anything but ErrInvalidEvent.
func FuzzParse(f *testing.F) {
	f.Add("pull_request", `{"action":"labeled","pull_request":{"number":1},"label":{"name":"baton:queue"}}`)
	f.Add("issue_comment", `{"action":"created","issue":{"number":1,"pull_request":{}},"comment":{"body":"/baton queue","user":{"login":"a"}}}`)
	f.Add("status", `{"sha":"a","state":"failure","context":"ci"}`)
	f.Add("check_run", `{"action":"completed","check_run":{"head_sha":"a"}}`)
	f.Add("check_suite", `[]`)
	q := parser()
	f.Fuzz(func(t *testing.T, name, body string) {
		in, err := q.parse(Event{DeliveryID: "d", Name: name, Payload: []byte(body)})
		if err != nil && !errors.Is(err, ErrInvalidEvent) {
			t.Fatalf("error without ErrInvalidEvent: %v", err)
		}
		if in != nil && in.kind != intentGate && in.pr <= 0 && in.kind != intentCommand {
			t.Fatalf("intent without a pull request: %+v", in)
		}
		_, _, _, _ = eventRepo(Event{Name: name, Payload: []byte(body)})
	})
}
