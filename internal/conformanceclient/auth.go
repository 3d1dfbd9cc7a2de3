package conformanceclient

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/agentbackplane/backplane/backend/upstream"
	"github.com/agentbackplane/backplane/tool"
)

// AuthScenarios are the suite's client authorization scenarios Run knows
// (auth/*): those of the 2026-07-28 timeline and the extensions that
// apply to an MCP client with a service credential. Each runs the
// service mode as Backplane does: an operator's one-time consent
// (upstream.Login, as `backplane servers login` runs it, the browser a
// scripted HTTP client following the authorization server's redirects),
// the token saved, then the connection and a call with it; the
// client-credentials ones the client credentials grant.
var AuthScenarios = []string{
	"auth/metadata-default",
	"auth/metadata-var1",
	"auth/metadata-var2",
	"auth/metadata-var3",
	"auth/basic-cimd",
	"auth/scope-from-www-authenticate",
	"auth/scope-from-scopes-supported",
	"auth/scope-omitted-when-undefined",
	"auth/scope-step-up",
	"auth/scope-retry-limit",
	"auth/token-endpoint-auth-basic",
	"auth/token-endpoint-auth-post",
	"auth/token-endpoint-auth-none",
	"auth/pre-registration",
	"auth/resource-mismatch",
	"auth/offline-access-scope",
	"auth/offline-access-not-supported",
	"auth/authorization-server-migration",
	"auth/iss-supported",
	"auth/iss-not-advertised",
	"auth/iss-supported-missing",
	"auth/iss-wrong-issuer",
	"auth/iss-unexpected",
	"auth/iss-normalized",
	"auth/metadata-issuer-mismatch",
	"auth/client-credentials-basic",
	"auth/client-credentials-jwt",
	"auth/enterprise-managed-authorization",
}

// ExtensionScenario reports whether scenario is one of the suite's
// extensions (not on the spec's timeline: run without --spec-version).
func ExtensionScenario(scenario string) bool {
	return strings.HasPrefix(scenario, "auth/client-credentials-") || scenario == "auth/enterprise-managed-authorization"
}

// cimdURL is the client ID metadata document the suite's basic-cimd
// scenario expects a client to use where the server supports them.
const cimdURL = "https://conformance-test.local/client-metadata.json"

// authContext is MCP_CONFORMANCE_CONTEXT for the auth scenarios that
// give credentials (pre-registration, client credentials).
type authContext struct {
	ClientID     string `json:"client_id"`
	ClientSecret string `json:"client_secret"`
}

func runAuth(ctx context.Context, url, scenario string, raw []byte) error {
	var ac authContext
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &ac); err != nil {
			return fmt.Errorf("conformanceclient: MCP_CONFORMANCE_CONTEXT: %w", err)
		}
	}
	tokens := &upstream.MemoryTokens{}
	oa := &upstream.OAuth{Tokens: tokens, ClientID: ac.ClientID, ClientSecret: ac.ClientSecret}
	code := !strings.HasPrefix(scenario, "auth/client-credentials-")
	if code {
		oa.Grant = upstream.GrantAuthorizationCode
		oa.ClientIDMetadataURL = cimdURL
	}
	bare := ""
	srv := upstream.Server{Name: "suite", Prefix: &bare, URL: url, OAuth: oa, Validator: upstream.ValidatorDraft2020}
	if code {
		browsed := make(chan error, 1)
		st, err := upstream.Login(ctx, srv, &upstream.LoginOptions{Show: func(u string) { go browse(ctx, u, browsed) }})
		if err != nil {
			return err
		}
		if err := tokens.SaveToken(ctx, upstream.TokenKey{Server: "suite"}, st); err != nil {
			return err
		}
	}
	reg := &registry{tools: map[string]tool.Tool{}}
	up, err := upstream.Connect(ctx, srv, &upstream.Options{Registry: reg, ConnectTimeout: connectTimeout})
	if err != nil {
		return err
	}
	defer up.Close()
	d := &driver{reg: reg, client: answerer{}}
	for _, name := range reg.names() {
		d.call(ctx, name, json.RawMessage(`{}`))
	}
	return d.err
}

// browse is the operator's browser: it opens the authorization URL and
// follows the authorization server's redirects to the loopback listener.
func browse(ctx context.Context, u string, done chan<- error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		done <- err
		return
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		done <- err
		return
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	done <- nil
}

func isAuth(scenario string) bool { return slices.Contains(AuthScenarios, scenario) }
