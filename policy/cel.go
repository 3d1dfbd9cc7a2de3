package policy

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/google/cel-go/cel"

	"github.com/agentbackplane/backplane/internal/jsonstrict"
)

// CEL conditions see four variables: caller, session and tool (strings)
// and args (a map from string to dyn: the validated arguments, integers as
// int (or uint beyond int64), other numbers as double).

type celEnv struct {
	env   *cel.Env
	limit uint64
}

const (
	maxCELBytes = 16 << 10
	maxCELDepth = 128
)

func newCELEnv(limit uint64) (*celEnv, error) {
	env, err := cel.NewEnv(
		cel.Variable("caller", cel.StringType),
		cel.Variable("session", cel.StringType),
		cel.Variable("tool", cel.StringType),
		cel.Variable("args", cel.MapType(cel.StringType, cel.DynType)),
		cel.ParserExpressionSizeLimit(maxCELBytes),
		cel.ParserRecursionLimit(maxCELDepth),
	)
	if err != nil {
		return nil, fmt.Errorf("policy: CEL environment: %w", err)
	}
	return &celEnv{env: env, limit: limit}, nil
}

type condition struct {
	prg cel.Program
}

func (e *celEnv) compile(expr string) (*condition, error) {
	if strings.TrimSpace(expr) == "" {
		return nil, errors.New("an empty condition")
	}
	if len(expr) > maxCELBytes {
		return nil, fmt.Errorf("the condition is longer than %d bytes", maxCELBytes)
	}
	ast, iss := e.env.Compile(expr)
	if iss != nil && iss.Err() != nil {
		return nil, fmt.Errorf("CEL: %s", strings.ReplaceAll(iss.Err().Error(), "\n", " "))
	}
	if !ast.OutputType().IsExactType(cel.BoolType) {
		return nil, fmt.Errorf("the condition is of type %s, not bool", ast.OutputType())
	}
	prg, err := e.env.Program(ast, cel.CostLimit(e.limit))
	if err != nil {
		return nil, fmt.Errorf("CEL: %v", err)
	}
	return &condition{prg: prg}, nil
}

func (c *condition) eval(vars map[string]any) (bool, error) {
	out, _, err := c.prg.Eval(vars)
	if err != nil {
		return false, err
	}
	b, ok := out.Value().(bool)
	if !ok {
		return false, fmt.Errorf("the condition gave %v, not a boolean", out)
	}
	return b, nil
}

// celValue converts decoded JSON for CEL: numbers exactly (an integer
// beyond int64 and uint64 is an error: there is no exact CEL value for it),
// other values as they are.
func celValue(v any, depth int) (any, error) {
	if depth > maxCELDepth {
		return nil, fmt.Errorf("the arguments are nested deeper than %d", maxCELDepth)
	}
	switch x := v.(type) {
	case nil:
		if depth == 0 {
			return map[string]any{}, nil
		}
		return nil, nil
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			c, err := celValue(e, depth+1)
			if err != nil {
				return nil, err
			}
			m[k] = c
		}
		return m, nil
	case []any:
		l := make([]any, len(x))
		for i, e := range x {
			c, err := celValue(e, depth+1)
			if err != nil {
				return nil, err
			}
			l[i] = c
		}
		return l, nil
	case jsonstrict.Number:
		return celNumber(string(x))
	case json.Number:
		return celNumber(string(x))
	case string, bool, int64, uint64, float64:
		return x, nil
	case int:
		return int64(x), nil
	}
	return nil, fmt.Errorf("a %T value cannot be given to CEL", v)
}

func celNumber(s string) (any, error) {
	if !strings.ContainsAny(s, ".eE") {
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			return i, nil
		}
		if u, err := strconv.ParseUint(s, 10, 64); err == nil {
			return u, nil
		}
		return nil, fmt.Errorf("the integer %s is beyond CEL's 64-bit integers", s)
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return nil, fmt.Errorf("the number %s: %v", s, err)
	}
	return f, nil
}
