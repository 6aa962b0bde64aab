package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/baton-dev/baton/app"
	"github.com/baton-dev/baton/internal/sqlite"
)

func init() { register(newTokenCmd) }

// tokenDatabaseFile is the database inside the data directory: the one
// `baton serve` keeps its records, leases and tokens in.
const tokenDatabaseFile = "baton.db"

// tokenDataDir is the --data flag of the token subcommands.
type tokenDataDir struct {
	dir  string
	json bool
	// created is set by open when it made a new database: a mistyped
	// --data would otherwise go unnoticed.
	created string
}

func addTokenDataFlags(cmd *cobra.Command) *tokenDataDir {
	d := &tokenDataDir{}
	cmd.Flags().StringVar(&d.dir, "data", "", "data directory of the server (env BATON_DATA; default ./baton-data)")
	cmd.Flags().BoolVar(&d.json, "json", false, "print JSON instead of a table")
	cliUsageErrors(cmd)
	return d
}

// open opens the token store of the data directory. The server may be
// running on it: SQLite serializes the writers.
func (d *tokenDataDir) open(ctx context.Context, create bool) (*app.TokenStore, func(), error) {
	dir := cliFirst(d.dir, os.Getenv("BATON_DATA"), "baton-data")
	path := filepath.Join(dir, tokenDatabaseFile)
	if _, err := os.Stat(path); err != nil {
		if !create || !errors.Is(err, os.ErrNotExist) {
			return nil, nil, fmt.Errorf("no baton database at %s (is --data right?)", path)
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, nil, err
		}
		d.created = path
	}
	// The server's writer may hold the database's write lock most of the
	// time under heavy load; wait for a turn longer than a server would.
	db, err := sqlite.Open(ctx, path, sqlite.Options{BusyTimeout: time.Minute})
	if err != nil {
		// Name the file, as serve does: "file is not a database" or
		// "schema version newer" is about this one.
		return nil, nil, fmt.Errorf("database %s: %w", path, err)
	}
	s, err := app.NewTokenStore(db, app.TokenStoreConfig{CacheTTL: -1})
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return s, func() { db.Close() }, nil
}

func newTokenCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Create, list and revoke API tokens (works on the data directory)",
		Long: `API tokens authenticate clients of the server. Each names an actor (the actor
of everything done with it), whether it is an admin token, and the
installations (GitHub accounts) it may act on. A token bound to an
installation acts on every installation of the same GitHub account: it
goes on working when the App is uninstalled and installed again under a
new installation ID, and never reaches another account.

These commands work on the server's data directory directly (--data, env
BATON_DATA, default ./baton-data); the server may be running. Only a
token's SHA-256 is stored: the token is printed once, by create. A
revocation takes effect on a running server within 5 seconds.`,
		Example: `  baton token create --actor ci --installation 12345678
  baton token create --actor ops --admin --json
  baton token list
  baton token revoke 3`,
	}
	cliUsageErrors(cmd)
	cliGroup(cmd)
	cmd.AddCommand(newTokenCreateCmd(), newTokenListCmd(), newTokenRevokeCmd())
	return cmd
}

func newTokenCreateCmd() *cobra.Command {
	var (
		spec          app.TokenSpec
		installations []int64
		d             *tokenDataDir
	)
	cmd := &cobra.Command{
		Use:   "create --actor NAME [--admin] [--installation ID]... [--all-installations]",
		Short: "Create a token and print it (only this once)",
		Long: `Create stores a new API token and prints it on stdout, alone, so that
scripts can capture it: export BATON_TOKEN=$(baton token create ...).

A non-admin token sees and cancels only its actor's operations, and acts
(and sees) only on the installations given with --installation
(repeatable), or on all with --all-installations. An admin token (--admin) sees every actor's
operations, manages dead letters, and acts on every installation. Actor
names beginning with "github:" are reserved for the operations baton
derives from webhooks.

The binding to an installation follows its GitHub account, by the
account's ID (kept across renames, never reused): when the App is
uninstalled from the account and installed again, GitHub gives the new
installation another ID, and the token acts on it too; it never acts on
another account's installations. An installation the server has not
heard of yet may be given: the token follows its account once the server
learns of it. (An installation removed before baton recorded account IDs
binds by its ID alone.) baton token list shows each token's accounts.`,
		Example: `  baton token create --actor release-bot --installation 12345678
  baton token create --actor ops --admin
  baton token create --actor ci --all-installations --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			spec.Installations = installations
			switch {
			case spec.Actor == "":
				return cliUsage(errors.New("--actor is required"))
			case spec.Admin && len(installations) > 0:
				return cliUsage(errors.New("an admin token acts on every installation: drop --installation"))
			case spec.AllInstallations && len(installations) > 0:
				return cliUsage(errors.New("give --installation or --all-installations, not both"))
			case !spec.Admin && !spec.AllInstallations && len(installations) == 0:
				return cliUsage(errors.New("give --installation ID (repeatable), --all-installations or --admin"))
			}
			s, closeDB, err := d.open(cmd.Context(), true)
			if err != nil {
				return err
			}
			defer closeDB()
			plain, tok, err := s.CreateToken(cmd.Context(), spec)
			if err != nil {
				return err
			}
			if d.created != "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "baton: created a new database at %s; the token works for a server started with --data %s\n",
					d.created, filepath.Dir(d.created))
			}
			if d.json {
				return cliPrintJSON(cmd.OutOrStdout(), map[string]any{
					"token": plain, "id": tok.ID, "actor": tok.Actor, "admin": tok.Admin,
					"allInstallations": tok.AllInstallations, "installations": tok.Installations, "accounts": tok.Accounts,
				})
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), plain)
			return err
		},
	}
	cmd.Flags().StringVar(&spec.Actor, "actor", "", "the actor of everything done with the token (required)")
	cmd.Flags().BoolVar(&spec.Admin, "admin", false, "an admin token: every actor's operations, dead letters, every installation")
	cmd.Flags().Int64SliceVar(&installations, "installation", nil, "an installation ID the token may act on, and so its account's other installations (repeatable)")
	cmd.Flags().BoolVar(&spec.AllInstallations, "all-installations", false, "the token may act on every installation")
	d = addTokenDataFlags(cmd)
	return cmd
}

func newTokenListCmd() *cobra.Command {
	var d *tokenDataDir
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List tokens (never the tokens themselves)",
		Long: `List prints every token, revoked ones included: its actor, whether it is an
admin token, the installation IDs it is bound to, and the GitHub accounts
of those installations ("login (account ID)") as the server's registry
knows them: the token acts on every installation of these accounts.`,
		Example: `  baton token list --data /var/lib/baton`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, closeDB, err := d.open(cmd.Context(), false)
			if err != nil {
				return err
			}
			defer closeDB()
			tokens, err := s.ListTokens(cmd.Context())
			if err != nil {
				return err
			}
			if d.json {
				return cliPrintJSON(cmd.OutOrStdout(), tokens)
			}
			return cliPrintTokens(cmd.OutOrStdout(), tokens)
		},
	}
	d = addTokenDataFlags(cmd)
	return cmd
}

func cliPrintTokens(w io.Writer, tokens []app.Token) error {
	tw := cliTable(w)
	fmt.Fprintln(tw, "ID\tACTOR\tADMIN\tINSTALLATIONS\tACCOUNTS\tCREATED\tLAST USED\tREVOKED")
	for _, t := range tokens {
		inst, accounts := "all", "all"
		if !t.AllInstallations {
			ids := make([]string, len(t.Installations))
			for i, id := range t.Installations {
				ids[i] = strconv.FormatInt(id, 10)
			}
			inst = strings.Join(ids, ",")
			names := make([]string, len(t.Accounts))
			for i, a := range t.Accounts {
				names[i] = fmt.Sprintf("%s (%d)", a.Login, a.ID)
			}
			accounts = cmp.Or(strings.Join(names, ", "), "-")
		}
		admin := "no"
		if t.Admin {
			admin = "yes"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, t.Actor, admin, inst, accounts, cliTime(&t.CreatedAt), cliTime(t.LastUsedAt), cliTime(t.RevokedAt))
	}
	return tw.Flush()
}

func newTokenRevokeCmd() *cobra.Command {
	var d *tokenDataDir
	cmd := &cobra.Command{
		Use:   "revoke ID",
		Short: "Revoke a token (a running server stops accepting it within 5 seconds)",
		Example: `  baton token list
  baton token revoke 3`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := strconv.ParseInt(args[0], 10, 64)
			if err != nil || id <= 0 {
				return cliUsage(fmt.Errorf("ID must be a token ID from baton token list, not %q", args[0]))
			}
			s, closeDB, err := d.open(cmd.Context(), false)
			if err != nil {
				return err
			}
			defer closeDB()
			tok, err := s.RevokeToken(cmd.Context(), id)
			if err != nil {
				return err
			}
			if d.json {
				return cliPrintJSON(cmd.OutOrStdout(), tok)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "revoked token %d (actor %s)\n", tok.ID, tok.Actor)
			return nil
		},
	}
	d = addTokenDataFlags(cmd)
	return cmd
}
