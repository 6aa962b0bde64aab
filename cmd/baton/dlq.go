package main

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/baton-dev/baton/app/client"
)

func init() { register(newDLQCmd) }

func newDLQCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dlq",
		Short: "List and replay dead letters (admin tokens)",
		Long: `Dead letters are operations the queue gave up delivering after repeated
consumer failures (the store unavailable, a bug): their records are
untouched, they wait for an operator. List them, fix the cause, and replay
them (or cancel the operation: its dead letter is then removed within a
minute). Both need an admin token.`,
		Example: `  baton dlq list
  baton dlq replay 17`,
	}
	cliUsageErrors(cmd)
	cliGroup(cmd)
	cmd.AddCommand(newDLQListCmd(), newDLQReplayCmd())
	return cmd
}

func newDLQListCmd() *cobra.Command {
	var (
		after uint64
		limit int
		all   bool
		o     *clientOptions
	)
	cmd := &cobra.Command{
		Use:   "list [--after SEQ] [--limit N] [--all]",
		Short: "List dead letters, oldest first",
		Example: `  baton dlq list
  baton dlq list --all --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 1 || limit > 500 {
				return cliUsage(errors.New("--limit must be between 1 and 500"))
			}
			c, err := o.client()
			if err != nil {
				return err
			}
			var dls []client.DeadLetter
			next := after
			for {
				page, err := c.DeadLetters(cmd.Context(), next, limit)
				if err != nil {
					return cliAPIError(err)
				}
				dls = append(dls, page.DeadLetters...)
				next = page.NextAfter
				if !all || next == 0 {
					break
				}
			}
			if o.json {
				return cliPrintJSON(cmd.OutOrStdout(), client.DeadLetterList{DeadLetters: cliNonNil(dls), NextAfter: next})
			}
			tw := cliTable(cmd.OutOrStdout())
			fmt.Fprintln(tw, "SEQ\tOPERATION\tFAILURES\tTIME\tREASON")
			for _, d := range dls {
				fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\n", d.Sequence, d.OperationID, d.Failures, cliTime(&d.Time), cliText(d.Reason))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if next != 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "more: baton dlq list --after %d (or --all)\n", next)
			}
			return nil
		},
	}
	cmd.Flags().Uint64Var(&after, "after", 0, "list dead letters after this sequence")
	cmd.Flags().IntVar(&limit, "limit", 100, "page size, 1–500")
	cmd.Flags().BoolVar(&all, "all", false, "follow the pages to the end")
	o = addClientFlags(cmd)
	return cmd
}

func newDLQReplayCmd() *cobra.Command {
	var o *clientOptions
	cmd := &cobra.Command{
		Use:   "replay SEQ",
		Short: "Put a dead letter's operation back in the queue",
		Long: `Replay puts the operation of the dead letter at SEQ back in the queue, with
no failures counted, and removes the dead letter. If the operation has
finished since (it was cancelled), nothing is replayed: replay fails with
already_terminal, naming the operation and its status, and removes the
dead letter; so it does, with not_found, when the operation's record is
gone (deleted after the retention).`,
		Example: `  baton dlq replay 17`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			seq, err := strconv.ParseUint(args[0], 10, 64)
			if err != nil || seq == 0 {
				return cliUsage(fmt.Errorf("SEQ must be a dead letter's sequence number, not %q", args[0]))
			}
			c, err := o.client()
			if err != nil {
				return err
			}
			dl, err := c.ReplayDeadLetter(cmd.Context(), seq)
			if err != nil {
				return cliAPIError(err)
			}
			if o.json {
				return cliPrintJSON(cmd.OutOrStdout(), dl)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "replayed dead letter %d: operation %s is queued again\n", dl.Sequence, dl.OperationID)
			return nil
		},
	}
	o = addClientFlags(cmd)
	return cmd
}
