package builtin

import (
	"encoding/json"
	"errors"

	"github.com/agentbackplane/backplane/tool"
)

// Each tool checks its arguments twice: before the call is recorded
// (tool.Checker, called by the gateway after the schema validation) and
// again when it runs. The schema says "integer" and "minimum", but not what
// the tool can hold: 1e400 and 99999999999999999999 are integers the
// schema accepts and an int cannot; such a call must be refused before it
// reserves budget, is journaled or is put to a person for approval.

// checkers are the argument checks of the tools, by name: decoding into
// the tool's own argument type (which refuses what does not fit) and the
// bounds each tool enforces on its numbers. They do no I/O.
var checkers = map[string]func(raw json.RawMessage) error{
	"read": func(raw json.RawMessage) error {
		var a readArgs
		if err := decode(raw, &a); err != nil {
			return err
		}
		if a.Offset != nil && *a.Offset < 1 {
			return fail(tool.ClassValidation, "offset %d: lines are counted from 1", *a.Offset)
		}
		_, err := limitArg(a.Limit, 1)
		return err
	},
	"ls": func(raw json.RawMessage) error {
		var a lsArgs
		if err := decode(raw, &a); err != nil {
			return err
		}
		_, err := limitArg(a.Limit, 1)
		return err
	},
	"glob": func(raw json.RawMessage) error {
		var a globArgs
		if err := decode(raw, &a); err != nil {
			return err
		}
		_, err := limitArg(a.Limit, 1)
		return err
	},
	"grep": func(raw json.RawMessage) error {
		var a grepArgs
		if err := decode(raw, &a); err != nil {
			return err
		}
		if a.Context != nil && *a.Context < 0 {
			return fail(tool.ClassValidation, "context %d must not be negative", *a.Context)
		}
		_, err := limitArg(a.Limit, 1)
		return err
	},
	"write": func(raw json.RawMessage) error { return decode(raw, &writeArgs{}) },
	"edit":  func(raw json.RawMessage) error { return decode(raw, &editArgs{}) },
	"bash": func(raw json.RawMessage) error {
		var a bashArgs
		if err := decode(raw, &a); err != nil {
			return err
		}
		if a.Timeout != nil && *a.Timeout < 1 {
			return fail(tool.ClassValidation, "timeout %d: it is a number of seconds, at least 1", *a.Timeout)
		}
		return nil
	},
	"url_fetch": func(raw json.RawMessage) error {
		var a fetchArgs
		if err := decode(raw, &a); err != nil {
			return err
		}
		if a.MaxLength != nil && *a.MaxLength < 1 {
			return fail(tool.ClassValidation, "max_length %d must be at least 1", *a.MaxLength)
		}
		return nil
	},
	"ask_user_question": func(raw json.RawMessage) error {
		var a askArgs
		if err := decode(raw, &a); err != nil {
			return err
		}
		if a.TimeoutMS != nil && *a.TimeoutMS < 1000 {
			return fail(tool.ClassValidation, "timeout_ms %d must be at least 1000", *a.TimeoutMS)
		}
		return nil
	},
}

// Check implements tool.Checker: the error's message is the tool's own
// words (the gateway makes it a validation error).
func (b *toolBackend) Check(raw json.RawMessage) error {
	if err := b.check(raw); err != nil {
		var te *toolError
		if errors.As(err, &te) {
			return errors.New(te.msg)
		}
		return err
	}
	return nil
}
