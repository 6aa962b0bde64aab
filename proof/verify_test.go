package proof

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/baton-dev/baton/app/client"
	"github.com/baton-dev/baton/app/ghsim"
	"github.com/baton-dev/baton/internal/sqlite"
	"github.com/baton-dev/baton/schema"
)

// markerRE finds the hidden marker baton puts in every comment it posts.
var markerRE = regexp.MustCompile(`<!-- baton:operation=([0-9a-f]{64}) -->`)

// findings is what the checks after a run found: figures for the report
// and violations of baton's promises.
type findings struct {
	accepted, created, answered200 int
	unanswered                     int
	lost                           []string
	outcomes                       map[string]map[string]int // action → status → count
	failedCategories               map[string]int
	probed                         int
	attempts                       int

	effects      int
	undetermined []string // failed after a probe that could not read GitHub
	duplicates   []string
	disagree     []string // GitHub and the record tell different stories
	overlaps     []string
	outOfOrder   []string // effects on a resource applied against its submission order
	leasesHeld   []string
	// leasesExpired counts the leases whose holder stopped renewing them
	// (killed) and which nobody has force-released or taken over yet:
	// not held, since anyone may take them.
	leasesExpired int
	deadLetters   []string

	mergedOnce, refUpdates, comments, labelOps int
	faults                                     map[ghsim.FaultKind]int
	violations                                 []string
}

func (f *findings) violate(format string, args ...any) {
	f.violations = append(f.violations, fmt.Sprintf(format, args...))
}

// effectKind names what a REST request the simulator logged did.
func effectKind(e ghsim.Effect) string {
	switch {
	case e.Method == "PUT" && strings.HasSuffix(e.Path, "/merge"):
		return "merge"
	case e.Method == "PATCH" && strings.Contains(e.Path, "/git/refs/"):
		return "ref"
	case e.Method == "POST" && strings.HasSuffix(e.Path, "/comments"):
		return "comment"
	case strings.Contains(e.Path, "/labels"):
		return "label"
	case e.Method == "POST" && strings.Contains(e.Path, "/statuses/"):
		return "status"
	}
	return e.Method + " " + e.Path
}

// verify checks what happened, on GitHub and in baton, once the server
// has settled.
func verify(ctx context.Context, sim *ghsim.Sim, fx *fixture, admin *client.Client, ops []*plannedOp, sub *submitter, db *sqlite.DB) *findings {
	f := &findings{outcomes: map[string]map[string]int{}, failedCategories: map[string]int{}, faults: map[ghsim.FaultKind]int{}}

	// Every operation answered 201 or 200 exists and is terminal.
	sub.mu.Lock()
	acc := make([]*accepted, 0, len(sub.results))
	for _, a := range sub.results {
		acc = append(acc, a)
	}
	sub.mu.Unlock()
	sort.Slice(acc, func(i, j int) bool { return acc[i].op.seq < acc[j].op.seq })
	f.accepted = len(acc)
	f.unanswered = len(ops) - len(acc)
	views := make(map[int]*client.Operation, len(acc)) // by op.seq
	var mu sync.Mutex
	work := make(chan *accepted)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for a := range work {
				v, err := admin.Get(ctx, a.id)
				mu.Lock()
				switch {
				case err != nil:
					f.lost = append(f.lost, fmt.Sprintf("operation %s (%s, %s on %s) answered %d: %v", a.id, a.op.key, a.op.action, a.op.resource.Key(), a.status, err))
				case !v.Status.Terminal():
					f.lost = append(f.lost, fmt.Sprintf("operation %s (%s on %s) is still %s", a.id, a.op.action, a.op.resource.Key(), v.Status))
				default:
					views[a.op.seq] = &v
				}
				mu.Unlock()
			}
		})
	}
	for _, a := range acc {
		switch a.status {
		case 201:
			f.created++
		default:
			f.answered200++
		}
		work <- a
	}
	close(work)
	wg.Wait()
	for _, l := range f.lost {
		f.violate("lost: %s", l)
	}
	for _, a := range acc {
		v := views[a.op.seq]
		if v == nil {
			continue
		}
		if f.outcomes[a.op.action] == nil {
			f.outcomes[a.op.action] = map[string]int{}
		}
		f.outcomes[a.op.action][string(v.Status)]++
		if v.Status == schema.StatusFailed {
			f.failedCategories[v.LastErrorCategory]++
		}
		f.attempts += v.Attempts
		var r struct {
			Probed bool `json:"probed"`
		}
		if json.Unmarshal(v.Result, &r) == nil && r.Probed {
			f.probed++
		}
	}
	succeeded := func(a *accepted) bool {
		v := views[a.op.seq]
		return v != nil && v.Status == schema.StatusSucceeded
	}
	// undetermined: the operation failed because, after an attempt that
	// may have been applied, GitHub could not be read to tell; its record
	// says so (the last entry of its attempt log is a probe that failed),
	// and either state of GitHub is consistent with it.
	isUndetermined := map[string]bool{}
	undetermined := func(a *accepted) bool {
		v := views[a.op.seq]
		if v == nil || v.Status != schema.StatusFailed || len(v.AttemptLog) == 0 {
			return false
		}
		last := v.AttemptLog[len(v.AttemptLog)-1]
		if last.Probe && last.ErrorCategory != "" {
			if !isUndetermined[a.id] {
				isUndetermined[a.id] = true
				f.undetermined = append(f.undetermined, fmt.Sprintf("%s %s on %s", a.id, a.op.action, a.op.resource.Key()))
			}
			return true
		}
		return false
	}
	status := func(a *accepted) string {
		if v := views[a.op.seq]; v != nil {
			return string(v.Status)
		}
		return "missing"
	}

	// One writer per resource: no two mutating calls on one resource
	// overlapped in time.
	effects := sim.Effects()
	f.effects = len(effects)
	byResource := map[string][]ghsim.Effect{}
	for _, e := range effects {
		byResource[e.Resource] = append(byResource[e.Resource], e)
	}
	for res, es := range byResource {
		sort.Slice(es, func(i, j int) bool { return es[i].StartedAt.Before(es[j].StartedAt) })
		for i := 1; i < len(es); i++ {
			prev, cur := es[i-1], es[i]
			if prev.EndedAt.IsZero() || cur.StartedAt.Before(prev.EndedAt) {
				f.overlaps = append(f.overlaps, fmt.Sprintf("%s: %s %s (request %s, %s–%s) overlapped %s %s (request %s, started %s)",
					res, prev.Method, prev.Path, prev.RequestID, prev.StartedAt.Format(time.StampMicro), prev.EndedAt.Format(time.StampMicro),
					cur.Method, cur.Path, cur.RequestID, cur.StartedAt.Format(time.StampMicro)))
			}
		}
	}
	for _, o := range f.overlaps {
		f.violate("overlap: %s", o)
	}

	// Group the accepted operations by resource, in submission order.
	accByRes := map[string][]*accepted{}
	for _, a := range acc {
		k := a.op.resource.Key()
		accByRes[k] = append(accByRes[k], a)
	}
	count := func(res, kind string) int {
		n := 0
		for _, e := range byResource[res] {
			if effectKind(e) == kind {
				n++
			}
		}
		return n
	}
	repo := fixtureOwner + "/" + fixtureRepo

	// Comments: each posted at most once, and exactly once when its record
	// says succeeded; labels as the records say.
	for _, num := range fx.issues {
		res := fmt.Sprintf("issue:%s#%d", repo, num)
		is, err := sim.Issue(fixtureOwner, fixtureRepo, num)
		if err != nil {
			f.violate("issue #%d: %v", num, err)
			continue
		}
		markers := map[string]int{}
		appComments := 0
		for _, c := range is.Comments {
			if !c.ByApp {
				continue
			}
			appComments++
			m := markerRE.FindStringSubmatch(c.Body)
			if m == nil {
				f.disagree = append(f.disagree, fmt.Sprintf("issue #%d: comment %d by baton carries no operation marker", num, c.ID))
				continue
			}
			markers[m[1]]++
		}
		if n := count(res, "comment"); n != appComments {
			f.disagree = append(f.disagree, fmt.Sprintf("issue #%d: %d comment requests applied but %d comments by baton", num, n, appComments))
		}
		labels, unsure := map[string]bool{}, map[string]bool{}
		for _, a := range accByRes[res] {
			switch a.op.action {
			case schema.ActionComment:
				f.comments++
				n := markers[a.id]
				delete(markers, a.id)
				switch {
				case n > 1:
					f.duplicates = append(f.duplicates, fmt.Sprintf("comment of operation %s posted %d times on #%d", a.id, n, num))
				case succeeded(a) && n != 1:
					f.disagree = append(f.disagree, fmt.Sprintf("operation %s succeeded but its comment is not on #%d", a.id, num))
				case !succeeded(a) && n != 0 && !undetermined(a):
					f.disagree = append(f.disagree, fmt.Sprintf("operation %s is %s but its comment is on #%d", a.id, status(a), num))
				}
			case schema.ActionAddLabels:
				f.labelOps++
				if succeeded(a) {
					labels[a.op.label] = true
				}
				if undetermined(a) {
					unsure[a.op.label] = true
				}
			case schema.ActionRemoveLabel:
				f.labelOps++
				if succeeded(a) {
					delete(labels, a.op.label)
				}
				if undetermined(a) {
					unsure[a.op.label] = true
				}
			}
		}
		for id, n := range markers {
			f.disagree = append(f.disagree, fmt.Sprintf("issue #%d: %d comments of operation %s, which no client had accepted", num, n, id))
		}
		var want, have []string
		for l := range labels {
			if !unsure[l] {
				want = append(want, l)
			}
		}
		for _, l := range is.Labels {
			if strings.HasPrefix(l, "proof-") && !unsure[l] {
				have = append(have, l)
			}
		}
		slices.Sort(want)
		slices.Sort(have)
		if !slices.Equal(want, have) {
			f.disagree = append(f.disagree, fmt.Sprintf("issue #%d has labels %v; the records say %v", num, have, want))
		}
	}

	// Merges: a pull request merged at most once, and merged exactly when
	// some operation says it succeeded.
	for _, p := range fx.pulls {
		res := fmt.Sprintf("pull_request:%s#%d", repo, p.number)
		n := count(res, "merge")
		pr, err := sim.Pull(fixtureOwner, fixtureRepo, p.number)
		if err != nil {
			f.violate("pull request #%d: %v", p.number, err)
			continue
		}
		ok, unknown := 0, 0
		for _, a := range accByRes[res] {
			if succeeded(a) {
				ok++
			}
			if undetermined(a) {
				unknown++
			}
		}
		switch {
		case n > 1:
			f.duplicates = append(f.duplicates, fmt.Sprintf("pull request #%d merged %d times", p.number, n))
		case n == 1 && pr.Merged:
			f.mergedOnce++
		}
		if pr.Merged != (n == 1) || (ok > 0 && !pr.Merged) || (ok == 0 && pr.Merged && unknown == 0) {
			f.disagree = append(f.disagree, fmt.Sprintf("pull request #%d: merged %v, %d merge requests applied, %d merge operations succeeded", p.number, pr.Merged, n, ok))
		}
	}

	// Ref updates: each applied once (its sha is its own, so every applied
	// update is one succeeded operation), the branch where the last
	// succeeded update put it.
	for _, b := range fx.branches {
		res := fmt.Sprintf("ref:%s:heads/%s", repo, b.name)
		n := count(res, "ref")
		ok, unknown, last := 0, 0, 0
		var maybe []int // steps an undetermined operation may have applied
		for _, a := range accByRes[res] {
			if succeeded(a) {
				ok++
				last = max(last, a.op.step)
			}
			if undetermined(a) {
				unknown++
				maybe = append(maybe, a.op.step)
			}
		}
		f.refUpdates += n
		switch {
		case n > ok+unknown:
			f.duplicates = append(f.duplicates, fmt.Sprintf("branch %s: %d ref updates applied for %d succeeded operations", b.name, n, ok))
		case n < ok:
			f.disagree = append(f.disagree, fmt.Sprintf("branch %s: %d operations succeeded but %d ref updates were applied", b.name, ok, n))
		}
		at := []string{b.chain[last]}
		for _, s := range maybe {
			if s > last {
				at = append(at, b.chain[s])
			}
		}
		if sha, err := sim.Ref(fixtureOwner, fixtureRepo, "heads/"+b.name); err != nil || !slices.Contains(at, sha) {
			f.disagree = append(f.disagree, fmt.Sprintf("branch %s points at %s (%v); its last succeeded update was step %d (%s)", b.name, sha, err, last, b.chain[last]))
		}
	}
	// Commit statuses: for each commit and context, the latest status is
	// the one the last succeeded operation of that context set, with its
	// state — or one a later operation that may have been applied set (a
	// status has no probe: an attempt that ended ambiguously may have been
	// applied whatever its record's outcome).
	for _, c := range fx.commits {
		res := fmt.Sprintf("commit:%s@%s", repo, c)
		sts, err := sim.Statuses(fixtureOwner, fixtureRepo, c) // newest first
		if err != nil {
			f.violate("commit %s: %v", c, err)
			continue
		}
		latest := map[string]ghsim.StatusInfo{}
		for i := len(sts) - 1; i >= 0; i-- {
			latest[sts[i].Context] = sts[i]
		}
		type setter struct {
			a  *accepted
			pl schema.CreateStatusPayload
		}
		byContext := map[string][]setter{}
		for _, a := range accByRes[res] {
			var pl schema.CreateStatusPayload
			if a.op.action != schema.ActionCreateStatus || json.Unmarshal(a.op.payload, &pl) != nil {
				continue
			}
			byContext[pl.Context] = append(byContext[pl.Context], setter{a, pl})
		}
		for ctxName, list := range byContext {
			last := -1
			for i, s := range list {
				if succeeded(s.a) {
					last = i
				}
			}
			st, ok := latest[ctxName]
			var allowed []setter
			if last >= 0 {
				allowed = append(allowed, list[last])
			}
			for _, s := range list[last+1:] {
				if mayHaveApplied(views[s.a.op.seq]) {
					allowed = append(allowed, s)
				}
			}
			good := !ok && last < 0
			for _, s := range allowed {
				if ok && st.Description == s.pl.Description && st.State == s.pl.State {
					good = true
				}
			}
			if !good {
				want := "none"
				if last >= 0 {
					want = fmt.Sprintf("%s (%q, operation %s)", list[last].pl.State, list[last].pl.Description, list[last].a.id)
				}
				have := "none"
				if ok {
					have = fmt.Sprintf("%s (%q)", st.State, st.Description)
				}
				f.disagree = append(f.disagree, fmt.Sprintf("commit %s context %s: latest status %s; the last succeeded operation set %s (%d later ones may have applied)",
					c[:12], ctxName, have, want, len(allowed)-min(last+1, 1)))
			}
		}
	}

	// Per-resource order: the effects on a resource were applied in the
	// order its operations were submitted. An effect is tied to its
	// operation by the request ID its attempt recorded (an answer lost
	// leaves none), a label removal by its name, a comment by its marker, a
	// status by its description (the workload's are unique per commit).
	pos := map[string]int{} // operation ID → position on its resource
	byRequest := map[string]string{}
	for _, list := range accByRes {
		for i, a := range list {
			pos[a.id] = i
			if v := views[a.op.seq]; v != nil {
				for _, at := range v.AttemptLog {
					if !at.Probe && at.RequestID != "" {
						byRequest[at.RequestID] = a.id
					}
				}
			}
		}
	}
	inOrder := func(res, what string, ids []string) {
		for i := 1; i < len(ids); i++ {
			if pos[ids[i]] < pos[ids[i-1]] {
				f.outOfOrder = append(f.outOfOrder, fmt.Sprintf("%s: %s of operation %s (submitted #%d on it) applied after that of operation %s (#%d)",
					res, what, ids[i], pos[ids[i]]+1, ids[i-1], pos[ids[i-1]]+1))
				return
			}
		}
	}
	for res, es := range byResource {
		es = slices.Clone(es)
		sort.Slice(es, func(i, j int) bool { return es[i].Seq < es[j].Seq })
		removals := map[string]string{} // label → remove_label operation
		for _, a := range accByRes[res] {
			if a.op.action == schema.ActionRemoveLabel {
				removals[a.op.label] = a.id
			}
		}
		var ids []string
		for _, e := range es {
			id, ok := byRequest[e.RequestID]
			if !ok && e.Method == "DELETE" && effectKind(e) == "label" {
				id, ok = removals[e.Path[strings.LastIndex(e.Path, "/")+1:]]
			}
			if ok {
				ids = append(ids, id)
			}
		}
		inOrder(res, "request", ids)
	}
	for _, num := range fx.issues {
		is, err := sim.Issue(fixtureOwner, fixtureRepo, num)
		if err != nil {
			continue // reported above
		}
		var ids []string
		for _, c := range is.Comments {
			if m := markerRE.FindStringSubmatch(c.Body); c.ByApp && m != nil {
				if _, ok := pos[m[1]]; ok {
					ids = append(ids, m[1])
				}
			}
		}
		inOrder(fmt.Sprintf("issue:%s#%d", repo, num), "comment", ids)
	}
	for _, c := range fx.commits {
		res := fmt.Sprintf("commit:%s@%s", repo, c)
		byDesc := map[string]string{}
		for _, a := range accByRes[res] {
			var pl schema.CreateStatusPayload
			if json.Unmarshal(a.op.payload, &pl) == nil {
				byDesc[pl.Description] = a.id
			}
		}
		sts, err := sim.Statuses(fixtureOwner, fixtureRepo, c)
		if err != nil {
			continue // reported above
		}
		var ids []string
		for i := len(sts) - 1; i >= 0; i-- { // oldest first
			if id, ok := byDesc[sts[i].Description]; ok {
				ids = append(ids, id)
			}
		}
		inOrder(res, "status", ids)
	}
	for _, o := range f.outOfOrder {
		f.violate("out of order: %s", o)
	}

	for _, d := range f.duplicates {
		f.violate("duplicate: %s", d)
	}
	for _, d := range f.disagree {
		f.violate("record and GitHub disagree: %s", d)
	}

	// No lease left held — of any key, not only the workload's —, nothing
	// dead-lettered.
	held, expired, err := leasesInDatabase(ctx, db)
	if err != nil {
		f.violate("leases: %v", err)
	}
	f.leasesHeld, f.leasesExpired = held, expired
	for _, l := range f.leasesHeld {
		f.violate("lease left held: %s", l)
	}
	dl, err := admin.DeadLetters(ctx, 0, 100)
	if err != nil {
		f.violate("dead letters: %v", err)
	} else {
		for _, d := range dl.DeadLetters {
			f.deadLetters = append(f.deadLetters, fmt.Sprintf("seq %d: operation %s after %d failures: %s", d.Sequence, d.OperationID, d.Failures, d.Reason))
			f.violate("dead letter: seq %d, operation %s, %d failures: %s", d.Sequence, d.OperationID, d.Failures, d.Reason)
		}
	}

	for _, fs := range sim.Faults() {
		f.faults[fs.Kind] += fs.Fired
	}
	return f
}

// leasesInDatabase reads every row of baton's leases table (db is baton's
// database file, opened by the test while the server runs: SQLite lets
// another process read it) and returns the leases still held — not yet
// expired — and how many rows have expired.
func leasesInDatabase(ctx context.Context, db *sqlite.DB) (held []string, expired int, err error) {
	rows, err := db.Query(ctx, `SELECT key, owner, expires_at FROM leases ORDER BY key`)
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	now := time.Now()
	for rows.Next() {
		var (
			key, owner string
			expUs      int64
		)
		if err := rows.Scan(&key, &owner, &expUs); err != nil {
			return nil, 0, err
		}
		if left := time.UnixMicro(expUs).Sub(now); left > 0 {
			held = append(held, fmt.Sprintf("%s held by %s (%.1fs left)", key, owner, left.Seconds()))
		} else {
			expired++
		}
	}
	return held, expired, rows.Err()
}

// mayHaveApplied reports whether an operation that did not succeed may
// still have had its effect: one of its calls never recorded its end, or
// ended in a way that says nothing of whether GitHub applied it.
func mayHaveApplied(v *client.Operation) bool {
	if v == nil {
		return false
	}
	for _, a := range v.AttemptLog {
		if a.Probe {
			continue
		}
		if a.EndedAt.IsZero() {
			return true
		}
		switch a.ErrorCategory {
		case "network", "timeout", "server_error":
			return true
		}
	}
	return false
}
