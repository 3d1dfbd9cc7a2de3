package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// --- JSON from YAML ---

const (
	// maxSchemaNodes bounds one schema's size after aliases are expanded,
	// so a few anchors cannot make it explode.
	maxSchemaNodes = 100_000
	maxSchemaDepth = 256
)

var jsonNumber = regexp.MustCompile(`^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?$`)

// emitJSON writes the JSON value n denotes, keeping mapping order, and
// refuses what JSON cannot hold exactly.
func (p *parser) emitJSON(b *bytes.Buffer, n *yaml.Node, depth int, nodes *int) error {
	at := n
	n = deref(n)
	if *nodes--; *nodes < 0 {
		return p.errAt(at, "input_schema is larger than %d nodes (after expanding aliases)", maxSchemaNodes)
	}
	if depth > maxSchemaDepth {
		return p.errAt(at, "input_schema is nested deeper than %d", maxSchemaDepth)
	}
	switch n.Kind {
	case yaml.MappingNode:
		b.WriteByte('{')
		seen := map[string]int{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			key, err := p.key(k, seen)
			if err != nil {
				return err
			}
			if i > 0 {
				b.WriteByte(',')
			}
			b.Write(jsonString(key))
			b.WriteByte(':')
			if err := p.emitJSON(b, v, depth+1, nodes); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	case yaml.SequenceNode:
		b.WriteByte('[')
		for i, v := range n.Content {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := p.emitJSON(b, v, depth+1, nodes); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	case yaml.ScalarNode:
		switch tag := n.ShortTag(); tag {
		case "!!str", "!!timestamp": // a date is text in JSON
			b.Write(jsonString(n.Value))
		case "!!null":
			b.WriteString("null")
		case "!!bool":
			v, err := p.boolean(n, "value")
			if err != nil {
				return err
			}
			b.WriteString(strconv.FormatBool(v))
		case "!!int", "!!float":
			num, err := p.number(n)
			if err != nil {
				return err
			}
			b.WriteString(num)
		default:
			return p.errAt(at, "%s values cannot be written in JSON", tag)
		}
	default:
		return p.errAt(at, "unexpected YAML node")
	}
	return nil
}

// number returns the JSON text of a YAML number, exactly: JSON's own
// notation is kept as written; a leading '+' is dropped; 0x and 0o integers
// are converted exactly; the rest (.inf, .nan, 1_000, 017, 1.) is refused
// rather than guessed at.
func (p *parser) number(n *yaml.Node) (string, error) {
	text := n.Value
	t := strings.TrimPrefix(text, "+")
	if jsonNumber.MatchString(t) {
		return t, nil
	}
	if n.ShortTag() == "!!int" {
		sign, body := "", t
		if strings.HasPrefix(body, "-") {
			sign, body = "-", body[1:]
		}
		base := 0
		switch {
		case strings.HasPrefix(body, "0x"):
			base = 16
		case strings.HasPrefix(body, "0o"):
			base = 8
		}
		if base != 0 {
			if v, ok := new(big.Int).SetString(body[2:], base); ok {
				if v.Sign() == 0 {
					sign = ""
				}
				return sign + v.String(), nil
			}
		}
	}
	return "", p.errAt(n, "the number %s cannot be written exactly in JSON; write it as a JSON number (e.g. 15, -1.5, 2e3) or quote it", text)
}

func jsonString(s string) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(s) // a string always encodes
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// --- typed scalars and collections ---

func deref(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	n = deref(n)
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// describe names what a node holds, for "expected X, got Y".
func describe(n *yaml.Node) string {
	n = deref(n)
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!str":
			return fmt.Sprintf("the string %q", n.Value)
		case "!!int":
			return "the integer " + n.Value
		case "!!float":
			return "the number " + n.Value
		case "!!bool":
			return "the boolean " + n.Value
		case "!!null":
			return "nothing"
		case "!!timestamp":
			return "the date " + n.Value
		}
		return fmt.Sprintf("a %s value", n.ShortTag())
	}
	return "an unexpected node"
}

// key checks a mapping key: a string, not a merge key, not seen before.
func (p *parser) key(k *yaml.Node, seen map[string]int) (string, error) {
	kd := deref(k)
	if kd.Kind != yaml.ScalarNode {
		return "", p.errAt(k, "a key must be a string, not %s", describe(k))
	}
	switch kd.ShortTag() {
	case "!!str":
	case "!!merge":
		return "", p.errAt(k, "merge keys (<<) are not supported")
	default:
		return "", p.errAt(k, "a key must be a string, not %s (quote it)", describe(k))
	}
	if line, ok := seen[kd.Value]; ok {
		return "", p.errAt(k, "duplicate key %q (first at line %d)", kd.Value, line)
	}
	seen[kd.Value] = k.Line
	return kd.Value, nil
}

// mapping walks the mapping v, calling fn for each key in order. When known
// is not empty, other keys are refused. A null v is an empty mapping.
func (p *parser) mapping(v *yaml.Node, what string, fn func(key string, k, v *yaml.Node) error, known ...string) error {
	if isNull(v) {
		return nil
	}
	n := deref(v)
	if n.Kind != yaml.MappingNode {
		return p.errAt(v, "%s must be a mapping, not %s", what, describe(v))
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		key, err := p.key(k, seen)
		if err != nil {
			return err
		}
		if len(known) > 0 && !slices.Contains(known, key) {
			return p.errAt(k, "unknown key %q in %s (known: %s)", key, what, strings.Join(known, ", "))
		}
		if err := fn(key, k, val); err != nil {
			return err
		}
	}
	return nil
}

// sequence walks the list v. A null v is an empty list.
func (p *parser) sequence(v *yaml.Node, what string, fn func(item *yaml.Node) error) error {
	if isNull(v) {
		return nil
	}
	n := deref(v)
	if n.Kind != yaml.SequenceNode {
		return p.errAt(v, "%s must be a list, not %s", what, describe(v))
	}
	for _, item := range n.Content {
		if err := fn(item); err != nil {
			return err
		}
	}
	return nil
}

func (p *parser) str(v *yaml.Node, what string) (string, error) {
	n := deref(v)
	if n.Kind == yaml.ScalarNode {
		switch n.ShortTag() {
		case "!!str":
			return n.Value, nil
		case "!!null":
			return "", nil
		}
	}
	return "", p.errAt(v, "%s must be a string, not %s (quote it if it is text)", what, describe(v))
}

func (p *parser) strList(v *yaml.Node, what string) ([]string, error) {
	out := []string{}
	err := p.sequence(v, what, func(item *yaml.Node) error {
		s, err := p.str(item, what+" entry")
		out = append(out, s)
		return err
	})
	return out, err
}

var decimal = regexp.MustCompile(`^[-+]?(0|[1-9][0-9]*)$`)

// integer reads a decimal integer; other notations (0x1F, 017, 1_000) are
// refused rather than read one way or another.
func (p *parser) integer(v *yaml.Node, what string) (int64, error) {
	n := deref(v)
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
		return 0, p.errAt(v, "%s must be an integer, not %s", what, describe(v))
	}
	if !decimal.MatchString(n.Value) {
		return 0, p.errAt(v, "%s: write the integer %s in decimal", what, n.Value)
	}
	i, err := strconv.ParseInt(n.Value, 10, 64)
	if err != nil {
		return 0, p.errAt(v, "%s: %s is out of range", what, n.Value)
	}
	return i, nil
}

func (p *parser) positiveInt(v *yaml.Node, what string) (int, error) {
	i, err := p.integer(v, what)
	if err != nil {
		return 0, err
	}
	if i <= 0 || i > 1<<40 {
		return 0, p.errAt(v, "%s must be a positive number of bytes, not %d", what, i)
	}
	return int(i), nil
}

func (p *parser) boolean(v *yaml.Node, what string) (bool, error) {
	n := deref(v)
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!bool" {
		switch n.Value {
		case "true", "True", "TRUE":
			return true, nil
		case "false", "False", "FALSE":
			return false, nil
		}
	}
	return false, p.errAt(v, "%s must be true or false, not %s", what, describe(v))
}

// duration reads a Go duration (30s, 10m, 1h30m; a bare 0 is allowed).
func (p *parser) duration(v *yaml.Node, what string) (time.Duration, error) {
	n := deref(v)
	if n.Kind != yaml.ScalarNode || (n.ShortTag() != "!!str" && n.ShortTag() != "!!int") {
		return 0, p.errAt(v, "%s must be a duration such as 30s or 10m, not %s", what, describe(v))
	}
	d, err := time.ParseDuration(n.Value)
	if err != nil {
		return 0, p.errAt(v, "%s: bad duration %q: write it as 30s, 10m or 1h30m", what, n.Value)
	}
	if d < 0 {
		return 0, p.errAt(v, "%s must not be negative, not %s", what, n.Value)
	}
	return d, nil
}

// sizeUnits are the units a size may be written in: powers of 1024, as
// people mean them for files.
var sizeUnits = map[string]int64{"": 1, "B": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}

var sizeText = regexp.MustCompile(`^([0-9]{1,13})\s*([A-Za-z]*)$`)

// size reads a size in bytes: an integer, or a number with a unit (100MB,
// 1GB; KB, MB and GB are powers of 1024), at most 1 TiB.
func (p *parser) size(v *yaml.Node, what string) (int64, error) {
	n := deref(v)
	if n.Kind != yaml.ScalarNode || (n.ShortTag() != "!!str" && n.ShortTag() != "!!int") {
		return 0, p.errAt(v, "%s must be a size such as 100MB, not %s", what, describe(v))
	}
	m := sizeText.FindStringSubmatch(n.Value)
	if m == nil {
		return 0, p.errAt(v, "%s: bad size %q: write it as 100MB or 1GB", what, n.Value)
	}
	unit, ok := sizeUnits[m[2]]
	if !ok {
		return 0, p.errAt(v, "%s: unknown unit %q in %q: B, KB, MB or GB", what, m[2], n.Value)
	}
	num, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil || num > maxLogSize/unit {
		return 0, p.errAt(v, "%s: %s is more than 1TB", what, n.Value)
	}
	return num * unit, nil
}
