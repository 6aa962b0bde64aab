package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/spf13/cobra"

	"github.com/baton-dev/baton/app/client"
	"github.com/baton-dev/baton/schema"
)

// The client subcommands (submit, status, cancel, ops, dlq, lease, bench)
// talk to a running server. They share these flags:
//
//	--server URL   the server (env BATON_SERVER; default http://127.0.0.1:8080)
//	--token TOKEN  the API token (env BATON_TOKEN; prefer the environment:
//	               a flag is visible to other users in ps)
//	--json         print JSON instead of a table (not `lease run`)
//
// Exit status: 0 success, 1 an error (the API's message on stderr), 2 bad
// usage; `lease run` adds 3 (held by another) and 4 (lease lost).

const cliDefaultServer = "http://127.0.0.1:8080"

// clientOptions are the flags every client subcommand takes.
type clientOptions struct {
	server string
	token  string
	json   bool
}

// addClientFlags registers --server, --token and --json on cmd.
func addClientFlags(cmd *cobra.Command) *clientOptions {
	o := addServerFlags(cmd)
	cmd.Flags().BoolVar(&o.json, "json", false, "print JSON instead of a table")
	return o
}

// addServerFlags registers --server and --token on cmd, for a subcommand
// that prints nothing --json could shape (`lease run`).
func addServerFlags(cmd *cobra.Command) *clientOptions {
	o := &clientOptions{}
	f := cmd.Flags()
	f.StringVar(&o.server, "server", "", "baton server URL (env BATON_SERVER; default "+cliDefaultServer+")")
	f.StringVar(&o.token, "token", "", "API token (env BATON_TOKEN, preferred: flags show in ps)")
	cliUsageErrors(cmd)
	return o
}

// client returns an API client for the flags and environment.
func (o *clientOptions) client(extra ...client.Option) (*client.Client, error) {
	server := cliFirst(o.server, os.Getenv("BATON_SERVER"), cliDefaultServer)
	token := cliFirst(o.token, os.Getenv("BATON_TOKEN"))
	opts := append([]client.Option{client.WithToken(token), client.WithUserAgent("baton-cli")}, extra...)
	c, err := client.New(server, opts...)
	if err != nil {
		return nil, cliUsage(err)
	}
	return c, nil
}

// cliFirst returns the first non-empty string.
func cliFirst(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}

// cliUsage marks err as a usage error: exit status 2.
func cliUsage(err error) error { return &exitError{code: 2, err: err} }

// cliUsageErrors makes flag errors and wrong arguments of cmd exit with 2.
func cliUsageErrors(cmd *cobra.Command) {
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return cliUsage(err) })
	if args := cmd.Args; args != nil {
		cmd.Args = func(c *cobra.Command, a []string) error {
			if err := args(c, a); err != nil {
				return cliUsage(err)
			}
			return nil
		}
	}
}

// cliGroup makes a command that only groups subcommands behave like the
// root: alone it prints its help, and an unknown subcommand is a usage
// error (exit 2), not help and exit 0 — a script running "baton lease
// aquire … && deploy" must not deploy without the lease.
func cliGroup(cmd *cobra.Command) {
	cmd.RunE = func(c *cobra.Command, _ []string) error { return c.Help() }
	cmd.Args = func(c *cobra.Command, args []string) error {
		if len(args) > 0 {
			return cliUsage(fmt.Errorf("unknown command %q for %q (see %s --help)", args[0], c.CommandPath(), c.CommandPath()))
		}
		return nil
	}
}

// cliAPIError words an error of the API for the terminal: the message and
// the code, e.g. "operation not found (not_found)", and the operation an
// idempotency_conflict names. An operation ID that is not one is bad
// usage (exit 2).
func cliAPIError(err error) error {
	if errors.Is(err, client.ErrInvalidOperationID) {
		return cliUsage(err)
	}
	var ce *client.Error
	if errors.As(err, &ce) && ce.Code != "" {
		// The operation is named once: some messages name it already.
		if id, ok := ce.Details["operationId"].(string); ok && id != "" && !strings.Contains(ce.Message, id) {
			return fmt.Errorf("%s (%s): operation %s", ce.Message, ce.Code, id)
		}
		return fmt.Errorf("%s (%s)", ce.Message, ce.Code)
	}
	return err
}

// cliPrintJSON writes v as indented JSON.
func cliPrintJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// cliTable returns a tabwriter for human tables.
func cliTable(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0) }

// cliText makes s safe to print in a human table: control characters
// (escape sequences, newlines, tabs, C1 controls) and bidirectional
// overrides are written as Go escapes (\x1b, \n, \u202e). A last error's
// message is GitHub's text, or that of whatever answers in its place, and
// the result is what the action got back: printed as they came, an escape
// sequence in them would drive the operator's terminal (retitle it, clear
// it, rewrite the lines above), and a newline or tab would forge rows and
// columns of the table.
func cliText(s string) string {
	if strings.IndexFunc(s, cliUnsafeRune) < 0 {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if cliUnsafeRune(r) {
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func cliUnsafeRune(r rune) bool {
	return unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r)
}

// cliTime formats a time for tables: RFC 3339 in UTC, or "-".
func cliTime(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// cliPrintOperation prints one operation as a table of fields, or JSON.
func cliPrintOperation(w io.Writer, op client.Operation, asJSON bool) error {
	if asJSON {
		return cliPrintJSON(w, op)
	}
	tw := cliTable(w)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s\t%s\n", k, cliText(v))
		}
	}
	row("operation", op.OperationID)
	row("status", string(op.Status))
	row("action", op.Action)
	row("resource", op.ResourceKey)
	row("actor", op.Actor)
	row("idempotency key", op.IdempotencyKey)
	row("correlation id", op.CorrelationID)
	if op.InstallationID != 0 {
		row("installation", fmt.Sprint(op.InstallationID))
	}
	row("attempts", fmt.Sprintf("%d of %d", op.Attempts, op.MaxAttempts))
	row("created", cliTime(&op.CreatedAt))
	row("updated", cliTime(&op.UpdatedAt))
	if op.StartedAt != nil {
		row("started", cliTime(op.StartedAt))
	}
	if op.CompletedAt != nil {
		row("completed", cliTime(op.CompletedAt))
	}
	if op.NextAttemptAt != nil {
		row("next attempt", cliTime(op.NextAttemptAt))
	}
	row("outcome", string(op.Outcome))
	if op.CancellationRequested {
		row("cancellation", "requested")
	}
	if dl := op.DeadLetter; dl != nil {
		v := fmt.Sprintf("sequence %d, after %d failures, %s; waits for baton dlq replay %d or a cancel", dl.Sequence, dl.Failures, cliTime(&dl.Time), dl.Sequence)
		if dl.Reason != "" {
			v += " (last failure: " + dl.Reason + ")"
		}
		row("dead letter", v)
	}
	if op.LastErrorCategory != "" {
		row("last error", op.LastErrorCategory+": "+op.LastErrorMessage)
	}
	if r := strings.TrimSpace(string(op.Result)); r != "" && r != "{}" {
		row("result", r)
	}
	return tw.Flush()
}

// cliOptionalDuration is a flag that may be given alone (--wait) or with a
// value (--wait=2m): alone it means "no limit"; --wait=0s waits for
// nothing (the operation as it stands).
type cliOptionalDuration struct {
	set       bool
	unlimited bool
	d         time.Duration
}

func (o *cliOptionalDuration) String() string {
	if !o.set {
		return ""
	}
	if o.unlimited {
		return "unlimited"
	}
	return o.d.String()
}

func (o *cliOptionalDuration) Set(s string) error {
	o.set = true
	if s == "" || s == "unlimited" {
		o.unlimited, o.d = true, 0
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return fmt.Errorf("%q is not a duration such as 30s or 5m", s)
	}
	o.unlimited, o.d = false, d
	return nil
}

// wait waits for operation id as the flag says: without limit, at most
// its duration, or (--wait=0s) not at all.
func (o *cliOptionalDuration) wait(ctx context.Context, c *client.Client, id string) (client.Operation, error) {
	if !o.unlimited && o.d == 0 {
		return c.Get(ctx, id)
	}
	return c.Wait(ctx, id, o.d)
}

func (o *cliOptionalDuration) Type() string { return "duration" }

// Exit statuses of a client command that waited for an operation
// (--wait): 0 when it succeeded.
const (
	// exitNotSucceeded: the operation ended failed or cancelled.
	exitNotSucceeded = 4
	// exitStillRunning: --wait=DURATION ran out before the operation ended.
	exitStillRunning = 5
	// exitDeadLettered: the operation is in the dead-letter stream, waiting
	// for an operator to replay or cancel it.
	exitDeadLettered = 6
)

// waitHelp is what --help says about the exit status after --wait.
const waitHelp = `With --wait the exit status tells the outcome, for scripts: 0 succeeded,
4 failed or cancelled, 5 not finished when --wait=DURATION ran out, 6 not
finished and in the dead-letter stream, where it waits for an admin to
replay it (baton dlq replay SEQ) or for you to cancel it (the operation is
printed in every case). A server that stops answering during the wait (a
restart), or whose reverse proxy answers 502, 503 or 504 meanwhile, is
waited for, up to two minutes.`

// cliWaitOutcome prints op and turns the outcome of a --wait into the exit
// status: a script that waited for an operation can tell from the exit
// status alone whether it was carried out.
func cliWaitOutcome(w io.Writer, op client.Operation, asJSON bool) error {
	if err := cliPrintOperation(w, op, asJSON); err != nil {
		return err
	}
	switch {
	case op.Status == schema.StatusSucceeded:
		return nil
	case op.Status.Terminal():
		return &exitError{code: exitNotSucceeded, err: fmt.Errorf("operation %s ended %s", op.OperationID, op.Status)}
	case op.DeadLetter != nil:
		return &exitError{code: exitDeadLettered, err: fmt.Errorf("operation %s is %s and in the dead-letter stream: an admin can replay it (baton dlq replay %d), or cancel it",
			op.OperationID, op.Status, op.DeadLetter.Sequence)}
	default:
		return &exitError{code: exitStillRunning, err: fmt.Errorf("operation %s is still %s: the wait ran out", op.OperationID, op.Status)}
	}
}

// addWaitFlag registers --wait[=DURATION] on cmd. A duration given after a
// space (--wait 30s) would be taken for an argument: cmd's argument check
// then says to write --wait=30s.
func addWaitFlag(cmd *cobra.Command, usage string) *cliOptionalDuration {
	w := &cliOptionalDuration{}
	f := cmd.Flags().VarPF(w, "wait", "", usage)
	f.NoOptDefVal = "unlimited"
	if check := cmd.Args; check != nil {
		cmd.Args = func(c *cobra.Command, args []string) error {
			err := check(c, args)
			if err != nil && w.set && len(args) > 0 {
				if _, perr := time.ParseDuration(args[len(args)-1]); perr == nil {
					return fmt.Errorf("give the duration with '=': --wait=%s", args[len(args)-1])
				}
			}
			return err
		}
	}
	return w
}
