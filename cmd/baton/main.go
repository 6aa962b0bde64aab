// Command baton is the one binary of baton: the server (`baton serve`) and
// the clients that talk to it.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

// commands holds the constructors of the subcommands. Each subcommand lives
// in its own file and registers itself from an init function, so the root
// lists exactly the subcommands that exist.
var commands []func() *cobra.Command

func register(c func() *cobra.Command) { commands = append(commands, c) }

// exitError carries a process exit code chosen by a subcommand (for example
// `lease run` exits 3 when the lease is held by another).
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "baton",
		Short: "baton performs GitHub repository mutations durably",
		Long: `baton is a GitHub App that performs repository mutations durably.

Automations ask it to merge, comment, label or update refs; baton runs each
request exactly once, in order per resource, within GitHub's rate limits,
and reports what became of it.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	for _, c := range commands {
		root.AddCommand(c())
	}
	// Bad usage of the root (an unknown command or flag) exits 2, as the
	// subcommands' usage errors do.
	cliUsageErrors(root)
	cliGroup(root)
	return root
}

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	root := newRootCmd()
	root.SetArgs(args)
	err := root.Execute()
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil {
			fmt.Fprintln(os.Stderr, "baton:", ee.err)
		}
		return ee.code
	}
	fmt.Fprintln(os.Stderr, "baton:", err)
	return 1
}
