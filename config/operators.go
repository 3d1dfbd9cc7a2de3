package config

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Operator is a person who decides approvals, resolves uncertain intents,
// accepts changed tool definitions and reads /metrics and the console:
//
//	operators:
//	  - name: ops
//	    token: "ops-secret"      # or token_env: NAME, or token_file: PATH
//
// Operators are separate from callers: an operator token is refused on
// /mcp, and a caller token is refused (403) wherever an operator is needed.
type Operator struct {
	Name string
	// Token is the operator's bearer token, read from the file (token),
	// the environment (token_env) or a file (token_file, relative to the
	// configuration's folder) when the configuration is parsed.
	Token string
	// TokenFrom says where the token came from, for people: "the
	// configuration", "$NAME" or the file's path. Never the token.
	TokenFrom string
	Line      int
}

// OperatorNames lists the configured operators' names.
func (c *Config) OperatorNames() []string {
	out := make([]string, len(c.Operators))
	for i, o := range c.Operators {
		out[i] = o.Name
	}
	return out
}

// OperatorTokens maps each operator token to its operator's name.
func (c *Config) OperatorTokens() map[string]string {
	out := map[string]string{}
	for _, o := range c.Operators {
		if o.Token != "" {
			out[o.Token] = o.Name
		}
	}
	return out
}

func (p *parser) operators(c *Config, v *yaml.Node) error {
	return p.sequence(v, "operators", func(item *yaml.Node) error {
		o := Operator{Line: item.Line}
		var env, file string
		sources := 0
		err := p.mapping(item, "an operator", func(key string, k, v *yaml.Node) error {
			var err error
			switch key {
			case "name":
				o.Name, err = p.str(v, "name")
			case "token":
				sources++
				o.Token, err = p.str(v, "token")
				o.TokenFrom = "the configuration"
			case "token_env":
				sources++
				env, err = p.str(v, "token_env")
			case "token_file":
				sources++
				file, err = p.str(v, "token_file")
			}
			return err
		}, "name", "token", "token_env", "token_file")
		if err != nil {
			return err
		}
		if o.Name == "" {
			return p.errAt(item, "an operator needs a name")
		}
		if slices.ContainsFunc(c.Operators, func(x Operator) bool { return x.Name == o.Name }) {
			return p.errAt(item, "operator %q is listed twice", o.Name)
		}
		if sources > 1 {
			return p.errAt(item, "operator %s: give one of token, token_env and token_file", o.Name)
		}
		switch {
		case env != "":
			o.Token, o.TokenFrom = os.Getenv(env), "$"+env
			if o.Token == "" {
				return p.errAt(item, "operator %s: token_env %s is not set or empty", o.Name, env)
			}
		case file != "":
			path := resolve(c.Dir, file)
			b, err := os.ReadFile(path)
			if err != nil {
				return p.errAt(item, "operator %s: token_file: %v", o.Name, err)
			}
			o.Token, o.TokenFrom = strings.TrimSpace(string(b)), path
		}
		if o.Token != "" && !bearerToken.MatchString(o.Token) {
			return p.errAt(item, "operator %s: a token must be letters, digits and -._~+/ (a bearer token)", o.Name)
		}
		c.Operators = append(c.Operators, o)
		return nil
	})
}

// finishOperators checks what depends on other sections: an operator token
// is not also a caller token.
func (p *parser) finishOperators(c *Config) error {
	for _, o := range c.Operators {
		if _, ok := c.Serve.Tokens[o.Token]; ok && o.Token != "" {
			return &Error{File: c.Path, Line: o.Line, Msg: fmt.Sprintf("operator %s: its token is also a caller's token in serve.tokens; operators and callers need tokens of their own", o.Name)}
		}
	}
	return nil
}
