//lint:file-ignore SA1019 sampling and logging are deprecated only from protocol 2026-07-28; the fixture serves them for the suite's 2025-11-25 scenarios.

package conformancefixture

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"image/png"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// These tests need no node: they hold the fixture to what the suite checks
// through the Go SDK's client, in process. The suite itself runs in
// conformance_test.go.

// connect serves New() to a client with opts over in-memory transports.
func connect(t *testing.T, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	ctx := context.Background()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := New().Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "0"}, opts).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func TestMedia(t *testing.T) {
	img, err := png.Decode(bytes.NewReader(pngPixel))
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != 1 || b.Dy() != 1 {
		t.Errorf("image is %v, want 1x1", b)
	}
	if r, g, b, a := img.At(0, 0).RGBA(); r != 0xffff || g != 0 || b != 0 || a != 0xffff {
		t.Errorf("pixel is %v %v %v %v, want opaque red", r, g, b, a)
	}
	// A RIFF/WAVE file whose sizes add up to its length.
	if !bytes.HasPrefix(wavClip, []byte("RIFF")) || string(wavClip[8:16]) != "WAVEfmt " || string(wavClip[36:40]) != "data" {
		t.Fatalf("not a WAV header: %q", wavClip[:44])
	}
	if riff := binary.LittleEndian.Uint32(wavClip[4:8]); int(riff) != len(wavClip)-8 {
		t.Errorf("RIFF size %d, file %d bytes", riff, len(wavClip))
	}
	if data := binary.LittleEndian.Uint32(wavClip[40:44]); int(data) != len(wavClip)-44 || data == 0 {
		t.Errorf("data size %d, file %d bytes", data, len(wavClip))
	}
}

func TestCompletion(t *testing.T) {
	cs := connect(t, nil)
	ctx := context.Background()
	res, err := cs.Complete(ctx, &mcp.CompleteParams{
		Ref:      &mcp.CompleteReference{Type: "ref/prompt", Name: "test_prompt_with_arguments"},
		Argument: mcp.CompleteParamsArgument{Name: "arg1", Value: "par"},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range res.Completion.Values {
		if !strings.HasPrefix(v, "par") {
			t.Errorf("completion %q does not start with the typed value", v)
		}
	}
	if len(res.Completion.Values) == 0 || res.Completion.Total != len(res.Completion.Values) {
		t.Errorf("completion %+v: want values starting with par, total their number", res.Completion)
	}
	// Another prompt: no values, as a list (the suite wants an array).
	res, err = cs.Complete(ctx, &mcp.CompleteParams{
		Ref:      &mcp.CompleteReference{Type: "ref/prompt", Name: "test_simple_prompt"},
		Argument: mcp.CompleteParamsArgument{Name: "x", Value: "par"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := json.Marshal(res.Completion); !bytes.Contains(b, []byte(`"values":[]`)) {
		t.Errorf("completion of another prompt: %s, want an empty values array", b)
	}
}

func TestResources(t *testing.T) {
	cs := connect(t, nil)
	ctx := context.Background()
	res, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "test://template/abc/data"})
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal([]byte(res.Contents[0].Text), &doc); err != nil || doc["id"] != "abc" || res.Contents[0].URI != "test://template/abc/data" {
		t.Errorf("template read: %+v (%v), want the id abc substituted", res.Contents[0], err)
	}
	for _, uri := range []string{"test://template//data", "test://template/a/b/data", "test://nothing"} {
		if _, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri}); err == nil {
			t.Errorf("%s was read, want resource not found", uri)
		}
	}
	res, err = cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "test://static-binary"})
	if err != nil || !bytes.Equal(res.Contents[0].Blob, pngPixel) {
		t.Errorf("static-binary: %v, want the PNG", err)
	}
	if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: "test://watched-resource"}); err != nil {
		t.Error(err)
	}
	if err := cs.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: "test://watched-resource"}); err != nil {
		t.Error(err)
	}
	if err := cs.Subscribe(ctx, &mcp.SubscribeParams{}); err == nil {
		t.Error("a subscription without a URI was accepted")
	}
}

func TestPromptArguments(t *testing.T) {
	cs := connect(t, nil)
	ctx := context.Background()
	res, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "test_prompt_with_arguments", Arguments: map[string]string{"arg1": "one", "arg2": "two"}})
	if err != nil {
		t.Fatal(err)
	}
	if txt := res.Messages[0].Content.(*mcp.TextContent).Text; !strings.Contains(txt, "one") || !strings.Contains(txt, "two") {
		t.Errorf("prompt text %q does not carry the arguments", txt)
	}
	if _, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "test_prompt_with_embedded_resource"}); err == nil {
		t.Error("test_prompt_with_embedded_resource without resourceUri was answered")
	}
}

// callText calls a tool and returns its result and first text block.
func callText(t *testing.T, cs *mcp.ClientSession, params *mcp.CallToolParams) (*mcp.CallToolResult, string) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), params)
	if err != nil {
		t.Fatalf("%s: %v", params.Name, err)
	}
	if len(res.Content) == 0 {
		t.Fatalf("%s: no content", params.Name)
	}
	txt, _ := res.Content[0].(*mcp.TextContent)
	if txt == nil {
		t.Fatalf("%s: first content is %T, not text", params.Name, res.Content[0])
	}
	return res, txt.Text
}

func TestSamplingAndElicitation(t *testing.T) {
	// A client without the capabilities: the tools fail as tools.
	bare := connect(t, nil)
	for _, p := range []*mcp.CallToolParams{
		{Name: "test_sampling", Arguments: map[string]any{"prompt": "hi"}},
		{Name: "test_elicitation", Arguments: map[string]any{"message": "hi"}},
	} {
		if res, txt := callText(t, bare, p); !res.IsError {
			t.Errorf("%s without the client capability: %q, want isError", p.Name, txt)
		}
	}

	var prompts, messages []string
	cs := connect(t, &mcp.ClientOptions{
		CreateMessageHandler: func(_ context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			prompts = append(prompts, req.Params.Messages[0].Content.(*mcp.TextContent).Text)
			return &mcp.CreateMessageResult{Role: "assistant", Model: "m", Content: &mcp.TextContent{Text: "the answer"}}, nil
		},
		ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			messages = append(messages, req.Params.Message)
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"username": "u1", "email": "e@example.com"}}, nil
		},
	})
	if res, txt := callText(t, cs, &mcp.CallToolParams{Name: "test_sampling", Arguments: map[string]any{"prompt": "the question"}}); res.IsError || !strings.Contains(txt, "the answer") {
		t.Errorf("test_sampling: %q (isError %v), want the client's answer", txt, res.IsError)
	}
	if !slices.Equal(prompts, []string{"the question"}) {
		t.Errorf("sampling prompts %q", prompts)
	}
	if res, txt := callText(t, cs, &mcp.CallToolParams{Name: "test_elicitation", Arguments: map[string]any{"message": "who?"}}); res.IsError || !strings.Contains(txt, "u1") {
		t.Errorf("test_elicitation: %q (isError %v), want the user's answer", txt, res.IsError)
	}
	if !slices.Equal(messages, []string{"who?"}) {
		t.Errorf("elicitation messages %q", messages)
	}
	if res, txt := callText(t, cs, &mcp.CallToolParams{Name: "test_sampling", Arguments: map[string]any{}}); !res.IsError {
		t.Errorf("test_sampling without a prompt: %q, want isError", txt)
	}
}

// wait receives n values from ch, failing the test after a minute (a
// deadline for a broken fixture, not a speed check).
func wait[T any](t *testing.T, ch <-chan T, n int) []T {
	t.Helper()
	var got []T
	for len(got) < n {
		select {
		case v := <-ch:
			got = append(got, v)
		case <-time.After(time.Minute):
			t.Fatalf("got %d of %d notifications", len(got), n)
		}
	}
	return got
}

func TestLoggingAndProgress(t *testing.T) {
	logs := make(chan string, 10)
	progress := make(chan float64, 10)
	cs := connect(t, &mcp.ClientOptions{
		LoggingMessageHandler: func(_ context.Context, req *mcp.LoggingMessageRequest) {
			logs <- req.Params.Data.(string)
		},
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			if req.Params.ProgressToken == "tok" && req.Params.Total == 100 {
				progress <- req.Params.Progress
			}
		},
	})
	if err := cs.SetLoggingLevel(context.Background(), &mcp.SetLoggingLevelParams{Level: "info"}); err != nil {
		t.Fatal(err)
	}
	callText(t, cs, &mcp.CallToolParams{Name: "test_tool_with_logging", Arguments: map[string]any{}})
	if got := wait(t, logs, 3); !slices.Equal(got, []string{"Tool execution started", "Tool processing data", "Tool execution completed"}) {
		t.Errorf("log messages %q", got)
	}
	p := &mcp.CallToolParams{Name: "test_tool_with_progress", Arguments: map[string]any{}}
	p.SetProgressToken("tok")
	callText(t, cs, p)
	if got := wait(t, progress, 3); !slices.Equal(got, []float64{0, 50, 100}) {
		t.Errorf("progress %v, want 0, 50, 100 of 100", got)
	}
}

func TestProtocolVersion(t *testing.T) {
	// A client of the newest SDK asks for the newest version; the fixture
	// answers with the newest one it serves.
	cs := connect(t, nil)
	if v := cs.InitializeResult().ProtocolVersion; v >= firstUnsupportedVersion || !slices.Contains(mcp.SupportedProtocolVersions(), v) {
		t.Errorf("negotiated %q, want a version before %s", v, firstUnsupportedVersion)
	}
}

func TestToolsReadOnly(t *testing.T) {
	cs := connect(t, nil)
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Tools) == 0 {
		t.Fatal("no tools")
	}
	for _, tl := range res.Tools {
		if tl.Annotations == nil || !tl.Annotations.ReadOnlyHint {
			t.Errorf("%s is not annotated read-only", tl.Name)
		}
	}
}
