package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentbackplane/backplane/backend/upstream"
	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/internal/secrets"
	"github.com/agentbackplane/backplane/internal/termtext"
)

func newConnectionsCmd() *cobra.Command {
	f := gatewayFlags{storeOnly: true}
	cmd := groupCmd("connections", "Show and revoke the upstream OAuth credentials the gateway keeps",
		`A server with auth.oauth keeps its credentials in the store, sealed with
the secrets: key: the gateway's own (service mode, after servers login) and,
for per-caller servers, each caller's account. connections list shows who is
connected to which server, how, with which scopes and until when, never a
token; connections revoke revokes one at the authorization server (where it
has a revocation endpoint) and forgets it.`)
	addGatewayFlags(cmd, &f)
	cmd.AddCommand(newConnectionsListCmd(&f), newConnectionsRevokeCmd(&f))
	return cmd
}

func newConnectionsListCmd(f *gatewayFlags) *cobra.Command {
	var server string
	cmd := &cobra.Command{
		Use:   "list [--server NAME]",
		Short: "List the upstream credentials: server, caller, mode, scopes, expiry (no token)",
		Long: `With --json the answer is {"connections":[{"server","caller","mode","scopes",
"subject","expiry","updated"}]}; caller is absent for the gateway's own
credential, expiry when the token has none.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := f.open(cmd.Context(), cmd)
			if err != nil {
				return err
			}
			defer s.Close()
			conns, err := s.rt.Gateway.ListConnections(cmd.Context(), server)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if f.asJSON {
				if conns == nil {
					conns = []gateway.Connection{}
				}
				return writeJSONLine(out, struct {
					Connections []gateway.Connection `json:"connections"`
				}{conns})
			}
			if len(conns) == 0 {
				if s.rt.Config.Secrets == nil {
					_, err := fmt.Fprintln(out, "no connections: without secrets: in the configuration no upstream credential is kept in the store")
					return err
				}
				_, err := fmt.Fprintln(out, "no connections")
				return err
			}
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SERVER\tCALLER\tMODE\tSCOPES\tEXPIRES\tUPDATED")
			now := time.Now()
			for _, c := range conns {
				caller := c.Caller
				if caller == "" {
					caller = "(gateway)"
				}
				scopes := strings.Join(c.Scopes, " ")
				if scopes == "" {
					scopes = "-"
				}
				exp := "-"
				if !c.Expiry.IsZero() {
					exp = c.Expiry.UTC().Format(time.RFC3339)
					if c.Expiry.Before(now) {
						exp += " (expired; refreshed at next use)"
					}
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", termtext.Line(c.Server), termtext.Line(caller), termtext.Line(c.Mode),
					termtext.Line(scopes), exp, c.Updated.UTC().Format(time.RFC3339))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&server, "server", "", "only this server's")
	return cmd
}

func newConnectionsRevokeCmd(f *gatewayFlags) *cobra.Command {
	var caller, as string
	cmd := &cobra.Command{
		Use:   "revoke SERVER [--caller NAME] [--as NAME]",
		Short: "Revoke an upstream credential at its authorization server and forget it (an audited operator action)",
		Long: `Revoke sends the credential's refresh token (else its access token) to
the authorization server's revocation endpoint (RFC 7009) found at login,
then deletes it from the store whatever the server answered: the next call
to SERVER needs a new servers login (or, with --caller, that caller's new
connection). Without --caller it is the gateway's own credential.

With --json the answer is {"ok":true,"server","caller","at_server","note",
"revoked_by"}.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := f.open(cmd.Context(), cmd)
			if err != nil {
				return err
			}
			defer s.Close()
			if as, err = s.operator(as); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			r, err := s.rt.Gateway.RevokeConnection(cmd.Context(), args[0], caller, as)
			var oe *gateway.OperatorError
			if errors.As(err, &oe) {
				return negative(out, f.asJSON, oe.Class, oe.Message)
			}
			if err != nil {
				return err
			}
			if f.asJSON {
				return writeJSONLine(out, struct {
					OK bool `json:"ok"`
					*gateway.Revoked
				}{true, r})
			}
			who := "the gateway's own credential"
			if caller != "" {
				who = "the credential of " + termtext.Line(caller)
			}
			if r.AtServer {
				fmt.Fprintf(out, "ok: %s on %s revoked at the authorization server and forgotten\n", who, termtext.Line(r.Server))
			} else {
				fmt.Fprintf(out, "ok: %s on %s %s\n", who, termtext.Line(r.Server), termtext.Line(r.Note))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&caller, "caller", "", "the caller whose account it is (default: the gateway's own, service mode)")
	addOperatorFlags(cmd, f, &as, "who revokes: with operators configured, only a check of the token's owner (default: the login name)")
	return cmd
}

func newServersLoginCmd() *cobra.Command {
	f := gatewayFlags{storeOnly: true}
	var as string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "login NAME",
		Short: "Consent once, as an operator, for the gateway's own OAuth credential to a server (grant: authorization_code)",
		Long: `login runs the OAuth authorization code flow for a server whose auth.oauth
is mode: service, grant: authorization_code. It prints the authorization URL
to open in a browser and waits (--timeout) for the authorization server to
redirect back to a listener on 127.0.0.1 (a random port). PKCE (S256), a
random state, the resource parameter (the server's url) and, where the
authorization server advertises it, the iss of the redirect (RFC 9207) are
used and checked. The client is a client ID metadata document where the
server supports them (client_id_metadata_url), else the configured
client_id, else one registered dynamically (RFC 7591). The token and its
refresh token are saved in the store, sealed with the secrets: key; serve
then uses and refreshes them (every replica on the store).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := f.open(cmd.Context(), cmd)
			if err != nil {
				return err
			}
			defer s.Close()
			if as, err = s.operator(as); err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			errOut := cmd.ErrOrStderr()
			c, err := s.rt.LoginServer(ctx, args[0], as, func(u string) {
				fmt.Fprintf(errOut, "Open this URL in a browser to let Backplane act on %s:\n\n  %s\n\nWaiting for the redirect (up to %v)...\n",
					termtext.Line(args[0]), termtext.Line(u), timeout)
			})
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if f.asJSON {
				return writeJSONLine(out, struct {
					OK bool `json:"ok"`
					*gateway.Connection
				}{true, c})
			}
			exp := "no expiry given"
			if !c.Expiry.IsZero() {
				exp = "the token expires " + c.Expiry.UTC().Format(time.RFC3339) + " and is refreshed by serve"
			}
			_, err = fmt.Fprintf(out, "ok: %s is connected (scopes: %s); %s\n", termtext.Line(c.Server), termtext.Line(strings.Join(c.Scopes, " ")), exp)
			return err
		},
	}
	addGatewayFlags(cmd, &f)
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Minute, "how long to wait for the redirect")
	addOperatorFlags(cmd, &f, &as, "who consents: with operators configured, only a check of the token's owner (default: the login name)")
	return cmd
}

func newSecretsCmd() *cobra.Command {
	f := gatewayFlags{storeOnly: true}
	cmd := groupCmd("secrets", "Make a secrets key, and re-seal the stored upstream tokens after a key rotation",
		fmt.Sprintf(`The secrets: key seals the upstream OAuth tokens kept in the store. To
rotate it: write a new key (secrets new-key FILE), put it as key_file and the
old one under previous_keys on every replica and restart them (the new key
seals, both open), run secrets reseal once, then drop the old key. Logins
in progress (per_caller) are not re-sealed: each lives at most %s, so
drop the old key no sooner than that after the restart, or a login begun
before it fails at its callback and must be started again.`, upstream.DefaultLoginTTL))
	addGatewayFlags(cmd, &f)
	newKey := &cobra.Command{
		Use:   "new-key FILE",
		Short: "Write a new random 32-byte key (base64) to FILE, readable by its owner only",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			k, err := secrets.NewKey()
			if err != nil {
				return err
			}
			fh, err := os.OpenFile(args[0], os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			if err != nil {
				return err
			}
			if _, err := fmt.Fprintln(fh, k); err != nil {
				fh.Close()
				return err
			}
			if err := fh.Close(); err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "ok: a new key is in %s (mode 0600); name it in secrets: key_file\n", termtext.Line(args[0]))
			return err
		},
	}
	reseal := &cobra.Command{
		Use:   "reseal",
		Short: "Seal again with the first key every stored token sealed with a previous one",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := f.open(cmd.Context(), cmd)
			if err != nil {
				return err
			}
			defer s.Close()
			n, err := s.rt.ResealSecrets(cmd.Context())
			s.rt.Audit.Info("secrets", "step", "reseal", "resealed", n, "error", errText(err))
			if err != nil {
				return fmt.Errorf("re-sealed %d tokens, but: %w", n, err)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "ok: %d tokens re-sealed with the first key; the previous keys may be dropped once the logins begun before the restart have ended (%s at most)\n", n, upstream.DefaultLoginTTL)
			return err
		},
	}
	cmd.AddCommand(newKey, reseal)
	return cmd
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
