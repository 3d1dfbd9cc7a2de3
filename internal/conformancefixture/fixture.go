//lint:file-ignore SA1019 sampling and logging are deprecated only from protocol 2026-07-28; the suite's scenarios (2025-11-25 and older) test them.

// Package conformancefixture is an MCP server that implements the test
// tools, resources and prompts the official conformance suite
// (@modelcontextprotocol/conformance, pinned in testdata/conformance) calls
// in its server scenarios: tools returning every content type, an error,
// logging and progress during a call, sampling and elicitation requests
// (including the SEP-1034 defaults and SEP-1330 enum schemas), a JSON
// Schema 2020-12 input schema, a mid-call SSE stream close, static text and
// binary resources, a resource template, subscriptions, prompts with
// arguments, an embedded resource and an image, and completion.
//
// It promises what the suite checks, nothing more: it is a test peer, run
// directly against the suite (to show the fixture is right) and as
// Backplane's upstream (to show what Backplane keeps). The names and texts
// are the ones the suite's scenario descriptions give.
package conformancefixture

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Version is the fixture's implementation version, sent in initialize.
const Version = "1.0.0"

// firstUnsupportedVersion is the first protocol version the fixture does
// not negotiate (see New).
const firstUnsupportedVersion = "2026-07-28"

// step is the pause between the notifications of the logging and progress
// tools: the suite asks for ~50ms, so that a client sees several
// notifications arrive during one call rather than all at once.
const step = 50 * time.Millisecond

// New returns the fixture server. Serve it over any transport (stdio or
// streamable HTTP); every session shares its subscriptions.
func New() *mcp.Server {
	return newServer(slices.DeleteFunc(mcp.SupportedProtocolVersions(), func(v string) bool {
		return v >= firstUnsupportedVersion
	}))
}

// NewStateless returns the fixture server offering 2026-07-28 as well, for
// a stateless HTTP handler (the 2026-07-28 suite run against the fixture
// itself): its tools that put requests to the client in the middle of a
// call fail there, as that revision has no such requests.
func NewStateless() *mcp.Server {
	s := newServer(mcp.SupportedProtocolVersions())
	addMRTR(s) // the multi round-trip tools of 2026-07-28 (mrtr.go)
	return s
}

func newServer(versions []string) *mcp.Server {
	f := &fixture{subscribed: map[string]int{}}
	s := mcp.NewServer(&mcp.Implementation{Name: "backplane-conformance-fixture", Version: Version}, &mcp.ServerOptions{
		// The SDK's default ({"logging":{}}), kept explicit: the
		// logging tool and logging/setLevel need it.
		Capabilities:       &mcp.ServerCapabilities{Logging: &mcp.LoggingCapabilities{}},
		CompletionHandler:  complete,
		SubscribeHandler:   f.subscribe,
		UnsubscribeHandler: f.unsubscribe,
		// The suite's versions. 2026-07-28 forbids a server's requests
		// during a call (sampling, elicitation: multi round-trip instead)
		// and takes the log level from each request; the fixture does
		// what the earlier versions define, so it does not offer that one.
		SupportedProtocolVersions: versions,
	})
	addTools(s)
	addResources(s)
	addPrompts(s)
	return s
}

// fixture holds the server's state: the subscribed resource URIs.
type fixture struct {
	mu         sync.Mutex
	subscribed map[string]int // URI -> number of subscriptions
}

// errNoURI is the answer to a subscription request without a URI.
var errNoURI = errors.New("conformance fixture: a subscription needs a uri")

func (f *fixture) subscribe(_ context.Context, req *mcp.SubscribeRequest) error {
	if req.Params == nil || req.Params.URI == "" {
		return errNoURI
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.subscribed[req.Params.URI]++
	return nil
}

func (f *fixture) unsubscribe(_ context.Context, req *mcp.UnsubscribeRequest) error {
	if req.Params == nil || req.Params.URI == "" {
		return errNoURI
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.subscribed[req.Params.URI] <= 1 {
		delete(f.subscribed, req.Params.URI)
	} else {
		f.subscribed[req.Params.URI]--
	}
	return nil
}

// completionWords are the values completion/complete offers for the
// arguments of test_prompt_with_arguments, filtered by the typed prefix.
var completionWords = []string{"paris", "park", "party", "test", "testing", "tested"}

// complete answers completion/complete: the words that start with the
// typed value for the prompt test_prompt_with_arguments, no values for
// anything else (an empty list is a valid answer).
func complete(_ context.Context, req *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
	res := &mcp.CompleteResult{Completion: mcp.CompletionResultDetails{Values: []string{}}}
	p := req.Params
	if p == nil || p.Ref == nil || p.Ref.Type != "ref/prompt" || p.Ref.Name != "test_prompt_with_arguments" {
		return res, nil
	}
	for _, w := range completionWords {
		if strings.HasPrefix(w, p.Argument.Value) {
			res.Completion.Values = append(res.Completion.Values, w)
		}
	}
	res.Completion.Total = len(res.Completion.Values)
	return res, nil
}

// text is a one-text-block tool result.
func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

// toolError is a tool result with isError set: the protocol's way for a
// tool to fail, as opposed to a JSON-RPC error.
func toolError(format string, args ...any) *mcp.CallToolResult {
	r := text(fmt.Sprintf(format, args...))
	r.IsError = true
	return r
}

// noArgs is the input schema of the tools that take no arguments.
var noArgs = json.RawMessage(`{"type":"object","properties":{}}`)

// schema2020 is json_schema_2020_12_tool's input schema: the suite checks
// that $schema, $defs and additionalProperties reach the client unchanged.
var schema2020 = json.RawMessage(`{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "$defs": {
    "address": {
      "type": "object",
      "properties": {"street": {"type": "string"}, "city": {"type": "string"}}
    }
  },
  "properties": {
    "name": {"type": "string"},
    "address": {"$ref": "#/$defs/address"}
  },
  "additionalProperties": false
}`)

// stringArg is the input schema of a tool with one required string argument.
func stringArg(name, desc string) json.RawMessage {
	b, _ := json.Marshal(map[string]any{
		"type":       "object",
		"properties": map[string]any{name: map[string]any{"type": "string", "description": desc}},
		"required":   []string{name},
	})
	return b
}

// argString reads a string argument of a call; "" when it is absent or
// not a string.
func argString(req *mcp.CallToolRequest, name string) string {
	var args map[string]any
	if len(req.Params.Arguments) > 0 {
		_ = json.Unmarshal(req.Params.Arguments, &args)
	}
	s, _ := args[name].(string)
	return s
}

// pause waits for d or the end of the call.
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func addTools(s *mcp.Server) {
	// Every tool says it is read-only: none changes anything (a gateway
	// such as Backplane asks a person before a call of any other upstream
	// tool). The ones that only return fixed content are idempotent too;
	// those that ask the client (sampling, elicitation) are not.
	asks := map[string]bool{"test_sampling": true, "test_elicitation": true,
		"test_elicitation_sep1034_defaults": true, "test_elicitation_sep1330_enums": true}
	add := func(name, desc string, schema json.RawMessage, h mcp.ToolHandler) {
		s.AddTool(&mcp.Tool{Name: name, Description: desc, InputSchema: schema,
			Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: !asks[name]}}, h)
	}
	add("test_simple_text", "Returns a simple text block", noArgs,
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return text("This is a simple text response for testing."), nil
		})
	add("test_image_content", "Returns a 1x1 PNG image", noArgs,
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.ImageContent{Data: pngPixel, MIMEType: "image/png"}}}, nil
		})
	add("test_audio_content", "Returns a short WAV clip", noArgs,
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.AudioContent{Data: wavClip, MIMEType: "audio/wav"}}}, nil
		})
	add("test_embedded_resource", "Returns an embedded text resource", noArgs,
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{
				URI: "test://embedded-resource", MIMEType: "text/plain", Text: "This is an embedded resource content.",
			}}}}, nil
		})
	add("test_multiple_content_types", "Returns text, an image and an embedded resource", noArgs,
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{
				&mcp.TextContent{Text: "Multiple content types test:"},
				&mcp.ImageContent{Data: pngPixel, MIMEType: "image/png"},
				&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{
					URI: "test://mixed-content-resource", MIMEType: "application/json", Text: `{"test":"data","value":123}`,
				}},
			}}, nil
		})
	add("test_tool_with_logging", "Sends three info log messages during the call", noArgs, toolWithLogging)
	add("test_error_handling", "Always fails (isError: true)", noArgs,
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return toolError("This tool intentionally returns an error for testing"), nil
		})
	add("test_tool_with_progress", "Reports progress 0, 50 and 100 of 100 when the call carries a progress token", noArgs, toolWithProgress)
	add("test_sampling", "Asks the client for an LLM completion of prompt (sampling/createMessage)",
		stringArg("prompt", "The prompt to send to the LLM"), sampling)
	add("test_elicitation", "Asks the client for a username and an email (elicitation/create)",
		stringArg("message", "The message to show the user"), elicitation)
	add("test_elicitation_sep1034_defaults", "Elicits a form whose fields carry default values (SEP-1034)", noArgs,
		elicitWith("Please review and update the form fields with defaults", sep1034Schema))
	add("test_elicitation_sep1330_enums", "Elicits a form with the five enum styles of SEP-1330", noArgs,
		elicitWith("Please select options from the enum fields", sep1330Schema))
	add("json_schema_2020_12_tool", "Tool with JSON Schema 2020-12 features", schema2020,
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return text("Received: " + string(req.Params.Arguments)), nil
		})
	add("test_reconnection", "Closes its SSE stream mid-call, then answers on the resumed stream (SEP-1699)", noArgs, reconnection)
}

func toolWithLogging(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	msgs := []string{"Tool execution started", "Tool processing data", "Tool execution completed"}
	for i, m := range msgs {
		if i > 0 {
			if err := pause(ctx, step); err != nil {
				return nil, err
			}
		}
		// Log filters by the session's logging/setLevel.
		if err := req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: "info", Logger: "conformance-fixture", Data: m}); err != nil {
			return toolError("sending a log message: %v", err), nil
		}
	}
	return text("Tool with logging executed successfully"), nil
}

func toolWithProgress(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	token := req.Params.GetProgressToken()
	for i, p := range []float64{0, 50, 100} {
		if i > 0 {
			if err := pause(ctx, step); err != nil {
				return nil, err
			}
		}
		if token == nil {
			continue
		}
		err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
			ProgressToken: token, Progress: p, Total: 100, Message: fmt.Sprintf("step %d of 3", i+1),
		})
		if err != nil {
			return toolError("sending a progress notification: %v", err), nil
		}
	}
	return text("Tool with progress executed successfully"), nil
}

func sampling(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	prompt := argString(req, "prompt")
	if prompt == "" {
		return toolError("test_sampling needs a prompt (a string)"), nil
	}
	res, err := req.Session.CreateMessage(ctx, &mcp.CreateMessageParams{
		Messages:  []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: prompt}}},
		MaxTokens: 100,
	})
	if err != nil {
		return toolError("sampling failed: %v", err), nil
	}
	answer := ""
	if t, ok := res.Content.(*mcp.TextContent); ok {
		answer = t.Text
	} else if res.Content != nil {
		b, _ := json.Marshal(res.Content)
		answer = string(b)
	}
	return text("LLM response: " + answer), nil
}

// elicitationSchema is test_elicitation's form: two required strings.
var elicitationSchema = json.RawMessage(`{
  "type": "object",
  "properties": {
    "username": {"type": "string", "description": "User's response"},
    "email": {"type": "string", "description": "User's email address"}
  },
  "required": ["username", "email"]
}`)

func elicitation(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	msg := argString(req, "message")
	if msg == "" {
		return toolError("test_elicitation needs a message (a string)"), nil
	}
	res, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Message: msg, RequestedSchema: elicitationSchema})
	if err != nil {
		return toolError("elicitation failed: %v", err), nil
	}
	content, _ := json.Marshal(res.Content)
	return text(fmt.Sprintf("User response: action=%s, content=%s", res.Action, content)), nil
}

// sep1034Schema has a default for every primitive type (SEP-1034).
var sep1034Schema = json.RawMessage(`{
  "type": "object",
  "properties": {
    "name": {"type": "string", "description": "User name", "default": "John Doe"},
    "age": {"type": "integer", "description": "User age", "default": 30},
    "score": {"type": "number", "description": "User score", "default": 95.5},
    "status": {"type": "string", "description": "User status", "enum": ["active", "inactive", "pending"], "default": "active"},
    "verified": {"type": "boolean", "description": "Verification status", "default": true}
  }
}`)

// sep1330Schema has the five enum styles of SEP-1330.
var sep1330Schema = json.RawMessage(`{
  "type": "object",
  "properties": {
    "untitledSingle": {"type": "string", "description": "Untitled single-select", "enum": ["option1", "option2", "option3"]},
    "titledSingle": {"type": "string", "description": "Titled single-select", "oneOf": [
      {"const": "value1", "title": "First Option"},
      {"const": "value2", "title": "Second Option"},
      {"const": "value3", "title": "Third Option"}
    ]},
    "legacyEnum": {"type": "string", "description": "Legacy titled (enumNames)", "enum": ["opt1", "opt2", "opt3"],
      "enumNames": ["Option One", "Option Two", "Option Three"]},
    "untitledMulti": {"type": "array", "description": "Untitled multi-select",
      "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
    "titledMulti": {"type": "array", "description": "Titled multi-select", "items": {"anyOf": [
      {"const": "value1", "title": "First Choice"},
      {"const": "value2", "title": "Second Choice"},
      {"const": "value3", "title": "Third Choice"}
    ]}}
  }
}`)

// elicitWith is a no-argument tool that elicits schema with message.
func elicitWith(message string, schema json.RawMessage) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		res, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Message: message, RequestedSchema: schema})
		if err != nil {
			return toolError("elicitation failed: %v", err), nil
		}
		content, _ := json.Marshal(res.Content)
		return text(fmt.Sprintf("Elicitation completed: action=%s, content=%s", res.Action, content)), nil
	}
}

// reconnectAfter is the retry delay test_reconnection sends when it closes
// its stream, and how long it waits before answering (so that the answer
// goes to the resumed stream, or to the event store the resumption reads).
const reconnectAfter = 100 * time.Millisecond

func reconnection(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	// Only the streamable HTTP transport can close a stream; over stdio
	// the tool just answers.
	if req.Extra != nil && req.Extra.CloseSSEStream != nil {
		req.Extra.CloseSSEStream(mcp.CloseSSEStreamArgs{RetryAfter: reconnectAfter})
		if err := pause(ctx, 2*reconnectAfter); err != nil {
			return nil, err
		}
	}
	return text("Reconnection test completed"), nil
}
