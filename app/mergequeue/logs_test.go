package mergequeue_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/baton-dev/baton/app/mergequeue"
)

// labelEvent is a pull_request labeled or unlabeled delivery of the
// queue's label, shaped as GitHub sends it (the parts the queue reads).
func labelEvent(repo string, n int, action, id string) mergequeue.Event {
	body := fmt.Sprintf(`{"action":%q,"number":%d,"pull_request":{"number":%d,"state":"open","head":{"sha":"x"}},`+
		`"label":{"name":"baton:queue"},"repository":{"full_name":"octo/%s"},"installation":{"id":1},"sender":{"login":"monalisa","type":"User"}}`,
		action, n, n, repo)
	return mergequeue.Event{DeliveryID: id, Name: "pull_request", Action: action, InstallationID: 1, Repository: "octo/" + repo, Payload: []byte(body)}
}

// The event log keeps the newest 100 events and the audit log the newest
// 200 changes, oldest first.
//
// Not parallel: two hundred events handled one after the other are a chain
// of round trips that the scenario tests, running beside it, would slow
// down tenfold on two cores; alone it takes seconds.
func TestLogsStayBoundedAndOrdered(t *testing.T) {
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	s := newStack(t, stackOptions{noWebhooks: true, noWorkers: true, mq: func(c *mergequeue.Config) { c.Registerer = reg }})
	const repo = "logs"
	s.repo(t, repo, 1, nil)
	const cycles = 101 // 202 events and audit entries: past both bounds
	var ids []string
	for i := range cycles {
		for _, action := range []string{"labeled", "unlabeled"} {
			id := fmt.Sprintf("d-%03d-%s", i, action)
			// GitHub first, as the delivery says (the queue reads the pull
			// request), then the delivery.
			f := s.sim.AddLabel
			if action == "unlabeled" {
				f = s.sim.RemoveLabel
			}
			if err := f("octo", repo, 1, "baton:queue", "monalisa"); err != nil {
				t.Fatal(err)
			}
			if err := s.q.HandleEvent(ctx, labelEvent(repo, 1, action, id)); err != nil {
				t.Fatalf("%s: %v", id, err)
			}
			ids = append(ids, id)
		}
	}
	ev := s.events(t, repo)
	if len(ev) != mergequeue.MaxEventLog {
		t.Fatalf("%d events kept, want %d", len(ev), mergequeue.MaxEventLog)
	}
	var got []string
	for i, e := range ev {
		got = append(got, e.DeliveryID)
		if i > 0 && e.At.Before(ev[i-1].At) {
			t.Errorf("event %d is older than the one before it", i)
		}
	}
	if want := ids[len(ids)-mergequeue.MaxEventLog:]; !slices.Equal(got, want) {
		t.Errorf("events kept: %v…, want %v…", got[:4], want[:4])
	}
	a := s.audit(t, repo)
	if len(a) != mergequeue.MaxAuditLog {
		t.Fatalf("%d audit entries kept, want %d", len(a), mergequeue.MaxAuditLog)
	}
	for i, r := range a {
		want := mergequeue.AuditJoin
		if i%2 == 1 {
			want = mergequeue.AuditLeave
		}
		if r.Action != want || r.PRNumber != 1 {
			t.Fatalf("audit %d: %+v, want %s (the newest 200 of %d, in order)", i, r, want, 2*cycles)
		}
		if i > 0 && r.At.Before(a[i-1].At) {
			t.Errorf("audit entry %d is older than the one before it", i)
		}
	}
	if len(s.entries(t, repo)) != 0 {
		t.Errorf("queue not empty: %+v", s.entries(t, repo))
	}
	if got := counter(t, reg, "baton_mergequeue_changes_total", "action", "leave"); got != cycles {
		t.Errorf("baton_mergequeue_changes_total{action=leave} = %v, want %d", got, cycles)
	}
	if got := counter(t, reg, "baton_mergequeue_events_total", "result", "handled"); got != 2*cycles {
		t.Errorf("baton_mergequeue_events_total{result=handled} = %v, want %d", got, 2*cycles)
	}
}

// counter reads one labelled counter of reg.
func counter(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
