package executor

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/baton-dev/baton/app/ghsim"
	"github.com/baton-dev/baton/schema"
)

// syncBuffer is a log sink safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) Sync() error { return nil }

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Operations whose payloads carry a canary run with real installation
// tokens, through failures and retries, at debug level: neither the canary
// nor any token, JWT or key appears in a log line.
func TestLogsCarryNoPayloadsOrSecrets(t *testing.T) {
	t.Parallel()
	sink := &syncBuffer{}
	core := zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), sink, zapcore.DebugLevel)
	s := newStack(t, stackOptions{logger: zap.New(core)})
	const canary = "CANARY-7f3a9c"
	if _, err := s.sim.SetFault(ghsim.Fault{Route: "POST /repos/{owner}/{repo}/issues/{number}/comments", Kind: ghsim.FaultStatus, Status: 502, Count: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.sim.SetFault(ghsim.Fault{Route: "POST /repos/{owner}/{repo}/issues/{number}/labels", Kind: ghsim.FaultDropAfter, Count: 1}); err != nil {
		t.Fatal(err)
	}
	ops := []schema.Record{
		s.submit(t, "log-1", schema.ActionComment, issue(10), `{"body":"`+canary+`"}`),
		s.submit(t, "log-2", schema.ActionAddLabels, issue(11), `{"labels":["`+canary+`"]}`),
		s.submit(t, "log-3", schema.ActionCreateStatus, schema.Resource{Type: "commit", ID: "octo/demo@" + ghsim.DemoHeadSHA(1)},
			`{"state":"failure","context":"`+canary+`","description":"`+canary+`"}`),
		s.submit(t, "log-4", schema.ActionMerge, schema.Resource{Type: "pull_request", ID: "octo/demo#2"},
			`{"sha":"`+strings.Repeat("b", 40)+`","commitTitle":"`+canary+`"}`),
	}
	for _, op := range ops {
		s.await(t, op.OperationID, 20*time.Second)
	}
	if s.sim.TokensIssued() == 0 {
		t.Fatal("no installation token was issued: the test proves nothing")
	}
	logs := sink.String()
	if !strings.Contains(logs, "attempt_failed") || !strings.Contains(logs, ops[0].OperationID) {
		t.Fatalf("the logs do not show the operations at all:\n%s", logs)
	}
	for _, secret := range []string{canary, "ghs_", "eyJ", "PRIVATE KEY", "Bearer ", "token "} {
		if strings.Contains(logs, secret) {
			for _, line := range strings.Split(logs, "\n") {
				if strings.Contains(line, secret) {
					t.Errorf("log line carries %q: %s", secret, line)
				}
			}
		}
	}
}
