package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/baton-dev/baton/app/client"
)

func init() { register(newQueueCmd) }

func newQueueCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "queue",
		Short: "Show and repair a repository's merge queue",
		Long: `baton's merge queue merges a repository's pull requests one at a time, in
order, each at the head its checks passed on. A pull request joins with the
label baton:queue (or a "/baton queue" comment from someone with write
permission) and leaves when the label is removed, on "/baton dequeue", when
it is closed, when it merges, or when a required check fails (it bounces,
with a comment saying why).

These commands show a queue, its event log and its audit log, and repair it
from GitHub on demand. The token must be allowed on the repository's
installation.`,
		Example: `  baton queue show octo/app
  baton queue events octo/app --json
  baton queue reconcile octo/app`,
	}
	cliUsageErrors(cmd)
	cliGroup(cmd)
	cmd.AddCommand(newQueueShowCmd(), newQueueEventsCmd(), newQueueAuditCmd(), newQueueReconcileCmd())
	return cmd
}

// queueRepo reads the OWNER/REPO argument.
func queueRepo(arg string) (owner, repo string, err error) {
	owner, repo, ok := strings.Cut(arg, "/")
	if !ok || owner == "" || repo == "" || strings.Contains(repo, "/") {
		return "", "", cliUsage(fmt.Errorf("want OWNER/REPO, not %q", arg))
	}
	return owner, repo, nil
}

// queueCmd builds a subcommand that takes OWNER/REPO and the client flags.
func queueCmd(use, short, long, example string, run func(cmd *cobra.Command, c *client.Client, o *clientOptions, owner, repo string) error) *cobra.Command {
	var o *clientOptions
	cmd := &cobra.Command{
		Use:     use + " OWNER/REPO",
		Short:   short,
		Long:    long,
		Example: example,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			owner, repo, err := queueRepo(args[0])
			if err != nil {
				return err
			}
			c, err := o.client()
			if err != nil {
				return err
			}
			if err := run(cmd, c, o, owner, repo); err != nil {
				return cliAPIError(err)
			}
			return nil
		},
	}
	o = addClientFlags(cmd)
	return cmd
}

func newQueueShowCmd() *cobra.Command {
	return queueCmd("show", "Show a repository's merge queue, in order",
		`Show lists the pull requests in the queue, the next to merge first: the
head each is tested at, its status (queued, evaluating, gate_passed, or
bounced) and its gate (the required checks it waits for, or which failed).`,
		`  baton queue show octo/app
  baton queue show octo/app --json`,
		func(cmd *cobra.Command, c *client.Client, o *clientOptions, owner, repo string) error {
			s, err := c.Queue(cmd.Context(), owner, repo)
			if err != nil {
				return err
			}
			if o.json {
				return cliPrintJSON(cmd.OutOrStdout(), s)
			}
			return printQueue(cmd.OutOrStdout(), s)
		})
}

func printQueue(w io.Writer, s client.QueueState) error {
	queued := 0
	for _, e := range s.Entries {
		if e.Position > 0 {
			queued++
		}
	}
	fmt.Fprintf(w, "%s: %d in queue\n", s.Repository, queued)
	if len(s.Entries) == 0 {
		return nil
	}
	tw := cliTable(w)
	fmt.Fprintln(tw, "POS\tPR\tSHA\tSTATUS\tGATE\tQUEUED\tDETAIL")
	for _, e := range s.Entries {
		pos := "-"
		if e.Position > 0 {
			pos = fmt.Sprint(e.Position)
		}
		detail := e.GateDetail
		if e.BounceReason != "" {
			detail = e.BounceReason
		}
		if e.MergeOperationID != "" && e.Status == "gate_passed" {
			detail = "merging: operation " + e.MergeOperationID
		}
		fmt.Fprintf(tw, "%s\t#%d\t%s\t%s\t%s\t%s\t%s\n", pos, e.PRNumber, cliText(cliShortSHA(e.PRSHA)), cliText(e.Status),
			cliText(cliFirst(e.GateResult, "-")), cliTime(&e.QueuedAt), cliText(detail))
	}
	return tw.Flush()
}

func cliShortSHA(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	return sha
}

func newQueueEventsCmd() *cobra.Command {
	return queueCmd("events", "Show a merge queue's event log, oldest first",
		`Events lists the last 100 events the queue acted on (webhooks, outcomes of
its merges, reconciles), oldest first, with what it did about each.`,
		`  baton queue events octo/app`,
		func(cmd *cobra.Command, c *client.Client, o *clientOptions, owner, repo string) error {
			ev, err := c.QueueEvents(cmd.Context(), owner, repo)
			if err != nil {
				return err
			}
			if o.json {
				return cliPrintJSON(cmd.OutOrStdout(), ev)
			}
			tw := cliTable(cmd.OutOrStdout())
			fmt.Fprintln(tw, "TIME\tEVENT\tACTION\tPR\tDELIVERY\tDETAILS")
			for _, e := range ev.Events {
				pr := "-"
				if e.PRNumber > 0 {
					pr = fmt.Sprintf("#%d", e.PRNumber)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", cliTime(&e.At), cliText(e.Event), cliText(cliFirst(e.Action, "-")), pr,
					cliText(cliFirst(e.DeliveryID, "-")), cliText(e.Details))
			}
			return tw.Flush()
		})
}

func newQueueAuditCmd() *cobra.Command {
	return queueCmd("audit", "Show a merge queue's audit log, oldest first",
		`Audit lists the last 200 changes of the queue, oldest first: join, leave,
reevaluate, gate_success, gate_failure, merge and bounce, with the pull
request and the head they concern.`,
		`  baton queue audit octo/app`,
		func(cmd *cobra.Command, c *client.Client, o *clientOptions, owner, repo string) error {
			a, err := c.QueueAudit(cmd.Context(), owner, repo)
			if err != nil {
				return err
			}
			if o.json {
				return cliPrintJSON(cmd.OutOrStdout(), a)
			}
			tw := cliTable(cmd.OutOrStdout())
			fmt.Fprintln(tw, "TIME\tACTION\tPR\tSHA\tDETAIL")
			for _, r := range a.Audit {
				fmt.Fprintf(tw, "%s\t%s\t#%d\t%s\t%s\n", cliTime(&r.At), cliText(r.Action), r.PRNumber, cliText(cliFirst(cliShortSHA(r.SHA), "-")), cliText(r.Detail))
			}
			return tw.Flush()
		})
}

func newQueueReconcileCmd() *cobra.Command {
	return queueCmd("reconcile", "Repair a merge queue from GitHub now",
		`Reconcile re-derives the queue from GitHub (open pull requests carrying
the label, at their current heads), re-reads pending gates, clears bounced
entries and takes over a repository lease left by a crashed holder, as the
server does as it starts and every 5 minutes. While an event of the repository is being
handled it waits up to 5 seconds for its turn, then fails with lease_held;
when GitHub cannot be read it fails naming GitHub's answer (HTTP 503 with
Retry-After while GitHub is away or limits baton, 502 when it refuses the
App). Try again. A reconcile reads from GitHub on the installation's hourly
budget, so one token reconciles a repository at most once a minute
(rate_limited otherwise, saying when to ask again).`,
		`  baton queue reconcile octo/app`,
		func(cmd *cobra.Command, c *client.Client, o *clientOptions, owner, repo string) error {
			r, err := c.ReconcileQueue(cmd.Context(), owner, repo)
			if err != nil {
				return err
			}
			if o.json {
				return cliPrintJSON(cmd.OutOrStdout(), r)
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "reconciled %s: %d in queue\n", r.Repository, r.Entries)
			if l := r.StaleLease; l != nil {
				dead := ""
				if l.Dead {
					dead = ", its holder is gone"
				}
				fmt.Fprintf(w, "took over the repository lease of %s (expired %.0fs%s)\n", l.Owner, l.ExpiredForSeconds, dead)
			}
			for _, row := range []struct {
				what string
				prs  []int
			}{{"joined", r.Joined}, {"left", r.Left}, {"merged", r.Merged}, {"re-evaluated", r.Reevaluated},
				{"bounced", r.Bounced}, {"bounced entries cleared", r.BouncedCleared}, {"label removal asked again", r.LabelRemovals}} {
				if len(row.prs) == 0 {
					continue
				}
				var ns []string
				for _, n := range row.prs {
					ns = append(ns, fmt.Sprintf("#%d", n))
				}
				fmt.Fprintf(w, "%s: %s\n", row.what, strings.Join(ns, ", "))
			}
			return nil
		})
}
