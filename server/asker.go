package server

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbackplane/backplane/tool"
)

// answerProperty is the one property of the form an ask_user_question
// elicitation requests.
const answerProperty = "answer"

// titledEnumVersion is the first protocol version whose elicitation schemas
// have titled single-select enums (oneOf of {const, title}); older ones
// title enum values with enumNames, which 2025-11-25 keeps as legacy.
const titledEnumVersion = "2025-11-25"

// elicitAsker is the tool.Asker of one tools/call: it puts the
// ask_user_question question to the person at the client's end of the
// session the call came in on, through elicitation/create (form mode).
//
// The form has one string property, "answer": with options and no free-form
// answer, a single-select enum of the options' values titled with their
// labels; otherwise a free string (the options, if any, are listed in the
// message), described by the placeholder. Accept gives the answer; decline
// and cancel are [tool.ErrDeclined]. The question's own deadline (ctx)
// bounds the elicitation.
type elicitAsker struct {
	ss *mcp.ServerSession
	// version is the session's negotiated protocol version: it decides how
	// option titles are written.
	version string
}

// newElicitAsker returns the Asker of a call on ss, or nil when the client
// did not declare the elicitation capability (form mode): the tool then
// says it has no channel, as it does without one.
func newElicitAsker(ss *mcp.ServerSession) tool.Asker {
	if !supportsElicitation(ss) {
		return nil
	}
	return &elicitAsker{ss: ss, version: negotiatedVersion(ss)}
}

// negotiatedVersion is the protocol version the session runs: the one the
// client asked for when this server speaks it, else the newest served (what
// the SDK answers initialize with).
func negotiatedVersion(ss *mcp.ServerSession) string {
	if p := ss.InitializeParams(); p != nil && slices.Contains(ProtocolVersions, p.ProtocolVersion) {
		return p.ProtocolVersion
	}
	return ProtocolVersions[0]
}

// Ask implements tool.Asker.
func (a *elicitAsker) Ask(ctx context.Context, q tool.Question) (tool.Answer, error) {
	res, err := a.ss.Elicit(ctx, &mcp.ElicitParams{
		Mode:            "form",
		Message:         questionMessage(q),
		RequestedSchema: questionSchema(q, a.version),
	})
	if err != nil {
		if ctx.Err() != nil {
			// The question's deadline or the call's end: the tool tells
			// them apart by ctx.
			return tool.Answer{}, fmt.Errorf("elicitation: %w", ctx.Err())
		}
		return tool.Answer{}, fmt.Errorf("elicitation: %w", err)
	}
	switch res.Action {
	case "accept":
	case "decline":
		return tool.Answer{}, fmt.Errorf("the person declined the elicitation: %w", tool.ErrDeclined)
	case "cancel":
		return tool.Answer{}, fmt.Errorf("the person dismissed the elicitation: %w", tool.ErrDeclined)
	default:
		return tool.Answer{}, fmt.Errorf("%w: elicitation: unknown action %q", tool.ErrMalformedResult, res.Action)
	}
	v, ok := res.Content[answerProperty].(string)
	if !ok {
		return tool.Answer{}, fmt.Errorf("%w: elicitation accepted without a string %q: %v", tool.ErrMalformedResult, answerProperty, res.Content)
	}
	return answerOf(q, v), nil
}

// answerOf reads what the person submitted: an option's value is that
// option; in a free-form field, the exact label of an option is that option
// too (the person read the labels), and anything else is their own answer.
// A value that is neither (the client broke the enum) is returned as a
// non-free-form answer, which the tool reports as malformed.
func answerOf(q tool.Question, v string) tool.Answer {
	for _, o := range q.Options {
		if o.Value == v {
			return tool.Answer{Value: o.Value, Label: o.Label}
		}
	}
	if q.AllowFreeform {
		for _, o := range q.Options {
			if o.Label == v {
				return tool.Answer{Value: o.Value, Label: o.Label}
			}
		}
		return tool.Answer{Value: v, Freeform: true}
	}
	return tool.Answer{Value: v}
}

// questionMessage is the text shown: the question, then the options when
// the form cannot show all of them (a free-form field shows none, and an
// enum's entries carry no description).
func questionMessage(q tool.Question) string {
	described := slices.ContainsFunc(q.Options, func(o tool.Option) bool { return o.Description != "" })
	if len(q.Options) == 0 || !q.AllowFreeform && !described {
		return q.Question
	}
	var b strings.Builder
	b.WriteString(q.Question)
	b.WriteString("\n\nOptions:")
	for _, o := range q.Options {
		b.WriteString("\n- ")
		b.WriteString(o.Label)
		if o.Description != "" {
			b.WriteString(": ")
			b.WriteString(o.Description)
		}
	}
	if q.AllowFreeform {
		b.WriteString("\n\nAnswer with one of the options or in your own words.")
	}
	return b.String()
}

// questionSchema is the requested schema: a flat object with one primitive
// property, as elicitation allows.
func questionSchema(q tool.Question, version string) map[string]any {
	prop := map[string]any{"type": "string", "title": "Answer"}
	if q.Placeholder != "" {
		prop["description"] = q.Placeholder
	}
	if !q.AllowFreeform && len(q.Options) > 0 {
		// One entry per value: the tool maps a value to its first option.
		var opts []tool.Option
		for _, o := range q.Options {
			if !slices.ContainsFunc(opts, func(p tool.Option) bool { return p.Value == o.Value }) {
				opts = append(opts, o)
			}
		}
		// A titled enum's const and title must not be empty (2025-11-25,
		// and the Go SDK's client checks it); enum and enumNames take any
		// string and are still valid in 2025-11-25.
		titled := version >= titledEnumVersion && !slices.ContainsFunc(opts, func(o tool.Option) bool {
			return o.Value == "" || o.Label == ""
		})
		if titled {
			oneOf := make([]any, len(opts))
			for i, o := range opts {
				oneOf[i] = map[string]any{"const": o.Value, "title": o.Label}
			}
			prop["oneOf"] = oneOf
		} else {
			values, names := make([]string, len(opts)), make([]string, len(opts))
			differ := false
			for i, o := range opts {
				values[i], names[i] = o.Value, o.Label
				differ = differ || o.Value != o.Label
			}
			prop["enum"] = values
			if differ {
				prop["enumNames"] = names
			}
		}
	}
	return map[string]any{
		"type":       "object",
		"properties": map[string]any{answerProperty: prop},
		"required":   []string{answerProperty},
	}
}
