//lint:file-ignore SA1019 sampling and roots are deprecated at 2026-07-28 and still in force; the suite's input-required-result scenarios ask for them.

package conformancefixture

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The tools and the prompt of the 2026-07-28 scenarios input-required-
// result-* (multi round-trip requests, SEP-2322), and the tool with an
// x-mcp-header annotation of http-custom-header-server-validation: each
// of the first answers its first
// call with input_required, the requests the scenario names, and, where it
// says so, a request state of its own (HMAC-signed: the tampered-state
// scenario alters it); the retry carrying the answers completes.
//
// They are served by the stateless fixture (NewStateless), and alone by
// NewMRTR, which `backplane serve` runs as a second stdio upstream in the
// 2026-07-28 suite run: it offers 2026-07-28, so Backplane speaks that
// revision to it and relays its input requests to the suite (an upstream
// of 2025-11-25 would ask during the call instead, which a 2026-07-28
// caller cannot be asked).

// NewMRTR returns a server with only the multi round-trip tools and
// prompt, offering every version the SDK speaks (2026-07-28 included).
func NewMRTR() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "backplane-conformance-fixture-mrtr", Version: Version}, nil)
	addMRTR(s)
	return s
}

// stateKey signs the fixture's request states (one per process).
var stateKey = func() []byte {
	k := make([]byte, 32)
	rand.Read(k)
	return k
}()

func signState(payload string) string {
	m := hmac.New(sha256.New, stateKey)
	m.Write([]byte(payload))
	return base64.RawURLEncoding.EncodeToString([]byte(payload)) + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// verifyState returns the payload of a state signState made.
func verifyState(state string) (string, bool) {
	p64, m64, ok := strings.Cut(state, ".")
	payload, perr := base64.RawURLEncoding.DecodeString(p64)
	mac, merr := base64.RawURLEncoding.DecodeString(m64)
	if !ok || perr != nil || merr != nil {
		return "", false
	}
	m := hmac.New(sha256.New, stateKey)
	m.Write(payload)
	return string(payload), hmac.Equal(mac, m.Sum(nil))
}

// errBadState is the answer to a request state that does not verify.
var errBadState = &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "requestState does not verify"}

func elicitFor(message, prop, typ string) *mcp.ElicitParams {
	return &mcp.ElicitParams{Mode: "form", Message: message, RequestedSchema: map[string]any{
		"type": "object", "properties": map[string]any{prop: map[string]any{"type": typ}}, "required": []string{prop},
	}}
}

func samplingFor(text string, maxTokens int64) *mcp.CreateMessageParams {
	return &mcp.CreateMessageParams{MaxTokens: maxTokens, Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: text}}}}
}

// elicited is the content member name of an elicitation answer, "" when
// the answer is absent or not one.
func elicited(resp mcp.InputResponseMap, key, member string) (string, bool) {
	er, ok := resp[key].(*mcp.ElicitResult)
	if !ok {
		return "", false
	}
	v, _ := er.Content[member].(string)
	return v, true
}

func sampled(resp mcp.InputResponseMap, key string) (string, bool) {
	switch r := resp[key].(type) {
	case *mcp.CreateMessageResult:
		if t, ok := r.Content.(*mcp.TextContent); ok {
			return t.Text, true
		}
		return "", true
	case *mcp.CreateMessageWithToolsResult:
		for _, c := range r.Content {
			if t, ok := c.(*mcp.TextContent); ok {
				return t.Text, true
			}
		}
		return "", true
	}
	return "", false
}

func rootsOf(resp mcp.InputResponseMap, key string) ([]string, bool) {
	r, ok := resp[key].(*mcp.ListRootsResult)
	if !ok {
		return nil, false
	}
	var uris []string
	for _, root := range r.Roots {
		uris = append(uris, root.URI)
	}
	return uris, true
}

func inputRequired(reqs mcp.InputRequestMap, state string) *mcp.CallToolResult {
	return &mcp.CallToolResult{InputRequests: reqs, RequestState: state}
}

func addMRTR(s *mcp.Server) {
	// The tool of http-custom-header-server-validation (SEP-2243): its
	// region is mirrored into Mcp-Param-Region, which a server checks.
	s.AddTool(&mcp.Tool{Name: "test_mcp_param_header", Description: "Echoes its region, which travels in Mcp-Param-Region too",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"region":{"type":"string","x-mcp-header":"Region"}},"required":["region"]}`),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true}},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var args struct{ Region string }
			json.Unmarshal(req.Params.Arguments, &args)
			return text("region " + args.Region), nil
		})
	add := func(name, desc string, h mcp.ToolHandler) {
		s.AddTool(&mcp.Tool{Name: name, Description: desc, InputSchema: noArgs,
			Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}}, h)
	}
	userName := func() mcp.InputRequestMap {
		return mcp.InputRequestMap{"user_name": elicitFor("What is your name?", "name", "string")}
	}
	add("test_input_required_result_elicitation", "Asks the client for a name (input_required), then greets it", func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if name, ok := elicited(req.Params.InputResponses, "user_name", "name"); ok {
			return text("Hello, " + name + "!"), nil
		}
		return inputRequired(userName(), ""), nil
	})
	add("test_input_required_result_sampling", "Asks the client for a completion (input_required)", func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if answer, ok := sampled(req.Params.InputResponses, "capital_question"); ok {
			return text("The client answered: " + answer), nil
		}
		return inputRequired(mcp.InputRequestMap{"capital_question": samplingFor("What is the capital of France?", 100)}, ""), nil
	})
	add("test_input_required_result_list_roots", "Asks the client for its roots (input_required)", func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if roots, ok := rootsOf(req.Params.InputResponses, "client_roots"); ok {
			return text("The client's roots: " + strings.Join(roots, ", ")), nil
		}
		return inputRequired(mcp.InputRequestMap{"client_roots": &mcp.ListRootsParams{}}, ""), nil
	})
	confirm := func() mcp.InputRequestMap {
		return mcp.InputRequestMap{"confirm": elicitFor("Please confirm", "ok", "boolean")}
	}
	stateTool := func(name, payload string) {
		add(name, "Asks for a confirmation with a signed requestState", func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			if st := req.Params.RequestState; st != "" {
				if got, ok := verifyState(st); !ok || got != payload {
					return nil, errBadState
				}
				if _, ok := req.Params.InputResponses["confirm"].(*mcp.ElicitResult); ok {
					return text("state-ok: the request state verified"), nil
				}
			}
			return inputRequired(confirm(), signState(payload)), nil
		})
	}
	stateTool("test_input_required_result_request_state", "request-state/1")
	stateTool("test_input_required_result_tampered_state", "tampered-state/1")
	add("test_input_required_result_multiple_inputs", "Asks for a name, a completion and the roots at once", func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		const payload = "multiple-inputs/1"
		resp := req.Params.InputResponses
		if st := req.Params.RequestState; st != "" {
			if got, ok := verifyState(st); !ok || got != payload {
				return nil, errBadState
			}
			name, okName := elicited(resp, "user_name", "name")
			greeting, okGreeting := sampled(resp, "greeting")
			roots, okRoots := rootsOf(resp, "client_roots")
			if okName && okGreeting && okRoots {
				return text(fmt.Sprintf("name %s, greeting %q, roots %s", name, greeting, strings.Join(roots, ", "))), nil
			}
		}
		return inputRequired(mcp.InputRequestMap{
			"user_name":    elicitFor("What is your name?", "name", "string"),
			"greeting":     samplingFor("Generate a greeting", 50),
			"client_roots": &mcp.ListRootsParams{},
		}, signState(payload)), nil
	})
	add("test_input_required_result_multi_round", "Asks twice, a round each, then answers", func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		resp := req.Params.InputResponses
		round := ""
		if st := req.Params.RequestState; st != "" {
			var ok bool
			if round, ok = verifyState(st); !ok {
				return nil, errBadState
			}
		}
		switch round {
		case "multi-round/1":
			if name, ok := elicited(resp, "step1", "name"); ok {
				b, _ := json.Marshal(name)
				return inputRequired(mcp.InputRequestMap{"step2": elicitFor("Step 2: What is your favorite color?", "color", "string")},
					signState("multi-round/2:"+string(b))), nil
			}
		default:
			if name, ok := strings.CutPrefix(round, "multi-round/2:"); ok {
				if color, ok := elicited(resp, "step2", "color"); ok {
					var n string
					json.Unmarshal([]byte(name), &n)
					return text(fmt.Sprintf("%s likes %s", n, color)), nil
				}
				return inputRequired(mcp.InputRequestMap{"step2": elicitFor("Step 2: What is your favorite color?", "color", "string")}, req.Params.RequestState), nil
			}
		}
		return inputRequired(mcp.InputRequestMap{"step1": elicitFor("Step 1: What is your name?", "name", "string")}, signState("multi-round/1")), nil
	})
	add("test_input_required_result_capabilities", "Asks only for what the call's client capabilities declare", func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		resp := req.Params.InputResponses
		if len(resp) > 0 {
			return text("answered"), nil
		}
		caps := req.ClientCapabilities()
		reqs := mcp.InputRequestMap{}
		if caps != nil && caps.Elicitation != nil {
			reqs["user_name"] = elicitFor("What is your name?", "name", "string")
		}
		if caps != nil && caps.Sampling != nil {
			reqs["capital_question"] = samplingFor("What is the capital of France?", 100)
		}
		if len(reqs) == 0 {
			return text("the client declared neither elicitation nor sampling"), nil
		}
		return inputRequired(reqs, ""), nil
	})
	s.AddPrompt(&mcp.Prompt{Name: "test_input_required_result_prompt", Description: "Asks the client for its context (input_required)"},
		func(_ context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			if c, ok := elicited(req.Params.InputResponses, "user_context", "context"); ok {
				return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: "Context: " + c}}}}, nil
			}
			return &mcp.GetPromptResult{InputRequests: mcp.InputRequestMap{
				"user_context": elicitFor("What context should the prompt use?", "context", "string"),
			}}, nil
		})
}
