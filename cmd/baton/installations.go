package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

func init() { register(newInstallationsCmd) }

func newInstallationsCmd() *cobra.Command {
	var o *clientOptions
	cmd := &cobra.Command{
		Use:   "installations",
		Short: "List the App's installations baton knows, with their repositories",
		Long: `List the installations of the GitHub App that baton knows (kept by
webhooks and resynced from GitHub every hour), with their repositories and
whether they are suspended. A token sees the installations it may act on; an
admin token sees all.`,
		Example: `  baton installations
  baton installations --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := o.client()
			if err != nil {
				return err
			}
			list, err := c.Installations(cmd.Context())
			if err != nil {
				return cliAPIError(err)
			}
			if o.json {
				return cliPrintJSON(cmd.OutOrStdout(), map[string]any{"installations": list})
			}
			tw := cliTable(cmd.OutOrStdout())
			fmt.Fprintln(tw, "ID\tACCOUNT\tSUSPENDED\tREPOSITORIES")
			for _, in := range list {
				fmt.Fprintf(tw, "%d\t%s\t%v\t%s\n", in.ID, in.Account, in.Suspended, strings.Join(in.Repositories, ", "))
			}
			return tw.Flush()
		},
	}
	o = addClientFlags(cmd)
	return cmd
}
