package main

import (
	"github.com/spf13/cobra"
)

func init() { register(newStatusCmd) }

func newStatusCmd() *cobra.Command {
	var wait *cliOptionalDuration
	var o *clientOptions
	cmd := &cobra.Command{
		Use:   "status OPERATION_ID [--wait[=DURATION]]",
		Short: "Show an operation's status",
		Long: `Status prints an operation as the server has it: status, attempts, outcome,
the last error and the result.

With --wait it first waits until the operation is terminal (succeeded,
failed or cancelled); --wait=DURATION waits at most that long (--wait=0s
not at all) and then prints the operation as it stands. A non-admin token sees only its own
actor's operations, on the installations it is bound to. The table shows
control characters of what it prints (a last error in GitHub's words, say)
as escapes such as \x1b or \n; --json gives the text as it is.

` + waitHelp,
		Example: `  baton status 3f2a…c9
  baton status 3f2a…c9 --wait
  baton status 3f2a…c9 --wait=30s --json | jq -r .status`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.client()
			if err != nil {
				return err
			}
			if wait.set {
				op, err := wait.wait(cmd.Context(), c, args[0])
				if err != nil {
					return cliAPIError(err)
				}
				return cliWaitOutcome(cmd.OutOrStdout(), op, o.json)
			}
			op, err := c.Get(cmd.Context(), args[0])
			if err != nil {
				return cliAPIError(err)
			}
			return cliPrintOperation(cmd.OutOrStdout(), op, o.json)
		},
	}
	wait = addWaitFlag(cmd, "wait until the operation is terminal (optionally at most DURATION: --wait=30s)")
	o = addClientFlags(cmd)
	return cmd
}
