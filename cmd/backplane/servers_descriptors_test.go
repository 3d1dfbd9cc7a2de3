package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// The lists a client reads, and the member each names its items by: the
// one Backplane rewrites (tools only: NAME.TOOL) or routes by.
// cap is the server capability that offers the list.
var descriptorLists = []struct{ method, member, key, cap string }{
	{"tools/list", "tools", "name", "tools"},
	{"prompts/list", "prompts", "name", "prompts"},
	{"resources/list", "resources", "uri", "resources"},
	{"resources/templates/list", "resourceTemplates", "uriTemplate", "resources"},
}

// clientCaps are the capabilities Backplane's own client declares to an
// upstream (backend/upstream's defaults: roots and elicitation relayed), so
// that an upstream that lists by its client's capabilities
// (server-everything) lists the same to the test as to Backplane.
const clientCaps = `{"roots":{},"elicitation":{"form":{},"url":{}}}`

// rawClient speaks JSON-RPC to an MCP server, keeping the answers' bytes.
type rawClient interface {
	request(t *testing.T, method string, params string) json.RawMessage
}

// stdioClient is a server's stdin and stdout, one message a line.
type stdioClient struct {
	in   io.WriteCloser
	out  *bufio.Reader
	id   int
	caps map[string]json.RawMessage // what the server declared
	// modern: the client speaks 2026-07-28 (no initialize; each request
	// carries its version, capabilities and client info in _meta).
	modern bool
}

// modernVersion is the sessionless MCP revision the 2026 comparison
// speaks.
const modernVersion = "2026-07-28"

// withModernMeta is params with the _meta of a 2026-07-28 request.
func withModernMeta(t *testing.T, params string) string {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(params), &m); err != nil {
		t.Fatalf("params %s: %v", params, err)
	}
	m["_meta"] = json.RawMessage(`{"io.modelcontextprotocol/protocolVersion":"` + modernVersion + `",` +
		`"io.modelcontextprotocol/clientInfo":{"name":"raw","version":"0"},` +
		`"io.modelcontextprotocol/clientCapabilities":` + clientCaps + `}`)
	b, _ := json.Marshal(m)
	return string(b)
}

// startModernStdioClient speaks 2026-07-28 to cmd where it offers it
// (server/discover answers, naming the revision), else falls back to a
// 2025-11-25 session as startStdioClient does; modern says which.
func startModernStdioClient(t *testing.T, cmd *exec.Cmd) *stdioClient {
	t.Helper()
	c := startStdioPipes(t, cmd)
	c.modern = true
	res, rpcErr := c.call(t, "server/discover", `{}`)
	var dr struct {
		SupportedVersions []string                   `json:"supportedVersions"`
		Capabilities      map[string]json.RawMessage `json:"capabilities"`
	}
	if rpcErr == nil && json.Unmarshal(res, &dr) == nil && slices.Contains(dr.SupportedVersions, modernVersion) {
		c.caps = dr.Capabilities
		return c
	}
	c.modern = false
	c.initialize(t)
	return c
}

func startStdioClient(t *testing.T, cmd *exec.Cmd) *stdioClient {
	t.Helper()
	c := startStdioPipes(t, cmd)
	c.initialize(t)
	return c
}

// initialize opens a 2025-11-25 session.
func (c *stdioClient) initialize(t *testing.T) {
	t.Helper()
	init := c.request(t, "initialize", `{"protocolVersion":"2025-11-25","capabilities":`+clientCaps+`,"clientInfo":{"name":"raw","version":"0"}}`)
	var ir struct{ Capabilities map[string]json.RawMessage }
	json.Unmarshal(init, &ir)
	c.caps = ir.Capabilities
	fmt.Fprintln(c.in, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
}

// startStdioPipes starts cmd with its stdin and stdout as a client's.
func startStdioPipes(t *testing.T, cmd *exec.Cmd) *stdioClient {
	t.Helper()
	cmd.Stdin = nil // g.command sets one
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if cmd.Stderr == nil {
		cmd.Stderr = io.Discard
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		in.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	return &stdioClient{in: in, out: bufio.NewReaderSize(out, 1<<20)}
}

func (c *stdioClient) request(t *testing.T, method, params string) json.RawMessage {
	t.Helper()
	res, rpcErr := c.call(t, method, params)
	if rpcErr != nil {
		t.Fatalf("%s: answered with an error: %s", method, rpcErr)
	}
	return res
}

// call sends one request and returns its result or its error.
func (c *stdioClient) call(t *testing.T, method, params string) (result, rpcErr json.RawMessage) {
	t.Helper()
	c.id++
	if c.modern {
		params = withModernMeta(t, params)
	}
	if _, err := fmt.Fprintf(c.in, `{"jsonrpc":"2.0","id":%d,"method":%q,"params":%s}`+"\n", c.id, method, params); err != nil {
		t.Fatal(err)
	}
	deadline := time.AfterFunc(60*time.Second, func() { c.in.Close() })
	defer deadline.Stop()
	for {
		line, err := c.out.ReadBytes('\n')
		if err != nil {
			t.Fatalf("%s: reading the answer: %v", method, err)
		}
		if res, rpcErr, ok := answerOrError(line, c.id); ok {
			return res, rpcErr
		}
	}
}

// answerOf returns the result of the answer to id, false for any other
// message (a notification, a request of the server's).
func answerOf(t *testing.T, method string, msg []byte, id int) (json.RawMessage, bool) {
	t.Helper()
	res, rpcErr, ok := answerOrError(msg, id)
	if ok && rpcErr != nil {
		t.Fatalf("%s: answered with an error: %s", method, rpcErr)
	}
	return res, ok
}

// answerOrError is the result or the error of the answer to id; ok is
// false for any other message.
func answerOrError(msg []byte, id int) (result, rpcErr json.RawMessage, ok bool) {
	var m struct {
		ID     json.RawMessage
		Method string
		Result json.RawMessage
		Error  json.RawMessage
	}
	if err := json.Unmarshal(msg, &m); err != nil || m.Method != "" || string(m.ID) != fmt.Sprint(id) {
		return nil, nil, false
	}
	return m.Result, m.Error, true
}

// httpClient is a streamable HTTP session, or with modern a 2026-07-28
// client (no session: each request carries its _meta and the revision's
// headers, served by serve's stateless path).
type httpClient struct {
	url, token, session string
	id                  int
	modern              bool
}

func startModernHTTPClient(url, token string) *httpClient {
	return &httpClient{url: url, token: token, modern: true}
}

func startHTTPClient(t *testing.T, url, token string) *httpClient {
	t.Helper()
	c := &httpClient{url: url, token: token}
	c.request(t, "initialize", `{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}`)
	c.post(t, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return c
}

func (c *httpClient) post(t *testing.T, body string) *http.Response {
	t.Helper()
	return c.postMethod(t, "", body)
}

// postMethod posts body, a request of method ("" for a notification).
func (c *httpClient) postMethod(t *testing.T, method, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequest("POST", c.url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("MCP-Protocol-Version", "2025-11-25")
	if c.modern {
		req.Header.Set("MCP-Protocol-Version", modernVersion)
		req.Header.Set("Mcp-Method", method)
	}
	if c.session != "" {
		req.Header.Set("Mcp-Session-Id", c.session)
	}
	resp, err := (&http.Client{Timeout: 60 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if s := resp.Header.Get("Mcp-Session-Id"); s != "" {
		c.session = s
	}
	return resp
}

func (c *httpClient) request(t *testing.T, method, params string) json.RawMessage {
	t.Helper()
	c.id++
	if c.modern {
		params = withModernMeta(t, params)
	}
	resp := c.postMethod(t, method, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":%s}`, c.id, method, params))
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("%s: HTTP %d %v: %s", method, resp.StatusCode, err, body)
	}
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		if res, ok := answerOf(t, method, body, c.id); ok {
			return res
		}
		t.Fatalf("%s: no answer in %s", method, body)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if data, ok := strings.CutPrefix(line, "data:"); ok {
			if res, ok := answerOf(t, method, []byte(strings.TrimSpace(data)), c.id); ok {
				return res
			}
		}
	}
	t.Fatalf("%s: no answer in the stream %s", method, body)
	return nil
}

// listAll walks a list, page by page, and returns its items' bytes.
func listAll(t *testing.T, c rawClient, method, member string) []json.RawMessage {
	t.Helper()
	var out []json.RawMessage
	cursor := ""
	for page := 0; page < 100; page++ {
		params := `{}`
		if cursor != "" {
			params = fmt.Sprintf(`{"cursor":%q}`, cursor)
		}
		var res map[string]json.RawMessage
		if err := json.Unmarshal(c.request(t, method, params), &res); err != nil {
			t.Fatalf("%s: %v", method, err)
		}
		var items []json.RawMessage
		if err := json.Unmarshal(res[member], &items); err != nil {
			t.Fatalf("%s: %s: %v", method, member, err)
		}
		out = append(out, items...)
		cursor = ""
		if res["nextCursor"] != nil {
			json.Unmarshal(res["nextCursor"], &cursor)
		}
		if cursor == "" {
			return out
		}
	}
	t.Fatalf("%s: more than 100 pages", method)
	return nil
}

// decoded is v decoded as JSON, numbers kept as written (1.0 stays 1.0).
func decoded(t *testing.T, raw []byte) any {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	return v
}

// descriptorUpstream is one upstream of the test, as configured and as run
// directly.
type descriptorUpstream struct {
	name    string
	command []string
	env     []string // NAME=VALUE, set for both runs
}

// descriptorUpstreams are the Go test server declaring every field, and
// the three reference servers when installed (skipped, saying why, when
// not).
func descriptorUpstreams(t *testing.T) []descriptorUpstream {
	ups := []descriptorUpstream{{name: "go", command: []string{mcpTestServer(t)}, env: []string{"MCPTEST_FULL=1"}}}
	bin := func(name string) string {
		return filepath.Join("..", "..", "testdata", "mcp-peers", "node_modules", ".bin", "mcp-server-"+name)
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Log("node is not installed: only the Go test server is compared")
		return ups
	}
	for _, name := range []string{"everything", "filesystem", "memory"} {
		p, err := filepath.Abs(bin(name))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(p); err != nil {
			t.Logf("%s is not installed (npm ci in testdata/mcp-peers): not compared", p)
			continue
		}
		u := descriptorUpstream{name: name, command: []string{p}}
		switch name {
		case "filesystem":
			u.command = append(u.command, t.TempDir())
		case "memory":
			u.env = []string{"MEMORY_FILE_PATH=" + filepath.Join(t.TempDir(), "memory.jsonl")}
		}
		ups = append(ups, u)
	}
	return ups
}

// TestServersDescriptorsServedUnchanged: every tool, prompt, resource and
// template an upstream lists reaches a client of the built binary, over
// stdio and over HTTP, as the upstream's own list has it (compared as JSON
// values, every member), the tool's name alone rewritten to NAME.TOOL.
func TestServersDescriptorsServedUnchanged(t *testing.T) {
	compareServedDescriptors(t, false)
}

// TestServersDescriptorsServedUnchanged2026 is the same comparison at
// 2026-07-28: each upstream is listed directly at 2026-07-28 where it
// offers it (the Go test server; the npm reference servers speak
// 2025-11-25 only and are listed so), Backplane connects to each the same
// way (it discovers first), and a 2026-07-28 client, without a session,
// lists through serve over stdio and through its stateless HTTP path.
// What the 2026 revision adds to a list result (resultType, cacheScope,
// ttlMs) is on the page, not on an item: the items compare equal.
func TestServersDescriptorsServedUnchanged2026(t *testing.T) {
	compareServedDescriptors(t, true)
}

func compareServedDescriptors(t *testing.T, modern bool) {
	ups := descriptorUpstreams(t)
	var cfg strings.Builder
	cfg.WriteString("store: state\npolicy:\n  - caller: alice\n    allow: [\"*\"]\n    resources: [\"demo://resource/*/*/*\", \"demo://resource/*/*\", \"test://full\", \"test://full/*\", \"memory://*\"]\n    prompts: [\"*\"]\n")
	cfg.WriteString("serve:\n  stdio_caller: alice\n  tokens: {\"tok\": alice}\nservers:\n")
	for _, u := range ups {
		cmd, _ := json.Marshal(u.command)
		fmt.Fprintf(&cfg, "  - name: %s\n    command: %s\n    validator: draft2020-12\n    connect_timeout: 60s\n", u.name, cmd)
		if len(u.env) > 0 {
			var names []string
			for _, kv := range u.env {
				names = append(names, strings.SplitN(kv, "=", 2)[0])
			}
			n, _ := json.Marshal(names)
			fmt.Fprintf(&cfg, "    env: %s\n", n)
		}
	}
	g := newGWDir(t, cfg.String())
	for _, u := range ups {
		for _, kv := range u.env {
			k, v, _ := strings.Cut(kv, "=")
			g.setEnv(k, v)
		}
	}

	// What each upstream lists to a client of its own.
	type item struct {
		server string
		raw    json.RawMessage
	}
	want := map[string]map[string]item{} // method -> key -> item
	for _, l := range descriptorLists {
		want[l.method] = map[string]item{}
	}
	spoke2026 := map[string]bool{}
	for _, u := range ups {
		cmd := exec.Command(u.command[0], u.command[1:]...)
		cmd.Env = append(os.Environ(), u.env...)
		var c *stdioClient
		if modern {
			c = startModernStdioClient(t, cmd)
			spoke2026[u.name] = c.modern
			t.Logf("upstream %s listed directly at %s", u.name, map[bool]string{true: modernVersion, false: "2025-11-25"}[c.modern])
		} else {
			c = startStdioClient(t, cmd)
		}
		for _, l := range descriptorLists {
			if c.caps[l.cap] == nil {
				continue
			}
			for _, raw := range listAll(t, c, l.method, l.member) {
				var k map[string]any
				json.Unmarshal(raw, &k)
				key, _ := k[l.key].(string)
				if l.method == "tools/list" || l.method == "prompts/list" {
					key = u.name + "." + key // served under the server's prefix
				}
				want[l.method][key] = item{u.name, raw}
			}
		}
	}
	if len(want["tools/list"]) == 0 {
		t.Fatal("the upstreams listed no tools")
	}
	// The test server declares every field: a sanity check that the
	// comparison below compares them.
	if full, ok := want["tools/list"]["go.full"]; !ok || !strings.Contains(string(full.raw), `"execution"`) {
		t.Fatalf("the test server's tool full is not listed with its execution member: %s", full.raw)
	}

	check := func(t *testing.T, c rawClient) {
		if modern {
			// The page, unlike its items, is Backplane's own: what a
			// caller sees is what its policy grants it, so every list is
			// cacheScope private whatever an upstream said of its own.
			var page struct {
				ResultType string `json:"resultType"`
				CacheScope string `json:"cacheScope"`
			}
			json.Unmarshal(c.request(t, "tools/list", `{}`), &page)
			if page.ResultType != "complete" || page.CacheScope != "private" {
				t.Errorf("a 2026-07-28 tools/list page: resultType %q, cacheScope %q; want complete, private", page.ResultType, page.CacheScope)
			}
		}
		for _, l := range descriptorLists {
			got := map[string]json.RawMessage{}
			for _, raw := range listAll(t, c, l.method, l.member) {
				var k map[string]any
				json.Unmarshal(raw, &k)
				key, _ := k[l.key].(string)
				if l.method == "tools/list" && want[l.method][key].raw == nil {
					continue // a built-in tool, not an upstream's
				}
				got[key] = raw
			}
			for key, w := range want[l.method] {
				g, ok := got[key]
				if !ok {
					t.Errorf("%s: %s (server %s) is not served", l.method, key, w.server)
					continue
				}
				wv, gv := decoded(t, w.raw).(map[string]any), decoded(t, g).(map[string]any)
				if l.method == "tools/list" || l.method == "prompts/list" {
					if gv["name"] != key {
						t.Errorf("%s: %s is served named %v", l.method, key, gv["name"])
					}
					gv["name"] = wv["name"]
				}
				if !reflect.DeepEqual(wv, gv) {
					t.Errorf("%s: %s (server %s) differs:\nupstream %s\nserved   %s", l.method, key, w.server, w.raw, g)
				}
			}
			if len(got) != len(want[l.method]) {
				t.Errorf("%s: %d served, the upstreams list %d", l.method, len(got), len(want[l.method]))
			}
		}
	}
	if modern && !spoke2026["go"] {
		t.Fatal("the Go test server did not answer server/discover with 2026-07-28: nothing is compared at that revision")
	}
	t.Run("stdio", func(t *testing.T) {
		if modern {
			c := startStdioPipes(t, g.command("", "serve", "--stdio"))
			c.modern = true
			check(t, c)
			return
		}
		check(t, startStdioClient(t, g.command("", "serve", "--stdio")))
	})
	t.Run("http", func(t *testing.T) {
		p := startServe(t, g)
		if !modern {
			check(t, startHTTPClient(t, p.base+"/mcp", "tok"))
			return
		}
		check(t, startModernHTTPClient(p.base+"/mcp", "tok"))
		// Backplane spoke to each upstream as the test did.
		for _, u := range ups {
			want := "2025-11-25"
			if spoke2026[u.name] {
				want = modernVersion
			}
			if !upstreamConnectedAt(p.log(), u.name, want) {
				t.Errorf("serve's log does not say upstream %s connected at %s:\n%s", u.name, want, p.log())
			}
		}
	})
}

// upstreamConnectedAt reports whether serve's log has the line saying the
// named upstream connected with protocol version.
func upstreamConnectedAt(log, server, version string) bool {
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, "upstream connected") && strings.Contains(line, "server="+server+" ") &&
			strings.Contains(line, "protocol="+version) {
			return true
		}
	}
	return false
}
