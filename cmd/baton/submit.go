package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/baton-dev/baton/app/client"
)

func init() { register(newSubmitCmd) }

type submitOptions struct {
	key, action, resource, resourceType, resourceID string
	payload, correlationID                          string
	installation                                    int64
	maxAttempts                                     int
	wait                                            *cliOptionalDuration
	*clientOptions
}

func newSubmitCmd() *cobra.Command {
	o := &submitOptions{}
	cmd := &cobra.Command{
		Use:   "submit --action ACTION --resource TYPE:ID --payload JSON [--key KEY]",
		Short: "Submit an operation (a GitHub mutation) to the server",
		Long: `Submit asks the server to perform one GitHub mutation durably and prints
the operation: its ID, status, action and resource.

The idempotency key (--key) names the operation together with your token's
actor: submitting the same key with the same input (action, resource and
payload) again returns the existing operation as it was submitted first
(exit 0; "existing operation" on stderr, also with --json), and the same
key with other input is refused (idempotency_conflict, naming the operation
the key belongs to). Without --key a random key is generated
and printed on stderr; scripts that may retry should always pass --key.
After a lost connection or a 429, 502, 503 or 504, submit sends the same
request (the same key) again, a few times over a few seconds, before it
gives up; the operation its first sending created, whose answer was lost,
is then found and printed (with --key, with the note that it may be this
command's own).

The payload is JSON, given inline, as @FILE, or @- for stdin.

` + waitHelp + `

Actions and their resources:
  github.pulls.merge          pull_request:OWNER/REPO#N   {"sha", "method"?, "commitTitle"?, "commitMessage"?}
  github.pulls.update_branch  pull_request:OWNER/REPO#N   {"expectedHeadSha"}
  github.issues.comment       issue:OWNER/REPO#N          {"body"}
  github.issues.add_labels    issue:OWNER/REPO#N          {"labels": [...]}
  github.issues.remove_label  issue:OWNER/REPO#N          {"label"}
  github.git.update_ref       ref:OWNER/REPO:heads/BRANCH {"sha", "expectedSha"?, "force"?}
  github.repos.create_status  commit:OWNER/REPO@SHA       {"state", "context", "description"?, "targetUrl"?}`,
		Example: `  export BATON_TOKEN=baton_...
  baton submit --key release-1.2-note --action github.issues.comment \
    --resource issue:octo/demo#10 --payload '{"body": "Released in 1.2"}'
  baton submit --action github.pulls.merge --resource pull_request:octo/demo#1 \
    --payload @merge.json --wait=2m --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runSubmit(cmd.Context(), o, cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.key, "key", "", "idempotency key (default: a random key, printed on stderr)")
	f.StringVar(&o.action, "action", "", "action, e.g. github.issues.comment (required)")
	f.StringVar(&o.resource, "resource", "", "resource as TYPE:ID, e.g. issue:octo/demo#10")
	f.StringVar(&o.resourceType, "resource-type", "", "resource type (instead of --resource)")
	f.StringVar(&o.resourceID, "resource-id", "", "resource id (instead of --resource)")
	f.StringVar(&o.payload, "payload", "", "payload: JSON, @FILE or @- (required)")
	f.StringVar(&o.correlationID, "correlation-id", "", "your correlation id, kept on the record")
	f.Int64Var(&o.installation, "installation", 0, "installation ID (checked against the repository's)")
	f.IntVar(&o.maxAttempts, "max-attempts", 0, "attempts at most, 1–10 (server default 3)")
	o.wait = addWaitFlag(cmd, "wait until the operation is terminal (optionally at most DURATION: --wait=2m)")
	o.clientOptions = addClientFlags(cmd)
	return cmd
}

func runSubmit(ctx context.Context, o *submitOptions, stdin io.Reader, stdout, stderr io.Writer) error {
	if o.action == "" {
		return cliUsage(errors.New("--action is required"))
	}
	var res client.Resource
	switch {
	case o.resource != "" && (o.resourceType != "" || o.resourceID != ""):
		return cliUsage(errors.New("give --resource TYPE:ID or --resource-type and --resource-id, not both"))
	case o.resource != "":
		typ, id, ok := strings.Cut(o.resource, ":")
		if !ok || typ == "" || id == "" {
			return cliUsage(fmt.Errorf("--resource %q must look like TYPE:ID, e.g. issue:octo/demo#10", o.resource))
		}
		res = client.Resource{Type: typ, ID: id}
	case o.resourceType != "" && o.resourceID != "":
		res = client.Resource{Type: o.resourceType, ID: o.resourceID}
	default:
		return cliUsage(errors.New("--resource TYPE:ID is required"))
	}
	if o.payload == "" {
		return cliUsage(errors.New(`--payload is required (JSON, @FILE or @-), e.g. --payload '{"body": "hi"}'`))
	}
	payload, err := cliReadPayload(o.payload, stdin)
	if err != nil {
		return cliUsage(err)
	}
	key := o.key
	if key == "" {
		var b [12]byte
		_, _ = rand.Read(b[:])
		key = "cli-" + hex.EncodeToString(b[:])
		fmt.Fprintf(stderr, "idempotency key: %s\n", key)
	}
	c, err := o.client()
	if err != nil {
		return err
	}
	op, created, resent, err := c.SubmitResent(ctx, client.SubmitRequest{
		IdempotencyKey: key, Action: o.action, Resource: res, Payload: payload,
		CorrelationID: o.correlationID, InstallationID: o.installation, MaxAttempts: o.maxAttempts,
	})
	if err != nil {
		return cliAPIError(err)
	}
	// On stderr also with --json: stdout keeps the operation's shape.
	switch {
	case created:
	case resent && o.key == "":
		// A key made for this command alone: the operation found is the
		// one its first sending created, whose answer was lost.
	case resent:
		fmt.Fprintln(stderr, "existing operation: this key was submitted before with the same action, resource and payload (perhaps by this command, whose first answer was lost and which sent it again)")
	default:
		fmt.Fprintln(stderr, "existing operation: this key was submitted before with the same action, resource and payload")
	}
	if o.wait.set {
		if op, err = o.wait.wait(ctx, c, op.OperationID); err != nil {
			return cliAPIError(err)
		}
		return cliWaitOutcome(stdout, op, o.json)
	}
	return cliPrintOperation(stdout, op, o.json)
}

// cliReadPayload reads --payload: inline JSON, @FILE, or @- for stdin. It
// must be one JSON object.
func cliReadPayload(arg string, stdin io.Reader) (json.RawMessage, error) {
	raw := []byte(arg)
	if name, ok := strings.CutPrefix(arg, "@"); ok {
		var err error
		if name == "-" {
			raw, err = io.ReadAll(io.LimitReader(stdin, 2<<20))
		} else {
			raw, err = os.ReadFile(name)
		}
		if err != nil {
			return nil, fmt.Errorf("--payload: %w", err)
		}
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
		return nil, errors.New("--payload must be a JSON object, e.g. '{\"body\": \"hi\"}'")
	}
	return json.RawMessage(raw), nil
}
