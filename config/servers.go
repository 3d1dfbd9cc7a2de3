package config

import (
	"net/url"
	"regexp"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/agentbackplane/backplane/policy"
)

// The validators a server may name (package backend/upstream's ValidatorSubset
// and ValidatorDraft2020; a test of package assemble holds them equal).
const (
	ValidatorSubset    = "subset"
	ValidatorDraft2020 = "draft2020-12"
)

// ServerConfig is one upstream MCP server, whose tools the gateway
// registers as NAME.TOOL (package backend/upstream), or under another prefix:
//
//	servers:
//	  - name: everything
//	    command: [npx, -y, "@modelcontextprotocol/server-everything"]
//	    env: [API_KEY]               # passed through besides PATH and HOME
//	    validator: subset            # the default; or draft2020-12
//	    connect_timeout: 2m          # the first start (a first npx download); default 30s
//	    accept_added_tools: false    # the default: a tool added while running is held
//	    required: false              # the default: serve starts without it (degraded) when it fails;
//	                                 # true: serve refuses to start, /readyz fails while it is down
//	  - name: remote
//	    url: http://127.0.0.1:9000/mcp
//	    headers: {Authorization: "Bearer upstream-secret"}
//	    validator: draft2020-12
//	    bridge: {sampling: false, elicitation: true, roots: true}
//	  - name: tracker
//	    url: https://tracker.example.com/mcp
//	    auth: {oauth: {mode: service, client_id: backplane, client_secret_env: TRACKER_SECRET}}
//	  - name: fixture
//	    command: [./fixture]
//	    prefix: ""                   # its tools under their own names
//
// prefix is put before each of the server's tool names: NAME. by default;
// "" exposes them as the server names them (policy rules then name the
// bare tool). A prefixed name that collides with another tool (built-in,
// command tool, another server's) refuses the start, naming both lines.
// main_arg needs a non-empty prefix (it applies to PREFIX*).
// bridge says which requests the server may make, during a call, of the
// client that made the call (relayed to it when it declared the same
// capability): sampling/createMessage, elicitation/create, roots/list.
// Default: elicitation and roots yes, sampling no; a key left out keeps
// its default.
// accept_added_tools: a tool the server adds after the gateway started
// (a list change, a reconnect) is held, its calls refused, until an
// operator accepts it (backplane tools accept), as a changed definition
// is: the catalog accepted at the first start did not have it, and its
// own readOnlyHint would spare its calls the approval. true accepts such
// tools at first sight. Either way a name accepted before is not held
// again for coming back unchanged.
// Exactly one of command (stdio; the program runs in the configuration
// file's folder) and url (streamable HTTP, http:// or https://). env goes
// with a command, headers with a url. Header values are secrets: no error
// message quotes them. Package assemble starts or connects every server,
// and fails, naming the server's line, when one cannot be reached or one
// of its tools collides with another tool.
type ServerConfig struct {
	// Name names the server: letters, digits, '_' and '-' (no dots: its
	// tools are NAME.TOOL unless Prefix says otherwise).
	Name string
	// Prefix, when set, replaces "NAME." before the server's tool names
	// ("" for none); nil means the default (see [ServerConfig.ToolPrefix]).
	Prefix *string
	// Command is the program and its arguments, run without a shell.
	Command []string
	// Env names the variables passed through to the program, besides PATH
	// and HOME; nothing else is passed.
	Env []string
	// URL is a streamable HTTP endpoint.
	URL string
	// Headers are sent with every HTTP request.
	Headers map[string]string
	// OAuth (auth: {oauth: ...}), when set, authenticates every HTTP
	// request with an OAuth token (see [UpstreamOAuth]).
	OAuth *UpstreamOAuth
	// Validator is "subset" (the default: the gateway's own, every tool
	// whose schema is outside it refused) or "draft2020-12".
	Validator string
	// Bridge says which of the server's requests are relayed to the
	// calling client.
	Bridge Bridge
	// MainArg names the argument TOOL(PATTERN) policy entries match, for
	// every tool of the server (main_arg); nil: none.
	MainArg *policy.MainArg
	// Sandbox, when set, confines a command server (they opt in).
	Sandbox *SandboxConfig
	// AcceptAddedTools (accept_added_tools) accepts at first sight a tool
	// the server adds while running; by default it is held until an
	// operator accepts it, like a changed definition.
	AcceptAddedTools bool
	// Required (required) makes the gateway need this server: serve
	// refuses to start when it cannot connect, and /readyz answers 503
	// while it is down. By default a server that fails at start is
	// retried in the background while serve runs without it (degraded:
	// /healthz says which server is down).
	Required bool
	// ConnectTimeout bounds the first start: the program (or the HTTP
	// connection), initialize and tools/list. 0 means the default, 30s
	// (DefaultConnectTimeout); at most MaxConnectTimeout.
	ConnectTimeout time.Duration
	// Line is where the server is declared in the file.
	Line int
}

// ToolPrefix is what the server's tool names are prefixed with: Prefix,
// or NAME. by default.
func (s ServerConfig) ToolPrefix() string {
	if s.Prefix != nil {
		return *s.Prefix
	}
	return s.Name + "."
}

// Bridge is a server's bridge setting (see [ServerConfig]).
type Bridge struct {
	Sampling, Elicitation, Roots bool
}

// DefaultBridge is the bridge of a server that sets none.
func DefaultBridge() Bridge { return Bridge{Elicitation: true, Roots: true} }

// DefaultConnectTimeout is the connect timeout of a server without
// connect_timeout (package backend/upstream's default); MaxConnectTimeout the
// longest one accepted, since serve waits for every server before serving.
const (
	DefaultConnectTimeout = 30 * time.Second
	MaxConnectTimeout     = 30 * time.Minute
)

var (
	serverNameRe = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	// A prefix is made of the characters MCP allows in a tool name.
	toolPrefixRe = regexp.MustCompile(`^[A-Za-z0-9_.-]{0,64}$`)
)

func (p *parser) servers(c *Config, v *yaml.Node) error {
	names := map[string]int{} // name -> line
	return p.sequence(v, "servers", func(item *yaml.Node) error {
		s := ServerConfig{Line: item.Line, Validator: ValidatorSubset, Bridge: DefaultBridge()}
		var nameNode, cmdNode, urlNode, envNode, headersNode, sandboxNode, mainArgNode, authNode *yaml.Node
		err := p.mapping(item, "a server", func(key string, k, v *yaml.Node) error {
			var err error
			switch key {
			case "name":
				nameNode = v
				if s.Name, err = p.str(v, "name"); err == nil && !serverNameRe.MatchString(s.Name) {
					err = p.errAt(v, "server name %q: use 1 to 64 letters, digits, '_' or '-' (its tools are NAME.TOOL)", s.Name)
				}
			case "command":
				cmdNode = v
				if s.Command, err = p.strList(v, "command"); err == nil && (len(s.Command) == 0 || s.Command[0] == "") {
					err = p.errAt(v, "command must name a program: [program, arg, ...]")
				}
			case "env":
				envNode = v
				err = p.sequence(v, "env", func(item *yaml.Node) error {
					name, err := p.str(item, "env entry")
					if err == nil && !envName.MatchString(name) {
						err = p.errAt(item, "env: %q is not an environment variable name", name)
					}
					s.Env = append(s.Env, name)
					return err
				})
			case "url":
				urlNode = v
				if s.URL, err = p.str(v, "url"); err == nil {
					u, perr := url.Parse(s.URL)
					if perr != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
						err = p.errAt(v, "url must be an http:// or https:// URL with a host")
					}
				}
			case "headers":
				headersNode = v
				s.Headers = map[string]string{}
				err = p.mapping(v, "headers", func(name string, k, v *yaml.Node) error {
					if !headerName.MatchString(name) {
						return p.errAt(k, "headers: %q is not an HTTP header name", name)
					}
					// Not p.str: its message would quote the value.
					n := deref(v)
					if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
						return p.errAt(v, "headers: the value of %s must be a string (quote it)", name)
					}
					if !headerValueRe.MatchString(n.Value) {
						return p.errAt(v, "headers: the value of %s holds a control character", name)
					}
					s.Headers[name] = n.Value
					return nil
				})
			case "auth":
				authNode = v
				s.OAuth, err = p.upstreamAuth(c, v)
			case "sandbox":
				sandboxNode = v
				s.Sandbox, err = p.sandbox(c, v)
			case "validator":
				if s.Validator, err = p.str(v, "validator"); err == nil &&
					s.Validator != ValidatorSubset && s.Validator != ValidatorDraft2020 {
					err = p.errAt(v, "validator %q: %s or %s", s.Validator, ValidatorSubset, ValidatorDraft2020)
				}
			case "bridge":
				err = p.mapping(v, "bridge", func(key string, _, v *yaml.Node) error {
					b, err := p.boolean(v, "bridge."+key)
					switch key {
					case "sampling":
						s.Bridge.Sampling = b
					case "elicitation":
						s.Bridge.Elicitation = b
					case "roots":
						s.Bridge.Roots = b
					}
					return err
				}, "sampling", "elicitation", "roots")
			case "prefix":
				var prefix string
				if prefix, err = p.str(v, "prefix"); err == nil && !toolPrefixRe.MatchString(prefix) {
					err = p.errAt(v, "prefix %q: use at most 64 letters, digits, '_', '-' or '.' (\"\" for none)", prefix)
				}
				s.Prefix = &prefix
			case "main_arg":
				mainArgNode = v
				s.MainArg, err = p.mainArg(v)
			case "accept_added_tools":
				s.AcceptAddedTools, err = p.boolean(v, "accept_added_tools")
			case "required":
				s.Required, err = p.boolean(v, "required")
			case "connect_timeout":
				if s.ConnectTimeout, err = p.duration(v, "connect_timeout"); err == nil &&
					(s.ConnectTimeout <= 0 || s.ConnectTimeout > MaxConnectTimeout) {
					err = p.errAt(v, "connect_timeout %v: must be positive and at most %v", s.ConnectTimeout, MaxConnectTimeout)
				}
			}
			return err
		}, "name", "command", "env", "url", "headers", "validator", "sandbox", "main_arg", "connect_timeout", "bridge", "prefix", "accept_added_tools", "required", "auth")
		if err != nil {
			return err
		}
		if nameNode == nil {
			return p.errAt(item, "a server needs a name")
		}
		if line, ok := names[s.Name]; ok {
			return p.errAt(nameNode, "server %s is already defined at line %d", s.Name, line)
		}
		names[s.Name] = nameNode.Line
		switch {
		case cmdNode != nil && urlNode != nil:
			return p.errAt(urlNode, "server %s: give a command or a url, not both", s.Name)
		case cmdNode == nil && urlNode == nil:
			return p.errAt(item, "server %s needs a command: [program, arg, ...] or a url", s.Name)
		case envNode != nil && urlNode != nil:
			return p.errAt(envNode, "server %s: env applies to a command, not to a url", s.Name)
		case headersNode != nil && cmdNode != nil:
			return p.errAt(headersNode, "server %s: headers apply to a url, not to a command", s.Name)
		case authNode != nil && cmdNode != nil:
			return p.errAt(authNode, "server %s: auth applies to a url, not to a command", s.Name)
		case authNode != nil && hasAuthorization(s.Headers):
			return p.errAt(headersNode, "server %s: auth sets the Authorization header: leave it out of headers", s.Name)
		case sandboxNode != nil && urlNode != nil:
			return p.errAt(sandboxNode, "server %s: sandbox applies to a command, not to a url", s.Name)
		case mainArgNode != nil && s.ToolPrefix() == "":
			return p.errAt(mainArgNode, "server %s: main_arg needs a prefix (it applies to every PREFIX* tool); with prefix \"\" name the tools' arguments in the policy instead", s.Name)
		}
		c.Servers = append(c.Servers, s)
		return nil
	})
}

func hasAuthorization(h map[string]string) bool {
	for k := range h {
		if strings.EqualFold(k, "Authorization") {
			return true
		}
	}
	return false
}

var (
	headerName    = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
	headerValueRe = regexp.MustCompile(`^[^\x00-\x08\x0a-\x1f\x7f]*$`)
)

// MCPToolOf names the Backplane tool of an agent's mcp__SERVER__TOOL (its
// hook's name for a tool of an MCP server it was given): the tool of the
// configured server named server, under its prefix.
func (c *Config) MCPToolOf(server, tool string) (string, bool) {
	for _, s := range c.Servers {
		if s.Name == server {
			return s.ToolPrefix() + tool, true
		}
	}
	return "", false
}

// MCPServerOf names the configured server whose URL, or command line (its
// words joined by single spaces), is the one an agent's hook reports for
// an MCP tool use: Cursor names a tool's server by how it reaches it.
func (c *Config) MCPServerOf(url, command string) (string, bool) {
	command = strings.Join(strings.Fields(command), " ")
	for _, s := range c.Servers {
		if (url != "" && s.URL == url) || (command != "" && len(s.Command) > 0 && strings.Join(s.Command, " ") == command) {
			return s.Name, true
		}
	}
	return "", false
}
