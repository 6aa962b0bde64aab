package main

import (
	"github.com/spf13/cobra"
)

func init() { register(newCancelCmd) }

func newCancelCmd() *cobra.Command {
	var o *clientOptions
	cmd := &cobra.Command{
		Use:   "cancel OPERATION_ID",
		Short: "Cancel an operation that has not finished",
		Long: `Cancel stops an operation: a queued operation is cancelled at once and never
runs; a running one is asked to stop between attempts (a call to GitHub in
flight is never interrupted, so it may still succeed, and the record says
so). A finished operation cannot be cancelled (already_terminal).`,
		Example: `  baton cancel 3f2a…c9
  baton cancel 3f2a…c9 --json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.client()
			if err != nil {
				return err
			}
			op, err := c.Cancel(cmd.Context(), args[0])
			if err != nil {
				return cliAPIError(err)
			}
			return cliPrintOperation(cmd.OutOrStdout(), op, o.json)
		},
	}
	o = addClientFlags(cmd)
	return cmd
}
