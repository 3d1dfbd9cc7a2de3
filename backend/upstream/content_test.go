package upstream

import (
	"context"
	"errors"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// templateServer is the Go test server offering the resource template
// tmpl, with subscriptions and completions.
func templateServer(t *testing.T, name, tmpl string) (Server, string) {
	t.Helper()
	envBin, err := exec.LookPath("env")
	if err != nil {
		t.Skip("no env program to set the test server's template")
	}
	srv, logFile := testServerSpec(t, name)
	srv.Command = []string{envBin, "MCPTEST_TEMPLATE=" + tmpl, testServer}
	return srv, logFile
}

// TestContentTemplates: a URI no server lists is read from the server
// whose template matches it, refused when templates of two servers do;
// completions of a template go to its server.
func TestContentTemplates(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	sa, _ := templateServer(t, "a", "test://{x}/one")
	a := e.connect(t, sa, nil)
	sb, _ := templateServer(t, "b", "test://b/{y}")
	b := e.connect(t, sb, nil)
	c, err := NewContent(ctx, []*Upstream{a, b})
	if err != nil {
		t.Fatal(err)
	}
	list, err := c.ListResourceTemplates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, tm := range list {
		got = append(got, tm.URITemplate)
	}
	if !slices.Equal(got, []string{"test://b/{y}", "test://{x}/one"}) {
		t.Errorf("templates %q", got)
	}
	for uri, want := range map[string]string{
		"test://q/one": "test://{x}/one read test://q/one",
		"test://b/two": "test://b/{y} read test://b/two",
	} {
		res, err := c.ReadResource(ctx, uri, nil)
		if err != nil || len(res.Contents) != 1 || res.Contents[0].Text != want {
			t.Errorf("read %s: %+v %v, want %q", uri, res, err, want)
		}
	}
	if _, err := c.ReadResource(ctx, "test://b/one", nil); !errors.Is(err, ErrAmbiguousContent) {
		t.Errorf("a URI both templates match: %v, want ErrAmbiguousContent", err)
	}
	if _, err := c.ReadResource(ctx, "other://x", nil); !errors.Is(err, ErrUnknownContent) {
		t.Errorf("a URI no template matches: %v, want ErrUnknownContent", err)
	}
	res, err := c.Complete(ctx, &sdk.CompleteParams{Ref: &sdk.CompleteReference{Type: "ref/resource", URI: "test://b/{y}"}, Argument: sdk.CompleteParamsArgument{Name: "y", Value: "tw"}})
	if err != nil || !slices.Equal(res.Completion.Values, []string{"test://b/{y} completes tw"}) {
		t.Errorf("complete: %+v %v", res, err)
	}
	if _, err := c.Complete(ctx, &sdk.CompleteParams{Ref: &sdk.CompleteReference{Type: "ref/prompt", Name: "nope"}, Argument: sdk.CompleteParamsArgument{Name: "y"}}); !errors.Is(err, ErrUnknownContent) {
		t.Errorf("complete an unknown prompt: %v", err)
	}
	if completions, subscribe := c.Offers(); !completions || !subscribe {
		t.Errorf("Offers() = %v, %v", completions, subscribe)
	}
}

// TestContentSubscriptions: the server is subscribed at the first
// subscriber and unsubscribed at the last, subscribed again after it
// restarts, and its updates of a subscribed URI reach the hook.
func TestContentSubscriptions(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	sa, logFile := templateServer(t, "a", "test://{x}/one")
	a := e.connect(t, sa, &Options{MinBackoff: 10 * time.Millisecond})
	c, err := NewContent(ctx, []*Upstream{a})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var updated []string
	c.OnResourceUpdated(func(uri string) {
		mu.Lock()
		updated = append(updated, uri)
		mu.Unlock()
	})
	const uri = "test://q/one"
	for range 2 {
		if err := c.Subscribe(ctx, uri); err != nil {
			t.Fatal(err)
		}
	}
	// At 2026-07-28 a subscription is a subscriptions/listen stream the
	// SDK opens and closes on its own goroutine: the server may log it
	// after Subscribe and Unsubscribe return.
	eventually(t, 10*time.Second, "two subscribers: the server is subscribed once", func() bool {
		return countPrefix(serverLog(t, logFile), "subscribe "+uri) == 1
	})
	if err := c.Subscribe(ctx, "other://x"); !errors.Is(err, ErrUnknownContent) {
		t.Errorf("subscribe to what no server answers for: %v", err)
	}
	e.mustCall(t, "a.touch", `{"uri":"`+uri+`"}`)
	eventually(t, 10*time.Second, "the update reaches the hook", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Equal(updated, []string{uri})
	})

	// A restart: the new process is subscribed again.
	killUpstream(t, a)
	eventually(t, 20*time.Second, "the server is subscribed again after its restart", func() bool {
		return countPrefix(serverLog(t, logFile), "subscribe "+uri) == 2
	})

	if err := c.Unsubscribe(ctx, uri); err != nil {
		t.Fatal(err)
	}
	if n := countPrefix(serverLog(t, logFile), "unsubscribe "+uri); n != 0 {
		t.Errorf("one subscriber left: unsubscribed %d times", n)
	}
	if err := c.Unsubscribe(ctx, uri); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the last subscriber gone: the server is unsubscribed once", func() bool {
		return countPrefix(serverLog(t, logFile), "unsubscribe "+uri) == 1
	})
	if n := countPrefix(serverLog(t, logFile), "subscribe "+uri); n != 2 {
		t.Errorf("the server was subscribed %d times in all, want 2", n)
	}
	if err := c.Unsubscribe(ctx, uri); err != nil {
		t.Errorf("unsubscribing again: %v", err)
	}
}

// contentServer is the Go test server offering the resource
// test://shared/doc and the prompt help, both answering with who, under
// prefix (nil: the default "NAME.").
func contentServer(t *testing.T, name, who string, prefix *string) Server {
	t.Helper()
	envBin, err := exec.LookPath("env")
	if err != nil {
		t.Skip("no env program to set the test server's content")
	}
	srv, _ := testServerSpec(t, name)
	srv.Command = []string{envBin, "MCPTEST_CONTENT=" + who, testServer}
	srv.Prefix = prefix
	return srv
}

// Two servers with the same resource URI and prompt name start (issue 22,
// finding 23: the start was refused): prompts are named after the server's
// prefix like its tools, and got from their own server by their own name;
// the shared URI is listed once and its read refused naming both servers.
// With the same prefix (two copies under ""), the prompt is refused alike.
func TestContentSharedByTwoServers(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	one := e.connect(t, contentServer(t, "one", "one", nil), nil)
	two := e.connect(t, contentServer(t, "two", "two", nil), nil)
	c, err := NewContent(ctx, []*Upstream{one, two})
	if err != nil {
		t.Fatalf("NewContent of two servers sharing a URI and a prompt name: %v", err)
	}
	prompts, err := c.ListPrompts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range prompts {
		names = append(names, p.Name)
	}
	if !slices.Equal(names, []string{"one.help", "two.help"}) {
		t.Errorf("prompts %q, want one.help and two.help", names)
	}
	for _, who := range []string{"one", "two"} {
		res, err := c.GetPrompt(ctx, who+".help", nil, nil)
		if err != nil || res.Description != "help of "+who {
			t.Errorf("%s.help: %+v %v", who, res, err)
		}
	}
	if _, err := c.GetPrompt(ctx, "help", nil, nil); !errors.Is(err, ErrUnknownContent) {
		t.Errorf("the bare name: %v, want ErrUnknownContent", err)
	}
	res, err := c.ListResources(ctx)
	if err != nil || len(res) != 1 || res[0].URI != "test://shared/doc" {
		t.Errorf("resources %+v %v, want the shared URI once", res, err)
	}
	_, err = c.ReadResource(ctx, "test://shared/doc", nil)
	if !errors.Is(err, ErrAmbiguousContent) || !strings.Contains(err.Error(), "one and two") {
		t.Errorf("read of the shared URI: %v, want ErrAmbiguousContent naming one and two", err)
	}
	if err := c.Subscribe(ctx, "test://shared/doc"); !errors.Is(err, ErrAmbiguousContent) {
		t.Errorf("subscribe to the shared URI: %v", err)
	}

	// Their tools would collide in one registry: b registers in another
	// (as a second gateway would); the content is one set all the same.
	bare := ""
	a := e.connect(t, contentServer(t, "a", "a", &bare), nil)
	b := newEnv(t).connect(t, contentServer(t, "b", "b", &bare), nil)
	c, err = NewContent(ctx, []*Upstream{a, b})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.GetPrompt(ctx, "help", nil, nil)
	if !errors.Is(err, ErrAmbiguousContent) || !strings.Contains(err.Error(), "a and b") {
		t.Errorf("help of two servers with prefix \"\": %v, want ErrAmbiguousContent naming a and b", err)
	}
	_, err = c.Complete(ctx, &sdk.CompleteParams{Ref: &sdk.CompleteReference{Type: "ref/prompt", Name: "help"}, Argument: sdk.CompleteParamsArgument{Name: "x"}})
	if !errors.Is(err, ErrAmbiguousContent) {
		t.Errorf("completion of the ambiguous prompt: %v", err)
	}
}
