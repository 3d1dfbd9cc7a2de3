package config

import (
	"os"
	"strings"

	"go.yaml.in/yaml/v3"
)

// serve.caller_tokens: caller tokens kept out of the configuration file,
// read from the environment or from files when the file is parsed, as
// operators' tokens are (a container's Secret mounted as a file, an
// orchestrator's environment):
//
//	serve:
//	  caller_tokens:
//	    - {caller: agent, token_file: /run/secrets/agent-token}   # relative to this file
//	    - {caller: ci, token_env: BACKPLANE_CI_TOKEN}
//
// Each joins serve.tokens (a token listed twice is refused); a file's
// content is trimmed of surrounding white space (a final newline).
func (p *parser) callerTokens(c *Config, v *yaml.Node) (map[string]string, error) {
	out := map[string]string{}
	err := p.sequence(v, "serve caller_tokens", func(item *yaml.Node) error {
		var caller, env, file string
		sources := 0
		err := p.mapping(item, "a caller token", func(key string, k, v *yaml.Node) error {
			s, err := p.str(v, key)
			switch key {
			case "caller":
				caller = s
			case "token_env":
				sources++
				env = s
			case "token_file":
				sources++
				file = s
			}
			return err
		}, "caller", "token_env", "token_file")
		if err != nil {
			return err
		}
		if caller == "" {
			return p.errAt(item, "serve caller_tokens: an entry needs a caller")
		}
		if sources != 1 || env == "" && file == "" {
			return p.errAt(item, "serve caller_tokens: caller %s: give one of token_env and token_file", caller)
		}
		var token string
		if env != "" {
			if token = os.Getenv(env); token == "" {
				return p.errAt(item, "serve caller_tokens: caller %s: token_env %s is not set or empty", caller, env)
			}
		} else {
			b, err := os.ReadFile(resolve(c.Dir, file))
			if err != nil {
				return p.errAt(item, "serve caller_tokens: caller %s: token_file: %v", caller, err)
			}
			token = strings.TrimSpace(string(b))
		}
		if !bearerToken.MatchString(token) {
			// Never the token itself: the error is printed.
			return p.errAt(item, "serve caller_tokens: caller %s: the token must be letters, digits and -._~+/ (a bearer token)", caller)
		}
		if _, dup := out[token]; dup {
			return p.errAt(item, "serve caller_tokens: caller %s: the same token is listed twice", caller)
		}
		out[token] = caller
		return nil
	})
	return out, err
}
