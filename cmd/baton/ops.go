package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/baton-dev/baton/app/client"
	"github.com/baton-dev/baton/schema"
)

func init() { register(newOpsCmd) }

type opsOptions struct {
	status, action, resource, actor, cursor string
	limit                                   int
	all                                     bool
	*clientOptions
}

func newOpsCmd() *cobra.Command {
	o := &opsOptions{}
	cmd := &cobra.Command{
		Use:   "ops [--status STATUS] [--action ACTION] [--resource TYPE|TYPE:ID|ID] [--all]",
		Short: "List operations, newest first",
		Long: `Ops lists operations, newest first, one page at a time (--limit, default 50);
when there are more it prints the --cursor of the next page on stderr.
--all follows the pages to the end. A non-admin token lists only its own
actor's operations, on the installations it is bound to; an admin token
lists everyone's, or one actor's with --actor.

--resource takes a resource type (issue), a type and an ID
(issue:octo/demo#10), or an ID alone, of any type (octo/demo#10,
octo/demo:heads/main): a value whose part before the first ':' is not a
resource type is an ID.`,
		Example: `  baton ops
  baton ops --status queued --resource issue:octo/demo#10
  baton ops --action github.pulls.merge --all --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runOps(cmd.Context(), o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.status, "status", "", "queued, running, succeeded, failed or cancelled")
	f.StringVar(&o.action, "action", "", "only this action")
	f.StringVar(&o.resource, "resource", "", "only this resource type (TYPE), resource (TYPE:ID) or resource ID of any type (ID)")
	f.StringVar(&o.actor, "actor", "", "only this actor (admin tokens)")
	f.IntVar(&o.limit, "limit", 50, "page size, 1–500")
	f.StringVar(&o.cursor, "cursor", "", "continue from this cursor")
	f.BoolVar(&o.all, "all", false, "follow the pages to the end")
	o.clientOptions = addClientFlags(cmd)
	return cmd
}

func runOps(ctx context.Context, o *opsOptions, stdout, stderr io.Writer) error {
	if o.limit < 1 || o.limit > 500 {
		return cliUsage(errors.New("--limit must be between 1 and 500"))
	}
	lo := client.ListOptions{Status: o.status, Action: o.action, Actor: o.actor, Limit: o.limit, Cursor: o.cursor}
	if o.resource != "" {
		lo.ResourceType, lo.ResourceID = opsResource(o.resource)
	}
	c, err := o.client()
	if err != nil {
		return err
	}
	var ops []client.Operation
	next := ""
	for {
		page, err := c.List(ctx, lo)
		if err != nil {
			return cliAPIError(err)
		}
		ops = append(ops, page.Operations...)
		next = page.NextCursor
		if !o.all || next == "" {
			break
		}
		lo.Cursor = next
	}
	if o.json {
		return cliPrintJSON(stdout, client.OperationList{Operations: cliNonNil(ops), NextCursor: next})
	}
	tw := cliTable(stdout)
	fmt.Fprintln(tw, "OPERATION\tSTATUS\tACTION\tRESOURCE\tACTOR\tATTEMPTS\tCREATED")
	for _, op := range ops {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d/%d\t%s\n", cliText(op.OperationID), cliText(string(op.Status)), cliText(op.Action),
			cliText(op.ResourceKey), cliText(op.Actor), op.Attempts, op.MaxAttempts, cliTime(&op.CreatedAt))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if next != "" {
		fmt.Fprintf(stderr, "more: baton ops --cursor %s (or --all)\n", next)
	}
	return nil
}

// opsResource splits --resource into a type and an ID: TYPE, TYPE:ID, or
// an ID alone when what precedes the first ':' (all of it, without one)
// is not a resource type, as in octo/demo#1 or octo/demo:heads/main.
func opsResource(v string) (typ, id string) {
	t, rest, _ := strings.Cut(v, ":")
	switch t {
	case schema.ResourcePullRequest, schema.ResourceIssue, schema.ResourceRef, schema.ResourceCommit, schema.ResourceRepo:
		return t, rest
	}
	return "", v
}

// cliNonNil returns s, or an empty slice for nil (so JSON shows []).
func cliNonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
