package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/baton-dev/baton/app"
	"github.com/baton-dev/baton/app/client"
	"github.com/baton-dev/baton/schema"
)

func init() { register(newLeaseCmd) }

// Exit statuses of `baton lease run` besides the command's own.
const (
	exitLeaseHeld = 3
	exitLeaseLost = 4
)

// leaseGuardCmd is the hidden command that runs CMD for `lease run` on
// Linux (lease_linux.go).
const leaseGuardCmd = "__lease-guard"

// The bounds of --ttl: those of the API.
const (
	leaseMinTTL = app.MinAPILeaseTTL
	leaseMaxTTL = app.MaxAPILeaseTTL
)

// leaseTTLUsage is the help of --ttl.
const leaseTTLUsage = "time to live, 1s–15m (whole seconds, rounded up)"

// leaseOptions are the flags the lease subcommands share.
type leaseOptions struct {
	owner      string
	ttl        time.Duration
	hasTTL     bool
	leaseToken int64
	*clientOptions
}

// addLeaseFlags registers the flags of one lease subcommand: --owner,
// and --ttl and --lease-token where the subcommand takes them.
func addLeaseFlags(cmd *cobra.Command, ttl, token bool) *leaseOptions {
	o := &leaseOptions{hasTTL: ttl}
	f := cmd.Flags()
	f.StringVar(&o.owner, "owner", "", "who holds the lease, no '/' nor spaces at its ends (env BATON_LEASE_OWNER; default USER@HOST)")
	if ttl {
		f.DurationVar(&o.ttl, "ttl", time.Minute, leaseTTLUsage)
	}
	if token {
		f.Int64Var(&o.leaseToken, "lease-token", 0, "the fencing token acquire printed (env BATON_LEASE_TOKEN)")
	}
	o.clientOptions = addClientFlags(cmd)
	return o
}

// resolve fills the defaults of the owner and the fencing token.
func (o *leaseOptions) resolve(needToken bool) error {
	from := "--owner"
	if o.owner == "" && os.Getenv("BATON_LEASE_OWNER") != "" {
		from = "BATON_LEASE_OWNER"
	}
	o.owner = cliFirst(o.owner, os.Getenv("BATON_LEASE_OWNER"), defaultLeaseOwner())
	// The server takes spaces anywhere; at the ends they only hide who
	// holds the lease ("alice/   ") or make renew and release miss it.
	if strings.TrimSpace(o.owner) != o.owner {
		return cliUsage(fmt.Errorf("%s %q must not be blank, nor begin or end with a space", from, o.owner))
	}
	if needToken && o.leaseToken == 0 {
		if v := os.Getenv("BATON_LEASE_TOKEN"); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return cliUsage(fmt.Errorf("BATON_LEASE_TOKEN=%q is not a fencing token", v))
			}
			o.leaseToken = n
		}
	}
	if needToken && o.leaseToken <= 0 {
		return cliUsage(errors.New("--lease-token is required: the fencing token acquire printed"))
	}
	// Always checked (0 included): the TTL sent is then the TTL the server
	// grants, which `lease run` counts its deadline and renewals from.
	if o.hasTTL && (o.ttl < leaseMinTTL || o.ttl > leaseMaxTTL) {
		return cliUsage(fmt.Errorf("--ttl must be between 1s and 15m, not %v", o.ttl))
	}
	return nil
}

// defaultLeaseOwner is USER@HOST: stable across invocations, so that a
// lease acquired by one command can be renewed and released by the next.
func defaultLeaseOwner() string {
	user := cliFirst(os.Getenv("USER"), os.Getenv("LOGNAME"), "user")
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	owner := strings.ReplaceAll(user+"@"+host, "/", "_")
	if r := []rune(owner); len(r) > 80 { // the server takes at most 100
		owner = string(r[:80])
	}
	return owner
}

func newLeaseCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "lease",
		Short: "Take, renew, release and check leases on resources; run a command under one",
		Long: `A lease makes one holder the only writer of a resource. baton's operations
take a lease on the resource they mutate; a lease taken here shares the
same keys, so while you hold issue:octo/demo#10, operations on that issue
wait (and the other way round).

A KEY is a resource key: TYPE:ID, e.g. issue:octo/demo#10,
pull_request:octo/demo#1, ref:octo/demo:heads/main, repo:octo/demo.

The server holds your lease as ACTOR/OWNER, where ACTOR is your token's
actor and OWNER defaults to USER@HOST; renew and release need the same
owner and the fencing token acquire printed (--lease-token, or
BATON_LEASE_TOKEN).`,
		Example: `  baton lease acquire issue:octo/demo#10 --ttl 5m
  baton lease check issue:octo/demo#10
  baton lease renew issue:octo/demo#10 --lease-token 42 --ttl 5m
  baton lease release issue:octo/demo#10 --lease-token 42
  baton lease run repo:octo/demo --ttl 30s -- ./deploy.sh`,
	}
	cliUsageErrors(cmd)
	cliGroup(cmd)
	cmd.AddCommand(newLeaseAcquireCmd(), newLeaseRenewCmd(), newLeaseReleaseCmd(), newLeaseCheckCmd(), newLeaseRunCmd())
	return cmd
}

// cliPrintGrant prints an acquired or renewed lease.
func cliPrintGrant(w io.Writer, g client.LeaseGrant, asJSON bool) error {
	if asJSON {
		return cliPrintJSON(w, g)
	}
	tw := cliTable(w)
	fmt.Fprintf(tw, "key\t%s\nowner\t%s\nlease token\t%d\nexpires\t%s\n", g.Key, g.Owner, g.Token, cliTime(&g.ExpiresAt))
	return tw.Flush()
}

func newLeaseAcquireCmd() *cobra.Command {
	var o *leaseOptions
	cmd := &cobra.Command{
		Use:   "acquire KEY [--owner OWNER] [--ttl DURATION]",
		Short: "Take a lease; prints the fencing token renew and release need",
		Example: `  baton lease acquire issue:octo/demo#10
  baton lease acquire pull_request:octo/demo#1 --owner deploy-bot --ttl 10m --json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.resolve(false); err != nil {
				return err
			}
			c, err := o.client()
			if err != nil {
				return err
			}
			g, err := c.AcquireLease(cmd.Context(), args[0], o.owner, o.ttl)
			if err != nil {
				return cliAPIError(err)
			}
			return cliPrintGrant(cmd.OutOrStdout(), g, o.json)
		},
	}
	o = addLeaseFlags(cmd, true, false)
	return cmd
}

func newLeaseRenewCmd() *cobra.Command {
	var o *leaseOptions
	cmd := &cobra.Command{
		Use:   "renew KEY --lease-token N [--owner OWNER] [--ttl DURATION]",
		Short: "Renew a lease you hold for --ttl from now (lease_lost if it is no longer yours)",
		Long: `Renew makes the lease you hold expire --ttl from now (default 1m), whatever TTL
it was taken with: a lease acquired with --ttl 10m and renewed without --ttl
has a minute left. It fails with lease_lost if the lease is no longer yours
(it expired, was released or was taken over).`,
		Example: `  baton lease renew issue:octo/demo#10 --lease-token 42 --ttl 5m`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.resolve(true); err != nil {
				return err
			}
			c, err := o.client()
			if err != nil {
				return err
			}
			g, err := c.RenewLease(cmd.Context(), args[0], o.owner, o.leaseToken, o.ttl)
			if err != nil {
				return cliAPIError(err)
			}
			return cliPrintGrant(cmd.OutOrStdout(), g, o.json)
		},
	}
	o = addLeaseFlags(cmd, true, true)
	return cmd
}

func newLeaseReleaseCmd() *cobra.Command {
	var o *leaseOptions
	cmd := &cobra.Command{
		Use:     "release KEY --lease-token N [--owner OWNER]",
		Short:   "Release a lease you hold",
		Example: `  baton lease release issue:octo/demo#10 --lease-token 42`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.resolve(true); err != nil {
				return err
			}
			c, err := o.client()
			if err != nil {
				return err
			}
			if err := c.ReleaseLease(cmd.Context(), args[0], o.owner, o.leaseToken); err != nil {
				return cliAPIError(err)
			}
			// The key the lease was held under, as acquire prints it: the
			// server's spelling (repository names in lower case).
			key := args[0]
			if res, _, err := schema.ParseResourceKey(key); err == nil {
				key = res.Key()
			}
			if o.json {
				return cliPrintJSON(cmd.OutOrStdout(), map[string]any{"key": key, "owner": o.owner, "released": true})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "released %s\n", key)
			return nil
		},
	}
	o = addLeaseFlags(cmd, false, true)
	return cmd
}

func newLeaseCheckCmd() *cobra.Command {
	var o *clientOptions
	cmd := &cobra.Command{
		Use:   "check KEY",
		Short: "Show who holds a lease",
		Long: `Check shows whether KEY is held, by whom (ACTOR/OWNER for a lease taken over
the API, an operation ID for an operation's, mergequeue:WHAT for the merge
queue's on a repo: key), with which fencing token and for how long.`,
		Example: `  baton lease check issue:octo/demo#10`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.client()
			if err != nil {
				return err
			}
			st, err := c.CheckLease(cmd.Context(), args[0])
			if err != nil {
				return cliAPIError(err)
			}
			if o.json {
				return cliPrintJSON(cmd.OutOrStdout(), st)
			}
			tw := cliTable(cmd.OutOrStdout())
			if !st.Locked {
				fmt.Fprintf(tw, "key\t%s\nlocked\tno\n", st.Key)
			} else {
				fmt.Fprintf(tw, "key\t%s\nlocked\tyes\nowner\t%s\nlease token\t%d\nexpires in\t%s\n",
					st.Key, st.Owner, st.Token, st.ExpiresIn().Round(time.Millisecond))
			}
			return tw.Flush()
		},
	}
	o = addClientFlags(cmd)
	return cmd
}

// leaseRunOptions are the flags of `lease run`.
type leaseRunOptions struct {
	wait      bool
	grace     time.Duration
	pollEvery time.Duration
	// ownOwner: the owner is this run's own (USER@HOST:PID), held by no
	// other run.
	ownOwner bool
	*leaseOptions
}

func newLeaseRunCmd() *cobra.Command {
	o := &leaseRunOptions{}
	cmd := &cobra.Command{
		Use:   "run KEY [--ttl DURATION] [--wait] [--owner OWNER] -- CMD [ARGS...]",
		Short: "Run a command while holding a lease, renewing it",
		Long: `Run takes the lease on KEY, runs CMD while holding it, renews it every TTL/3
(each renewal a third of the TTL after the previous one was sent) and releases it
when CMD exits.

CMD finds the lease in its environment: BATON_LEASE_KEY, BATON_LEASE_OWNER
and BATON_LEASE_TOKEN (the fencing token, for systems that check it).
CMD runs in its own process group, so that stopping it stops everything it
started in that group; SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to baton
(Ctrl-C included) are passed on to that group; before CMD starts (while
baton takes the lease, or waits for it) they stop baton, with status 128+N,
and a lease the server granted meanwhile is given back (with --owner, only
one whose grant reached baton).

On Linux, when stdin and stdout are baton's terminal (not in a
pipeline), CMD has the terminal while baton is in its foreground: CMD can
read from it (a prompt, an editor, a shell), and Ctrl-C, Ctrl-\ and Ctrl-Z
go to CMD's group directly. Ctrl-Z (or CMD reading the terminal in the
background) stops baton with CMD, and the shell takes the terminal back;
nobody renews the lease meanwhile, and CMD does not run (what of its group
ignores Ctrl-Z gets SIGSTOP when baton would have stopped CMD short of a
renewal, and goes on with CMD). On fg or bg, CMD
continues once the lease is surely still held, after a renewal if it may
have expired; if the lease was lost, CMD never runs again (SIGTERM,
SIGKILL after --grace) and baton exits 4. Elsewhere, CMD is not in the
terminal's foreground: it should not read from it (that stops CMD, which
Ctrl-C still ends).

On Linux, CMD runs under a small guard process (baton itself), so that
nothing CMD started outlives the lease: when CMD exits, what it left
running in its group gets SIGTERM, and SIGKILL after --grace, before the
lease is released; if baton itself dies (even of SIGKILL), the group is
stopped the same way, since nobody renews the lease any more, and if
baton does not run when it should stop CMD (it was stopped: SIGSTOP, or
Ctrl-Z when CMD does not have the terminal), the guard stops the group
then in its place, and baton exits 4 once it runs again. Processes
that leave the group (setsid, daemons) are not stopped. On other systems
there is no guard: if baton dies, CMD keeps running, and what CMD leaves
behind when it exits gets SIGTERM only.

--ttl is the lease's time to live, sent to the server and granted as
given (1s–15m, whole seconds; default 1m); the lease is renewed every
third of it. When no renewal gets through (the server is away), CMD is
stopped before the lease may expire, early enough that SIGKILL comes
while the lease is still yours: --grace plus min(2s, TTL/4) before the
expiry, but at most a third of the TTL before it. With the defaults, CMD
gets SIGTERM 12s before the lease would expire; keep --grace under a
third of the TTL (less 2s) for the same guarantee.

Exit status:
  CMD's own    CMD ran and exited (128+N when killed by signal N)
  3            the lease is held by another (without --wait)
  4            the lease was lost while CMD ran (a renewal was refused:
               lease lost, token revoked or no longer allowed on KEY; or
               none got through in time): CMD got SIGTERM, and SIGKILL
               after --grace; a lease still held then is released
  1, 2         an error, bad usage

The owner defaults to USER@HOST:PID, unique to this run.`,
		Example: `  baton lease run repo:octo/demo -- ./deploy.sh production
  baton lease run issue:octo/demo#10 --ttl 30s --wait -- sh -c 'echo "token $BATON_LEASE_TOKEN"'`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() != 1 {
				return cliUsage(errors.New("usage: baton lease run KEY [flags] -- CMD [ARGS...]"))
			}
			if o.owner == "" && os.Getenv("BATON_LEASE_OWNER") == "" {
				o.owner = fmt.Sprintf("%s:%d", defaultLeaseOwner(), os.Getpid())
				o.ownOwner = true
			}
			if err := o.resolve(false); err != nil {
				return err
			}
			if o.grace <= 0 || o.pollEvery <= 0 {
				return cliUsage(errors.New("--grace and --poll must be positive"))
			}
			c, err := o.client()
			if err != nil {
				return err
			}
			code, err := runUnderLease(cmd.Context(), c, args[0], args[1:], o, cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr())
			if err != nil || code != 0 {
				return &exitError{code: code, err: err}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&o.wait, "wait", false, "wait for the lease while another holds it (default: exit 3), and for up to 1m while the server does not answer")
	cmd.Flags().DurationVar(&o.grace, "grace", 10*time.Second, "SIGKILL this long after SIGTERM to CMD's group (a lost lease; on Linux also what CMD left when it exited)")
	cmd.Flags().DurationVar(&o.pollEvery, "poll", 500*time.Millisecond, "with --wait, how often to try again")
	// Not addLeaseFlags: another default owner, and no --json (run prints
	// nothing of its own but errors).
	o.leaseOptions = &leaseOptions{hasTTL: true}
	cmd.Flags().StringVar(&o.owner, "owner", "", "who holds the lease, no '/' nor spaces at its ends (env BATON_LEASE_OWNER; default USER@HOST:PID, unique to this run)")
	cmd.Flags().DurationVar(&o.ttl, "ttl", time.Minute, leaseTTLUsage)
	o.clientOptions = addServerFlags(cmd)
	return cmd
}

// runUnderLease is `lease run`: it returns the process exit status and
// an error to print (nil when CMD's own status says it all).
func runUnderLease(ctx context.Context, c *client.Client, key string, argv []string, o *leaseRunOptions,
	stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer signal.Stop(sigs)

	// Take the lease, waiting for it with --wait: while another holds it,
	// and while the server does not answer, for up to leaseWaitServer in a
	// row.
	var g client.LeaseGrant
	announced := false
	var unanswered time.Time // since when the server has not answered
	for {
		asked := time.Now()
		var (
			s   os.Signal
			err error
		)
		g, s, err = leaseAcquireOrSignal(ctx, c, key, o, sigs)
		if s != nil {
			// The acquire was cut short: a signal asks baton to stop
			// before CMD starts. A lease granted all the same is given
			// back: one whose grant came, and one whose answer did not
			// come but that the server holds under this run's own owner
			// (an acquire the server took before baton hung up). Under
			// an --owner of the caller's choosing, such a lease cannot be
			// told from another run's, and stays until it expires.
			// A second signal stops baton without it (the server may not
			// answer at all).
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
			go func() {
				select {
				case <-sigs:
					cancel()
				case <-rctx.Done():
				}
			}()
			token := g.Token
			if err != nil && o.ownOwner && client.CodeOf(err) != client.CodeLeaseHeld {
				if st, cerr := c.CheckLease(rctx, key); cerr == nil && st.Locked && strings.HasSuffix(st.Owner, "/"+o.owner) {
					token, err = st.Token, nil
				}
			}
			if err == nil {
				if err := c.ReleaseLease(rctx, key, o.owner, token); err != nil {
					fmt.Fprintf(stderr, "baton: releasing %s: %v\n", key, cliAPIError(err))
				}
			}
			cancel()
			return 128 + int(s.(syscall.Signal)), fmt.Errorf("%s while taking the lease", s)
		}
		if err == nil {
			g.ExpiresAt = asked.Add(o.ttl) // judged by our clock, from the moment we asked
			break
		}
		every := o.pollEvery
		switch {
		case client.CodeOf(err) == client.CodeLeaseHeld:
			if !o.wait {
				return exitLeaseHeld, cliAPIError(err)
			}
			unanswered = time.Time{}
			if !announced {
				fmt.Fprintf(stderr, "baton: waiting for %s: %v\n", key, cliAPIError(err))
				announced = true
			}
		case o.wait && leaseServerAway(ctx, err):
			// An acquire that took effect unanswered leaves the lease ours
			// under a token we do not know: it is then waited for until it
			// expires, as another's would be.
			switch {
			case unanswered.IsZero():
				unanswered = asked
				fmt.Fprintf(stderr, "baton: waiting for %s: the server does not answer (%v); trying again for up to %s\n",
					key, cliAPIError(err), leaseDuration(leaseWaitServer))
			case time.Since(unanswered) >= leaseWaitServer:
				return 1, fmt.Errorf("the server did not answer for %s: %w", leaseDuration(leaseWaitServer), cliAPIError(err))
			}
			every = max(every, time.Second)
		default:
			return 1, cliAPIError(err)
		}
		t := time.NewTimer(every)
		select {
		case <-ctx.Done():
			t.Stop()
			return 1, ctx.Err()
		case s := <-sigs:
			t.Stop()
			return 128 + int(s.(syscall.Signal)), fmt.Errorf("%s while waiting for the lease", s)
		case <-t.C:
		}
	}

	// releaseWithin releases the lease, waiting for the server at most
	// wait; a lease the server says is lost already is reported only if
	// it was thought held.
	releaseWithin := func(wait time.Duration, mayBeLost bool) {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), wait)
		defer cancel()
		err := c.ReleaseLease(rctx, key, o.owner, g.Token)
		if err != nil && !(mayBeLost && client.CodeOf(err) == client.CodeLeaseLost) {
			fmt.Fprintf(stderr, "baton: releasing %s: %v\n", key, cliAPIError(err))
		}
	}
	release := func() { releaseWithin(10*time.Second, false) }
	// releaseIfHeld releases a lease that may be lost already, saying
	// nothing when it is, and waiting for a server that does not answer
	// (the reason renewals failed, often) a few seconds only.
	releaseIfHeld := func() { releaseWithin(3*time.Second, true) }

	env := append(os.Environ(),
		"BATON_LEASE_KEY="+cliFirst(g.Key, key), // as the server holds it
		"BATON_LEASE_OWNER="+o.owner,
		"BATON_LEASE_TOKEN="+strconv.FormatInt(g.Token, 10),
	)
	lead := leaseStopLead(o.ttl, o.grace)
	child, err := startLeaseChild(argv, env, stdin, stdout, stderr, o.grace, g.ExpiresAt.Add(-lead))
	if err != nil {
		release()
		return 1, fmt.Errorf("start %s: %w", argv[0], err)
	}
	defer child.close()
	stderr = child.stderr // baton's messages while CMD runs
	exited := make(chan error, 1)
	go func() { exited <- child.cmd.Wait() }()

	// Renew every TTL/3 after the previous renewal was asked; the lease is
	// lost when a renewal is refused, or when none succeeded by stopAt:
	// leaseStopLead before the lease may expire, so that CMD is stopped
	// (SIGKILL included) while the lease is still ours, before another
	// holder can take it. While CMD is suspended (stopped with baton, at a
	// terminal) it does not run: the lease may then lapse past stopAt up to
	// its expiry, and CMD continues only once a renewal got through.
	lost := make(chan error, 1)
	renewed := make(chan struct{}, 1) // a renewal got through while suspended
	kick := make(chan struct{}, 1)    // the state changed: look again
	stopRenew := make(chan struct{})
	renewDone := make(chan struct{})
	st := &leaseRunState{stopAt: g.ExpiresAt.Add(-lead), lead: lead, tell: child.deadline}
	// Once CMD exited, a renewal in flight is cut short: the release
	// follows at once.
	renewCtx, cancelRenew := context.WithCancel(ctx)
	defer cancelRenew()
	go func() {
		defer close(renewDone)
		next := time.Now().Add(o.ttl / 3)
		for {
			stopAt, suspended := st.get()
			deadline := stopAt
			if suspended {
				deadline = stopAt.Add(lead)
			}
			wake := next
			if deadline.Before(wake) {
				wake = deadline
			}
			t := time.NewTimer(time.Until(wake))
			select {
			case <-stopRenew:
				t.Stop()
				return
			case <-kick:
				t.Stop()
				// CMD waits to continue until a renewal got through.
				if stopAt, suspended := st.get(); suspended && !time.Now().Before(stopAt) {
					next = time.Now()
				}
				continue
			case <-t.C:
			}
			stopAt, suspended = st.get()
			deadline = stopAt
			if suspended {
				deadline = stopAt.Add(lead)
			}
			now := time.Now()
			if !now.Before(deadline) {
				lost <- fmt.Errorf("no renewal of lease %s succeeded in time (it expires within %s)", key, lead.Round(time.Millisecond))
				return
			}
			if now.Before(next) && (!suspended || now.Before(stopAt)) {
				continue
			}
			asked := time.Now()
			rctx, cancel := context.WithDeadline(renewCtx, deadline)
			_, err := c.RenewLease(rctx, key, o.owner, g.Token, o.ttl)
			cancel()
			select {
			case <-stopRenew:
				return
			default:
			}
			switch {
			case err == nil:
				st.renewed(asked.Add(o.ttl - lead))
				// From when it was asked, as the lease's new expiry is: a
				// slow answer does not eat into the next renewal's time.
				next = asked.Add(o.ttl / 3)
				select {
				case renewed <- struct{}{}:
				default:
				}
			case client.CodeOf(err) == client.CodeLeaseLost:
				lost <- fmt.Errorf("lease %s lost: %v", key, cliAPIError(err))
				return
			case renewalRefusedForGood(err):
				// The server will refuse every renewal (the token was
				// revoked, or may no longer act on the resource): the lease
				// is as good as lost, and CMD must not run on until it
				// expires.
				lost <- fmt.Errorf("renewal of lease %s refused: %v", key, cliAPIError(err))
				return
			default:
				// Unknown: the server may be away for a moment. Try again
				// soon, until the deadline.
				fmt.Fprintf(stderr, "baton: renewing %s: %v\n", key, cliAPIError(err))
				next = time.Now().Add(min(o.ttl/3, time.Second))
			}
		}
	}()
	stopRenewing := func() {
		close(stopRenew)
		cancelRenew()
		<-renewDone
	}
	// tryResume continues a suspended CMD if the lease is still surely
	// ours; if not, the renewal goroutine renews it first.
	var resumeAfter <-chan time.Time
	waitingRenewal := false
	tryResume := func() {
		if !st.resume() {
			waitingRenewal = true
			select {
			case kick <- struct{}{}:
			default:
			}
			return
		}
		waitingRenewal = false
		child.resume()
		select {
		case kick <- struct{}{}:
		default:
		}
	}

	for {
		select {
		case err := <-exited:
			child.exited()
			stopRenewing()
			if child.lapsed() {
				// The guard stopped CMD at the deadline baton had missed
				// (stopped, say): the lease may be another's by now.
				fmt.Fprintf(stderr, "baton: no renewal of lease %s succeeded in time; %s was stopped\n", key, argv[0])
				// Give it back if it is still ours (a renewal may have got
				// through at the last moment): release is fenced by the
				// token, so a lease another holds since is left alone.
				releaseIfHeld()
				return exitLeaseLost, nil
			}
			release()
			return leaseChildExitCode(err)
		case s := <-sigs:
			child.signal(s.(syscall.Signal))
		case s := <-child.stopped:
			// CMD stopped at the terminal (Ctrl-Z): baton's job stops too, as
			// it would have had CMD been in it, and the shell gets the
			// terminal back. Nobody renews the lease while baton is stopped;
			// CMD does not run either.
			st.suspend()
			stopOwnJob(s)
			// Once baton runs again (at once if the stop did not take: an
			// orphaned process group ignores it, as it would Ctrl-Z).
			resumeAfter = time.After(leaseResumeAfter)
		case <-resumeAfter:
			resumeAfter = nil
			tryResume()
		case <-renewed:
			if waitingRenewal {
				tryResume()
			}
		case cause := <-lost:
			fmt.Fprintf(stderr, "baton: %v; stopping %s\n", cause, argv[0])
			child.stop()
			kill := time.NewTimer(child.killAfter)
			select {
			case <-exited:
				kill.Stop()
			case <-kill.C:
				child.kill()
				<-exited
			}
			<-renewDone
			// A lease whose renewals did not get through in time may still
			// be ours: give it back, so that the next holder need not wait
			// for its expiry (fenced by the token: nothing if it is lost).
			releaseIfHeld()
			return exitLeaseLost, nil
		}
	}
}

// renewalRefusedForGood reports whether a renewal's error is a refusal
// that asking again cannot change: the token is not (any more) valid, may
// not act on the resource, or the request itself is refused. A server
// error, a rate limit or no answer at all may pass, and is retried.
func renewalRefusedForGood(err error) bool {
	switch client.CodeOf(err) {
	case client.CodeUnauthorized, client.CodeForbidden, client.CodeNotFound, client.CodeInvalidRequest:
		return true
	}
	return false
}

// leaseAcquireOrSignal asks for the lease, and cuts the request short if
// one of sigs arrives meanwhile (Ctrl-C while the server is slow to
// answer, or does not): it then returns the signal, with the grant if the
// answer came all the same.
func leaseAcquireOrSignal(ctx context.Context, c *client.Client, key string, o *leaseRunOptions,
	sigs <-chan os.Signal) (client.LeaseGrant, os.Signal, error) {
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	type answer struct {
		g   client.LeaseGrant
		err error
	}
	done := make(chan answer, 1)
	go func() {
		g, err := c.AcquireLease(actx, key, o.owner, o.ttl)
		done <- answer{g, err}
	}()
	select {
	case a := <-done:
		return a.g, nil, a.err
	case s := <-sigs:
		cancel()
		a := <-done
		return a.g, s, a.err
	}
}

// leaseResumeAfter is how long after stopping its own job baton goes on
// with a suspended CMD: a stop takes effect long before, so this runs once
// baton was continued (fg, bg) or if the stop was ignored.
const leaseResumeAfter = 200 * time.Millisecond

// leaseRunState is what `lease run`'s loop and its renewals share.
type leaseRunState struct {
	mu sync.Mutex
	// stopAt is when CMD must be stopped if no renewal got through.
	stopAt time.Time
	// suspended: CMD is stopped with baton; it does not run.
	suspended bool
	lead      time.Duration
	// tell gives the guard the deadline in force (stopAt, or the expiry
	// while suspended), so that CMD is stopped even if baton is not
	// there to do it; it is called under mu, so that the guard learns the
	// deadlines in the order they were set.
	tell func(time.Time)
}

// deadline is when CMD must be stopped: stopAt, or while CMD is
// suspended (it does not run), the lease's expiry. Called with mu held.
func (s *leaseRunState) deadline() time.Time {
	if s.suspended {
		return s.stopAt.Add(s.lead)
	}
	return s.stopAt
}

func (s *leaseRunState) get() (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopAt, s.suspended
}

func (s *leaseRunState) renewed(stopAt time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopAt = stopAt
	s.tell(s.deadline())
}

func (s *leaseRunState) suspend() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.suspended = true
	s.tell(s.deadline())
}

// resume ends the suspension if CMD may run: before stopAt.
func (s *leaseRunState) resume() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !time.Now().Before(s.stopAt) {
		return false
	}
	s.suspended = false
	s.tell(s.deadline())
	return true
}

// leaseWaitServer is how long `lease run --wait` waits for a server that
// does not answer (refused or dropped connections, 429, 502, 503, 504).
const leaseWaitServer = time.Minute

// leaseDuration prints d without a zero tail: 1m, not 1m0s.
func leaseDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	return s
}

// leaseServerAway tells whether err says the server did not answer for
// the moment, rather than answered.
func leaseServerAway(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	var e *client.Error
	if errors.As(err, &e) {
		switch e.Status {
		case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			return true
		}
		return false
	}
	var ue *url.Error // the transport's: refused, reset, a timeout
	if !errors.As(err, &ue) {
		return false
	}
	// What no wait mends is said at once: a name that does not resolve, a
	// certificate refused, a URL the transport does not take.
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) && dnsErr.IsNotFound {
		return false
	}
	var certInvalid x509.CertificateInvalidError
	var unknownAuthority x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var certVerify *tls.CertificateVerificationError
	if errors.As(err, &certInvalid) || errors.As(err, &unknownAuthority) || errors.As(err, &hostname) || errors.As(err, &certVerify) {
		return false
	}
	return !strings.Contains(ue.Err.Error(), "unsupported protocol scheme")
}

// leaseStopLead is how long before a lease may expire `lease run` stops
// CMD when no renewal got through: the time CMD's stop may take (SIGTERM,
// SIGKILL --grace later) and a margin for the clocks, min(2s, TTL/4), so
// that nothing of CMD runs once the lease may be another's. At most TTL/3,
// so that renewals have a third of the TTL to get through: a --grace
// longer than that (less the margin) lets CMD outlive the lease by the
// difference.
func leaseStopLead(ttl, grace time.Duration) time.Duration {
	return min(grace+min(2*time.Second, ttl/4), ttl/3)
}

// leaseChild is CMD of `lease run` as started on this system
// (startLeaseChild in lease_linux.go, lease_other.go).
type leaseChild struct {
	cmd *exec.Cmd
	// stderr is where baton writes its messages while CMD runs.
	stderr io.Writer
	// signal passes a signal baton got on to CMD's process group.
	signal func(syscall.Signal)
	// stop is for a lost lease: SIGTERM to CMD's group, SIGKILL after
	// --grace; kill ends it if it has not ended killAfter later.
	stop      func()
	kill      func()
	killAfter time.Duration
	// exited stops what CMD left behind once cmd exited.
	exited func()
	// stopped tells when CMD stopped at the terminal (the signal that
	// stopped it); resume continues it, in the terminal's foreground if
	// baton's job has it. nil and a no-op where CMD is not lent the
	// terminal.
	stopped <-chan syscall.Signal
	resume  func()
	// deadline tells the guard when to stop CMD if baton has not moved
	// the deadline on by then; lapsed, once CMD exited, whether the guard
	// did. A no-op and false where there is no guard.
	deadline func(time.Time)
	lapsed   func() bool
	// close releases what the child holds once it exited.
	close func()
}

// leaseChildExitCode turns the command's end into baton's exit status.
func leaseChildExitCode(err error) (int, error) {
	if err == nil {
		return 0, nil
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal()), nil
		}
		return ee.ExitCode(), nil
	}
	return 1, err
}
