package coordinator

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/baton-dev/baton/internal/sqlite"
)

// The history check: goroutines in two OS processes (this test and a
// re-executed copy of the test binary) acquire, renew, release, check and
// make fenced writes on a few keys, on one database file. Each operation is
// recorded with call and return times from the wall clock both processes
// share, and the merged history is checked with porcupine against a lease
// model partitioned by key. Independently, every acquisition, release and
// fenced write logs itself in its own transaction, so the log's order is
// the database's commit order; on it the test checks that tokens strictly
// increase per key, that a key never has two holders, and that a fenced
// write lands only under the key's current token.
//
// TTLs are a minute, longer than the run: no lease expires during the
// check, so the model needs no time. Expiry and takeover are checked with
// a fake clock (TestPausedHolder).

const historyChildEnv = "BATON_TEST_LEASE_HISTORY_CHILD"

var linKeys = []string{"issue:octo/app#1", "issue:octo/app#2", "ref:octo/app:heads/main"}

const linGoroutines = 4 // per process

// linConfig is what the parent tells the child.
type linConfig struct {
	DB    string    `json:"db"`
	Out   string    `json:"out"`
	Until time.Time `json:"until"`
	Seed  uint64    `json:"seed"`
}

// linIn and linOut are an operation's input and output, as porcupine sees
// them.
type linIn struct {
	Kind  string `json:"kind"` // acquire, renew, release, fenced, check, read
	Key   string `json:"key"`
	Owner string `json:"owner,omitempty"`
	Token int64  `json:"token,omitempty"`
}

type linOut struct {
	OK     bool   `json:"ok,omitempty"`
	Held   bool   `json:"held,omitempty"`
	Lost   bool   `json:"lost,omitempty"`
	Owner  string `json:"owner,omitempty"`  // acquire: the holder that refused; check: the holder
	Token  int64  `json:"token,omitempty"`  // acquire: the new token; check: the holder's token
	Locked bool   `json:"locked,omitempty"` // check
	Value  int64  `json:"value,omitempty"`  // read: the token of the last fenced write
}

type linOp struct {
	Client int    `json:"client"`
	In     linIn  `json:"in"`
	Out    linOut `json:"out"`
	Call   int64  `json:"call"`
	Return int64  `json:"return"`
}

const linTables = `
CREATE TABLE IF NOT EXISTS lin_log (
	seq   INTEGER PRIMARY KEY AUTOINCREMENT,
	key   TEXT NOT NULL,
	kind  TEXT NOT NULL,
	owner TEXT NOT NULL,
	token INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS lin_state (key TEXT PRIMARY KEY, value INTEGER NOT NULL);`

func linLog(tx *sqlite.Tx, key, kind, owner string, token int64) error {
	_, err := tx.Exec(`INSERT INTO lin_log (key, kind, owner, token) VALUES (?, ?, ?, ?)`, key, kind, owner, token)
	return err
}

// linWorkers runs process proc's goroutines until cfg.Until and returns
// their operations.
func linWorkers(db *sqlite.DB, proc int, cfg linConfig) ([]linOp, error) {
	c, err := New(Config{DB: db})
	if err != nil {
		return nil, err
	}
	var (
		mu   sync.Mutex
		ops  []linOp
		errs []error
		wg   sync.WaitGroup
	)
	for g := range linGoroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := &linWorker{
				c: c, db: db,
				client:   proc*linGoroutines + g,
				owner:    fmt.Sprintf("p%d-g%d", proc, g),
				rnd:      rand.New(rand.NewPCG(cfg.Seed, uint64(proc*linGoroutines+g))),
				released: map[string]*Lease{},
			}
			err := w.run(cfg.Until)
			mu.Lock()
			defer mu.Unlock()
			ops = append(ops, w.ops...)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", w.owner, err))
			}
		}()
	}
	wg.Wait()
	return ops, errors.Join(errs...)
}

type linWorker struct {
	c      *Coordinator
	db     *sqlite.DB
	client int
	owner  string
	rnd    *rand.Rand
	ops    []linOp
	// released is the last lease this worker held of each key.
	released map[string]*Lease
}

const (
	linTTL   = time.Minute
	linThink = 4 * time.Millisecond
)

// do runs one operation and records it. An error that is neither
// lease_held nor lease_lost ends the run: the model has no room for
// operations of unknown outcome.
func (w *linWorker) do(in linIn, fn func() (linOut, error)) (linOut, error) {
	// Think time between operations. It is not a wait for anything: one
	// process's group-commit writer, kept busy without pause, takes the
	// file's write lock again microseconds after each commit and starves
	// the other process's writer (whose busy handler polls every 1–100
	// ms); pauses let the two processes' writes interleave.
	time.Sleep(time.Duration(w.rnd.IntN(int(linThink))))
	call := time.Now().UnixNano()
	out, err := fn()
	ret := time.Now().UnixNano()
	switch {
	case err == nil:
		out.OK = true
	case errors.Is(err, ErrLeaseHeld):
		var held *LeaseHeldError
		errors.As(err, &held)
		out = linOut{Held: true, Owner: held.Owner}
	case errors.Is(err, ErrLeaseLost):
		out = linOut{Lost: true}
	default:
		return out, fmt.Errorf("%s %s: %w", in.Kind, in.Key, err)
	}
	w.ops = append(w.ops, linOp{Client: w.client, In: in, Out: out, Call: call, Return: ret})
	return out, nil
}

func (w *linWorker) run(until time.Time) error {
	ctx := context.Background()
	for time.Now().Before(until) {
		key := linKeys[w.rnd.IntN(len(linKeys))]
		switch r := w.rnd.IntN(10); {
		case r < 2:
			if err := w.check(ctx, key); err != nil {
				return err
			}
			continue
		case r < 3:
			if err := w.read(ctx, key); err != nil {
				return err
			}
			continue
		}
		var l *Lease
		out, err := w.do(linIn{Kind: "acquire", Key: key, Owner: w.owner}, func() (linOut, error) {
			var err error
			l, err = w.c.AcquireWith(ctx, key, w.owner, linTTL, func(tx *sqlite.Tx, l *Lease) error {
				return linLog(tx, key, "acquire", w.owner, l.Token)
			})
			if err != nil {
				return linOut{}, err
			}
			return linOut{Token: l.Token}, nil
		})
		if err != nil {
			return err
		}
		if !out.OK {
			// Someone else holds it: try a forged fence on it now and then.
			if w.rnd.IntN(4) == 0 {
				if err := w.stale(ctx, Fence{Key: key, Owner: w.owner, Token: 1 + w.rnd.Int64N(1<<20)}); err != nil {
					return err
				}
			}
			continue
		}
		for range w.rnd.IntN(5) {
			var err error
			switch w.rnd.IntN(5) {
			case 0:
				err = w.renew(ctx, l)
			case 1:
				err = w.fenced(ctx, l)
			case 2:
				err = w.check(ctx, key)
			case 4: // this owner's earlier lease of the key, or a forged token, while it holds the key
				f := Fence{Key: key, Owner: w.owner, Token: l.Token + 1 + w.rnd.Int64N(1000)}
				if p := w.released[key]; p != nil && w.rnd.IntN(2) == 0 {
					f = p.Fence
				}
				err = w.stale(ctx, f)
			case 3: // the holder itself asks again: refused
				_, err = w.do(linIn{Kind: "acquire", Key: key, Owner: w.owner}, func() (linOut, error) {
					l2, err := w.c.Acquire(ctx, key, w.owner, linTTL)
					if err != nil {
						return linOut{}, err
					}
					return linOut{Token: l2.Token}, nil
				})
			}
			if err != nil {
				return err
			}
		}
		if _, err := w.do(linIn{Kind: "release", Key: key, Owner: w.owner, Token: l.Token}, func() (linOut, error) {
			return linOut{}, w.c.ReleaseWith(ctx, l, func(tx *sqlite.Tx) error {
				return linLog(tx, key, "release", w.owner, l.Token)
			})
		}); err != nil {
			return err
		}
		w.released[key] = l
		if w.rnd.IntN(5) == 0 { // the old holder keeps going after its release
			if err := w.stale(ctx, l.Fence); err != nil {
				return err
			}
		}
	}
	return nil
}

func (w *linWorker) renew(ctx context.Context, l *Lease) error {
	_, err := w.do(linIn{Kind: "renew", Key: l.Key, Owner: l.Owner, Token: l.Token}, func() (linOut, error) {
		return linOut{}, w.c.Renew(ctx, l, linTTL)
	})
	return err
}

func (w *linWorker) fenced(ctx context.Context, l *Lease) error {
	_, err := w.do(linIn{Kind: "fenced", Key: l.Key, Owner: l.Owner, Token: l.Token}, func() (linOut, error) {
		return linOut{}, w.c.Fenced(ctx, l, func(tx *sqlite.Tx) error {
			if _, err := tx.Exec(`INSERT INTO lin_state (key, value) VALUES (?, ?)
				ON CONFLICT (key) DO UPDATE SET value = excluded.value`, l.Key, l.Token); err != nil {
				return err
			}
			return linLog(tx, l.Key, "write", l.Owner, l.Token)
		})
	})
	return err
}

// stale uses a fence that is not (or no longer) the key's lease.
func (w *linWorker) stale(ctx context.Context, f Fence) error {
	l := &Lease{Fence: f, c: w.c}
	switch w.rnd.IntN(3) {
	case 0:
		return w.renew(ctx, l)
	case 1:
		return w.fenced(ctx, l)
	}
	_, err := w.do(linIn{Kind: "release", Key: f.Key, Owner: f.Owner, Token: f.Token}, func() (linOut, error) {
		return linOut{}, w.c.ReleaseWith(ctx, l, func(tx *sqlite.Tx) error {
			return linLog(tx, f.Key, "release", f.Owner, f.Token)
		})
	})
	return err
}

func (w *linWorker) check(ctx context.Context, key string) error {
	_, err := w.do(linIn{Kind: "check", Key: key}, func() (linOut, error) {
		st, err := w.c.Check(ctx, key)
		return linOut{Locked: st.Locked, Owner: st.Owner, Token: st.Token}, err
	})
	return err
}

func (w *linWorker) read(ctx context.Context, key string) error {
	_, err := w.do(linIn{Kind: "read", Key: key}, func() (linOut, error) {
		var v int64
		err := w.db.QueryRow(ctx, `SELECT value FROM lin_state WHERE key = ?`, key).Scan(&v)
		if errors.Is(err, sql.ErrNoRows) {
			err = nil
		}
		return linOut{Value: v}, err
	})
	return err
}

// linState is the model's state of one key.
type linState struct {
	Holder string
	Token  int64
	Max    int64 // greatest token issued
	Value  int64 // token of the last fenced write
}

var leaseModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		for _, op := range history {
			k := op.Input.(linIn).Key
			by[k] = append(by[k], op)
		}
		var out [][]porcupine.Operation
		for _, k := range linKeys {
			out = append(out, by[k])
		}
		return out
	},
	Init: func() any { return linState{} },
	Step: func(state, input, output any) (bool, any) {
		s, in, out := state.(linState), input.(linIn), output.(linOut)
		mine := s.Holder != "" && s.Holder == in.Owner && s.Token == in.Token
		switch in.Kind {
		case "acquire":
			if out.Held {
				return s.Holder != "" && out.Owner == s.Holder, s
			}
			if !out.OK || s.Holder != "" || out.Token <= s.Max {
				return false, s
			}
			return true, linState{Holder: in.Owner, Token: out.Token, Max: out.Token, Value: s.Value}
		case "renew":
			return out.OK == mine && out.Lost == !mine, s
		case "release":
			if out.OK != mine || out.Lost == mine {
				return false, s
			}
			if mine {
				s.Holder, s.Token = "", 0
			}
			return true, s
		case "fenced":
			if out.OK != mine || out.Lost == mine {
				return false, s
			}
			if mine {
				s.Value = in.Token
			}
			return true, s
		case "check":
			return out.OK && out.Locked == (s.Holder != "") && out.Owner == s.Holder && out.Token == s.Token, s
		case "read":
			return out.OK && out.Value == s.Value, s
		}
		return false, s
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(linIn), output.(linOut)
		return fmt.Sprintf("%s(%s,%d) -> %+v", in.Kind, in.Owner, in.Token, out)
	},
	DescribeState: func(state any) string { return fmt.Sprintf("%+v", state.(linState)) },
}

// historyChild is the second process of TestLeaseHistoryLinearizable.
func historyChild() {
	var cfg linConfig
	if err := json.Unmarshal([]byte(os.Getenv(historyChildEnv)), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	db, err := sqlite.Open(context.Background(), cfg.DB, sqlite.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	fmt.Println("ready")
	ops, err := linWorkers(db, 1, cfg)
	if err == nil {
		err = writeOps(cfg.Out, ops)
	}
	err = errors.Join(err, db.Close())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func writeOps(path string, ops []linOp) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for _, op := range ops {
		if err := enc.Encode(op); err != nil {
			return err
		}
	}
	return errors.Join(w.Flush(), f.Close())
}

func readOps(path string) ([]linOp, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var ops []linOp
	dec := json.NewDecoder(f)
	for dec.More() {
		var op linOp
		if err := dec.Decode(&op); err != nil {
			return nil, err
		}
		ops = append(ops, op)
	}
	return ops, nil
}

func TestLeaseHistoryLinearizable(t *testing.T) {
	t.Parallel()
	run := 10 * time.Second
	if testing.Short() {
		run = 3 * time.Second
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "baton.db")
	db := openDB(t, path)
	if err := db.Write(context.Background(), func(tx *sqlite.Tx) error {
		_, err := tx.Exec(linTables)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	cfg := linConfig{DB: path, Out: filepath.Join(dir, "child.jsonl"), Until: time.Now().Add(run), Seed: rand.Uint64()}
	t.Logf("seed %d", cfg.Seed)
	env, _ := json.Marshal(cfg)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), historyChildEnv+"="+string(env))
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	if !sc.Scan() || sc.Text() != "ready" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("child did not start: %q %v", sc.Text(), sc.Err())
	}
	ops, err := linWorkers(db, 0, cfg)
	if err != nil {
		t.Error(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v", err)
	}
	childOps, err := readOps(cfg.Out)
	if err != nil {
		t.Fatal(err)
	}
	if len(childOps) == 0 || len(ops) == 0 {
		t.Fatalf("operations: %d here, %d in the child", len(ops), len(childOps))
	}
	all := append(ops, childOps...)
	counts := map[string]int{}
	for _, op := range all {
		k := op.In.Kind
		switch {
		case op.Out.OK:
			k += ":ok"
		case op.Out.Held:
			k += ":held"
		case op.Out.Lost:
			k += ":lost"
		}
		counts[k]++
	}
	t.Logf("%d operations (%d in the child): %v", len(all), len(childOps), counts)

	checkCommitLog(t, db, all)

	history := make([]porcupine.Operation, len(all))
	for i, op := range all {
		history[i] = porcupine.Operation{ClientId: op.Client, Input: op.In, Output: op.Out, Call: op.Call, Return: op.Return}
	}
	start := time.Now()
	res, info := porcupine.CheckOperationsVerbose(leaseModel, history, time.Minute)
	t.Logf("porcupine: %s in %v", res, time.Since(start).Round(time.Millisecond))
	if res != porcupine.Ok {
		f, err := os.CreateTemp("", "baton-lease-history-*.html")
		if err == nil {
			_ = porcupine.Visualize(leaseModel, info, f)
			f.Close()
			t.Logf("visualization: %s", f.Name())
		}
		t.Fatalf("history is not linearizable against the lease model: %s", res)
	}
}

// checkCommitLog replays the log the operations wrote in their own
// transactions, in commit order.
func checkCommitLog(t *testing.T, db *sqlite.DB, ops []linOp) {
	t.Helper()
	rows, err := db.Query(context.Background(), `SELECT key, kind, owner, token FROM lin_log ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	type holder struct {
		owner string
		token int64
	}
	current := map[string]holder{}
	maxToken := map[string]int64{}
	logged := map[string]int{}
	n := 0
	for rows.Next() {
		var (
			key, kind, owner string
			token            int64
		)
		if err := rows.Scan(&key, &kind, &owner, &token); err != nil {
			t.Fatal(err)
		}
		n++
		cur, held := current[key]
		switch kind {
		case "acquire":
			if held {
				t.Fatalf("entry %d: %s acquired %s (token %d) while %s holds it (token %d)", n, owner, key, token, cur.owner, cur.token)
			}
			if token <= maxToken[key] {
				t.Fatalf("entry %d: token %d for %s not above %d", n, token, key, maxToken[key])
			}
			maxToken[key] = token
			current[key] = holder{owner, token}
		case "release":
			if !held || cur != (holder{owner, token}) {
				t.Fatalf("entry %d: %s released %s with token %d; holder %+v", n, owner, key, token, cur)
			}
			delete(current, key)
		case "write":
			if !held || cur != (holder{owner, token}) {
				t.Fatalf("entry %d: fenced write on %s by %s with token %d landed; holder %+v", n, key, owner, token, cur)
			}
		}
		logged[kind]++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	// Every operation reported done is in the log, and nothing else.
	reported := map[string]int{}
	for _, op := range ops {
		if !op.Out.OK {
			continue
		}
		switch op.In.Kind {
		case "acquire":
			reported["acquire"]++
		case "release":
			reported["release"]++
		case "fenced":
			reported["write"]++
		}
	}
	for _, k := range []string{"acquire", "release", "write"} {
		if reported[k] != logged[k] {
			t.Errorf("%s: %d reported done, %d committed", k, reported[k], logged[k])
		}
	}
}
