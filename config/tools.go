package config

import (
	"bytes"
	"encoding/json"
	"regexp"

	"go.yaml.in/yaml/v3"

	"github.com/agentbackplane/backplane/inputschema"
)

var (
	toolName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)
	envName  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

func (p *parser) tools(c *Config, v *yaml.Node) error {
	names := map[string]int{} // name -> line
	return p.sequence(v, "tools", func(item *yaml.Node) error {
		t := ToolConfig{Line: item.Line} // Dir: the workspace unless given (finish)
		var nameNode, schemaKey, schemaNode *yaml.Node
		err := p.mapping(item, "a tool", func(key string, k, v *yaml.Node) error {
			var err error
			switch key {
			case "name":
				nameNode = v
				if t.Name, err = p.str(v, "name"); err == nil && !toolName.MatchString(t.Name) {
					err = p.errAt(v, "tool name %q: use 1 to 128 letters, digits, '_', '-' or '.'", t.Name)
				}
			case "description":
				t.Description, err = p.str(v, "description")
			case "input_schema":
				schemaKey, schemaNode = k, v
			case "command":
				if t.Command, err = p.strList(v, "command"); err == nil && (len(t.Command) == 0 || t.Command[0] == "") {
					err = p.errAt(v, "command must name a program: [program, arg, ...]")
				}
			case "env":
				err = p.sequence(v, "env", func(item *yaml.Node) error {
					s, err := p.str(item, "env entry")
					if err == nil && !envName.MatchString(s) {
						err = p.errAt(item, "env: %q is not an environment variable name", s)
					}
					t.Env = append(t.Env, s)
					return err
				})
			case "dir":
				var s string
				if s, err = p.str(v, "dir"); err == nil && s != "" {
					t.Dir = resolve(c.Dir, s)
				}
			case "timeout":
				if t.Timeout, err = p.duration(v, "timeout"); err == nil && t.Timeout <= 0 {
					err = p.errAt(v, "timeout must be positive")
				}
			case "max_output_bytes":
				t.MaxOutputBytes, err = p.positiveInt(v, key)
			case "main_arg":
				t.MainArg, err = p.mainArg(v)
			case "sandbox":
				t.Sandbox, err = p.sandbox(c, v)
			case "safety":
				err = p.mapping(v, "safety", func(key string, k, v *yaml.Node) error {
					b, err := p.boolean(v, key)
					switch key {
					case "read_only":
						t.Safety.ReadOnly = b
					case "idempotent":
						t.Safety.Idempotent = b
					case "requires_approval":
						t.Safety.RequiresApproval = b
					}
					return err
				}, "read_only", "idempotent", "requires_approval")
			}
			return err
		}, "name", "description", "input_schema", "command", "env", "dir", "timeout", "max_output_bytes", "safety", "sandbox", "main_arg")
		if err != nil {
			return err
		}
		if nameNode == nil {
			return p.errAt(item, "a tool needs a name")
		}
		if line, ok := names[t.Name]; ok {
			return p.errAt(nameNode, "tool %s is already defined at line %d", t.Name, line)
		}
		names[t.Name] = nameNode.Line
		if t.Command == nil {
			return p.errAt(item, "tool %s needs a command: [program, arg, ...]", t.Name)
		}
		if schemaNode == nil || isNull(schemaNode) {
			at := item
			if schemaKey != nil {
				at = schemaKey
			}
			return p.errAt(at, "tool %s needs an input_schema", t.Name)
		}
		if err := p.schema(&t, c, schemaKey, schemaNode); err != nil {
			return err
		}
		c.Tools = append(c.Tools, t)
		return nil
	})
}

// schema converts a tool's input_schema and compiles it, as the gateway
// will, so that a schema the gateway would refuse stops the start.
func (p *parser) schema(t *ToolConfig, c *Config, key, v *yaml.Node) error {
	var b bytes.Buffer
	nodes := maxSchemaNodes
	if err := p.emitJSON(&b, v, 0, &nodes); err != nil {
		return err
	}
	t.InputSchemaJSON = b.Bytes()
	dec := json.NewDecoder(bytes.NewReader(t.InputSchemaJSON))
	dec.UseNumber()
	if err := dec.Decode(&t.InputSchema); err != nil {
		return p.errAt(key, "tool %s: input_schema: %v", t.Name, err) // cannot happen: emitJSON wrote it
	}
	limits := c.Limits.Schema()
	if _, err := inputschema.CompileValue(t.InputSchema, &inputschema.CompileOptions{Limits: limits}); err != nil {
		return p.errAt(key, "tool %s: input_schema: %v", t.Name, err)
	}
	return nil
}
