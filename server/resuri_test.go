package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbackplane/backplane/policy"
	"github.com/agentbackplane/backplane/server"
	"github.com/agentbackplane/backplane/tool"
)

// uriContent is a content source that records the URIs it is asked for.
type uriContent struct {
	mu    sync.Mutex
	reads []string
	subs  []string
}

func (c *uriContent) ListResources(context.Context) ([]*mcp.Resource, error) {
	return []*mcp.Resource{{URI: "rt://files/public/a", Name: "a"}, {URI: "rt://files/public/..", Name: "up"}}, nil
}
func (c *uriContent) ListResourceTemplates(context.Context) ([]*mcp.ResourceTemplate, error) {
	return nil, nil
}
func (c *uriContent) ReadResource(_ context.Context, uri string, _ *tool.Call) (*mcp.ReadResourceResult, error) {
	c.mu.Lock()
	c.reads = append(c.reads, uri)
	c.mu.Unlock()
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, Text: "read " + uri}}}, nil
}
func (c *uriContent) ListPrompts(context.Context) ([]*mcp.Prompt, error) { return nil, nil }
func (c *uriContent) GetPrompt(context.Context, string, map[string]string, *tool.Call) (*mcp.GetPromptResult, error) {
	return nil, nil
}
func (c *uriContent) Complete(context.Context, *mcp.CompleteParams) (*mcp.CompleteResult, error) {
	return nil, nil
}
func (c *uriContent) Subscribe(_ context.Context, uri string) error {
	c.mu.Lock()
	c.subs = append(c.subs, uri)
	c.mu.Unlock()
	return nil
}
func (c *uriContent) Unsubscribe(context.Context, string) error { return nil }
func (c *uriContent) OnResourceUpdated(func(string))            {}
func (c *uriContent) Offers() (bool, bool)                      { return false, true }

func (c *uriContent) seen() (reads, subs []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.reads...), append([]string(nil), c.subs...)
}

// A resource glob is matched against the normal form of the URI (dot
// segments removed, unreserved characters decoded), and the upstream is
// sent that form: rt://files/public/* no longer grants rt://files/public/..
// (the folder above) nor %2e%2e%2f forms (review 22 item 16).
func TestResourceGlobsMatchNormalURIs(t *testing.T) {
	f := newFixture(t)
	rules, err := policy.NewRules([]policy.Rule{{Caller: "alice", Resources: []string{"rt://files/public/*"}}})
	if err != nil {
		t.Fatal(err)
	}
	src := &uriContent{}
	cs := connect(t, server.New(f.g, &server.Options{StdioCaller: "alice", Content: src, ContentPolicy: rules}), nil)
	ctx := context.Background()
	for _, uri := range []string{
		"rt://files/public/..",
		"rt://files/public/%2e%2e",
		"rt://files/public/.%2E",
		"rt://files/public/%2e%2e%2fsecret",
		"rt://files/public/..%2Fsecret",
		"rt://files/public/x/../../secret",
		"rt://files/public/..\\secret",
	} {
		if res, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri}); err == nil {
			t.Errorf("read %s: granted: %+v", uri, res)
		}
		if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: uri}); err == nil {
			t.Errorf("subscribe %s: granted", uri)
		}
	}
	if reads, subs := src.seen(); len(reads) != 0 || len(subs) != 0 {
		t.Fatalf("refused URIs reached the upstream: reads %q, subscriptions %q", reads, subs)
	}
	// Granted ones are forwarded in their normal form.
	for _, c := range []struct{ in, want string }{
		{"rt://files/public/a", "rt://files/public/a"},
		{"RT://Files/public/./%7euser", "rt://files/public/~user"},
		{"rt://files/public/x/../b", "rt://files/public/b"},
	} {
		res, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: c.in})
		if err != nil {
			t.Errorf("read %s: %v", c.in, err)
			continue
		}
		if len(res.Contents) != 1 || res.Contents[0].Text != "read "+c.want {
			t.Errorf("read %s: %+v, want the upstream asked for %s", c.in, res.Contents, c.want)
		}
	}
	if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: "rt://files/public/./a"}); err != nil {
		t.Errorf("subscribe: %v", err)
	}
	if _, subs := src.seen(); len(subs) != 1 || subs[0] != "rt://files/public/a" {
		t.Errorf("subscriptions forwarded: %q, want [rt://files/public/a]", subs)
	}
	// The listing is filtered by the same normal form.
	list, err := cs.ListResources(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var uris []string
	for _, r := range list.Resources {
		uris = append(uris, r.URI)
	}
	if strings.Join(uris, " ") != "rt://files/public/a" {
		t.Errorf("listed %q, want only rt://files/public/a", uris)
	}
}

// A request whose id the SDK would answer under another id (a lone
// surrogate becomes U+FFFD, a big integer rounds) is refused over HTTP as
// over stdio: -32600 with a null id; an ordinary id still initializes.
func TestHTTPRefusesUnanswerableIDs(t *testing.T) {
	f := newFixture(t)
	hs := httpServer(t, server.New(f.g, &server.Options{Tokens: map[string]string{"tok-a": "alice"}}))
	init := func(id string) string {
		return `{"jsonrpc":"2.0","id":` + id + `,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}`
	}
	for _, id := range []string{`"\ud800"`, `"a\udc00"`, `9007199254740993`, "\"\xff\""} {
		code, body := rawPost(t, hs.URL, "tok-a", nil, init(id))
		var a struct {
			ID    json.RawMessage `json:"id"`
			Error struct {
				Code int64 `json:"code"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(body), &a); err != nil || code != http.StatusBadRequest || a.Error.Code != -32600 || string(a.ID) != "null" {
			t.Errorf("id %s: %d %s, want 400 with -32600 and a null id", id, code, body)
		}
	}
	if code, body := rawPost(t, hs.URL, "tok-a", nil, init(`"\ud83d\ude00"`)); code != http.StatusOK || !strings.Contains(body, `"id":"😀"`) && !strings.Contains(body, `"id":"\ud83d\ude00"`) {
		t.Errorf("a valid surrogate pair id: %d %s", code, body)
	}
}
