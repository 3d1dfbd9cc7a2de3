package config

import (
	"os"

	"go.yaml.in/yaml/v3"

	"github.com/agentbackplane/backplane/internal/secrets"
)

// SecretsConfig is the top-level secrets: the keys that seal what the
// store keeps but must not yield on its own (upstream OAuth tokens):
//
//	secrets:
//	  key_file: /run/secrets/backplane-key    # relative to this file; or key_env: BACKPLANE_KEY
//	  previous_keys:                          # during a rotation: they open, never seal
//	    - key_file: /run/secrets/backplane-key.old
//
// A key is 32 bytes: raw, 64 hex digits or base64 (`backplane secrets
// new-key` writes one). A key file readable by group or others is refused.
// The keys are read when the configuration is parsed and never quoted.
type SecretsConfig struct {
	// Keys are the keys, the sealing one first, then the previous ones.
	Keys [][]byte
	Line int
}

func (p *parser) secrets(c *Config, v *yaml.Node) error {
	s := &SecretsConfig{Line: v.Line}
	var cur []byte
	err := p.mapping(v, "secrets", func(key string, k, v *yaml.Node) error {
		switch key {
		case "key_file", "key_env":
			if cur != nil {
				return p.errAt(k, "secrets: give one of key_file and key_env, not both")
			}
			var err error
			cur, err = p.secretKey(c, key, v)
			return err
		case "previous_keys":
			return p.sequence(v, "secrets previous_keys", func(item *yaml.Node) error {
				var got []byte
				err := p.mapping(item, "a previous key", func(key string, k, v *yaml.Node) error {
					if got != nil {
						return p.errAt(k, "secrets previous_keys: give one of key_file and key_env per entry")
					}
					var err error
					got, err = p.secretKey(c, key, v)
					return err
				}, "key_file", "key_env")
				if err == nil && got == nil {
					err = p.errAt(item, "secrets previous_keys entry needs key_file or key_env")
				}
				s.Keys = append(s.Keys, got)
				return err
			})
		}
		return nil
	}, "key_file", "key_env", "previous_keys")
	if err != nil {
		return err
	}
	if cur == nil {
		return p.errAt(v, "secrets needs key_file or key_env: the 32-byte key that seals upstream tokens (backplane secrets new-key FILE makes one)")
	}
	s.Keys = append([][]byte{cur}, s.Keys...)
	if _, err := secrets.New(s.Keys...); err != nil {
		return p.errAt(v, "%v", err)
	}
	c.Secrets = s
	return nil
}

// secretKey reads one key from a file (key_file) or a variable (key_env).
func (p *parser) secretKey(c *Config, kind string, v *yaml.Node) ([]byte, error) {
	name, err := p.str(v, "secrets "+kind)
	if err != nil {
		return nil, err
	}
	var raw []byte
	switch kind {
	case "key_env":
		if !envName.MatchString(name) {
			return nil, p.errAt(v, "secrets key_env: %q is not an environment variable name", name)
		}
		if raw = []byte(os.Getenv(name)); len(raw) == 0 {
			return nil, p.errAt(v, "secrets key_env %s is not set or empty", name)
		}
	default:
		if name == "" {
			return nil, p.errAt(v, "secrets key_file must be a path")
		}
		path := resolve(c.Dir, name)
		fi, err := os.Stat(path)
		if err != nil {
			return nil, p.errAt(v, "secrets key_file: %v", err)
		}
		if perm := fi.Mode().Perm(); perm&0o077 != 0 {
			return nil, p.errAt(v, "secrets key_file %s is readable or writable by group or others (%v): chmod 600 it", name, perm)
		}
		if raw, err = os.ReadFile(path); err != nil {
			return nil, p.errAt(v, "secrets key_file: %v", err)
		}
	}
	k, err := secrets.ParseKey(raw)
	if err != nil {
		return nil, p.errAt(v, "secrets %s %s: %v", kind, name, err)
	}
	return k, nil
}

// finishSecrets refuses a server whose tokens must be kept (an operator's
// consent, grant authorization_code) when no key can seal them.
func (p *parser) finishSecrets(c *Config) error {
	if c.Secrets != nil {
		return nil
	}
	for _, s := range c.Servers {
		if s.OAuth != nil && s.OAuth.Grant == GrantAuthorizationCode {
			return &Error{File: c.Path, Line: s.OAuth.Line, Msg: "server " + s.Name + ": auth oauth grant authorization_code keeps its tokens in the store, sealed: set secrets: {key_file: ...} (backplane secrets new-key FILE makes one)"}
		}
	}
	return nil
}
