package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// readmeRunMarker, on the line before a ```sh block of README.md, marks the
// block as one a newcomer runs as written: TestReadmeWalkThrough runs it.
const readmeRunMarker = "<!-- run -->"

// readmeBlocks returns the fenced blocks of the README whose opening fence
// is "```"+lang, and which of them follow the run marker.
func readmeBlocks(t *testing.T, lang string) (all, marked []string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) == readmeRunMarker {
			if i+1 >= len(lines) || lines[i+1] != "```sh" {
				t.Fatalf("README.md line %d: %s must be followed by a ```sh block", i+1, readmeRunMarker)
			}
		}
		if lines[i] != "```"+lang {
			continue
		}
		start := i + 1
		end := start
		for end < len(lines) && lines[end] != "```" {
			end++
		}
		if end == len(lines) {
			t.Fatalf("README.md line %d: the block is never closed", i+1)
		}
		block := strings.Join(lines[start:end], "\n") + "\n"
		all = append(all, block)
		if i > 0 && strings.TrimSpace(lines[i-1]) == readmeRunMarker {
			marked = append(marked, block)
		}
		i = end
	}
	return all, marked
}

// readmeEnv is a newcomer's shell: a new home, no configuration named, and
// the backplane under test first on PATH.
func readmeEnv(home string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case k == "HOME" || k == "XDG_CONFIG_HOME" || k == "PATH" || strings.HasPrefix(k, "BACKPLANE_"):
			continue
		}
		env = append(env, kv)
	}
	return append(env, "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"),
		"PATH="+filepath.Dir(binary)+string(os.PathListSeparator)+os.Getenv("PATH"))
}

// The README's walk-through works as written: its marked blocks run, one
// after the other, in a new folder with a new home; then the desktop
// client's configuration starts a gateway that lists the tools over stdio.
func TestReadmeWalkThrough(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh to run the README's blocks with")
	}
	_, marked := readmeBlocks(t, "sh")
	if len(marked) == 0 {
		t.Fatalf("README.md marks no block with %s", readmeRunMarker)
	}
	root := t.TempDir()
	home, project := filepath.Join(root, "home"), filepath.Join(root, "project")
	for _, d := range []string{home, project} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	env := readmeEnv(home)
	for i, block := range marked {
		// -e: the block fails at its first failing command, as a reader
		// would stop there; -x: the log says which one.
		cmd := exec.Command("sh", "-e", "-x", "-c", block)
		cmd.Dir, cmd.Env = project, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("README block %d failed: %v\n%s\noutput:\n%s", i+1, err, block, out)
		}
		t.Logf("README block %d:\n%s", i+1, out)
	}
	if _, err := os.Stat(filepath.Join(home, ".config", "backplane", "backplane.yaml")); err != nil {
		t.Errorf("after the walk-through there is no configuration where every verb finds it: %v", err)
	}

	// The desktop client's configuration, as the README gives it.
	var desktop struct {
		MCPServers map[string]struct {
			Command string   `json:"command"`
			Args    []string `json:"args"`
		} `json:"mcpServers"`
	}
	jsonBlocks, _ := readmeBlocks(t, "json")
	found := false
	for _, b := range jsonBlocks {
		if !strings.Contains(b, `"mcpServers"`) {
			continue
		}
		found = true
		if err := json.Unmarshal([]byte(b), &desktop); err != nil {
			t.Fatalf("the mcpServers block does not parse: %v\n%s", err, b)
		}
	}
	if !found {
		t.Fatal("README.md has no ```json block with mcpServers for a desktop client")
	}
	srv, ok := desktop.MCPServers["backplane"]
	if !ok || srv.Command != "backplane" {
		t.Fatalf("mcpServers.backplane = %+v, want the command backplane", desktop.MCPServers)
	}
	cmd := exec.Command(binary, srv.Args...)
	cmd.Dir, cmd.Env = project, env
	answer := stdioToolsList(t, cmd)
	for _, want := range []string{`"name":"ls"`, `"name":"read"`} {
		if !strings.Contains(answer, want) {
			t.Errorf("tools/list through the desktop configuration lacks %s:\n%s", want, answer)
		}
	}
}

// stdioToolsList runs cmd as an MCP server over stdio, initializes it and
// returns its answer to tools/list.
func stdioToolsList(t *testing.T, cmd *exec.Cmd) string {
	t.Helper()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	io.WriteString(stdin, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"readme","version":"0"}}}`+"\n"+
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n"+
		`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`+"\n")
	var answer string
	sc := bufio.NewScanner(stdout)
	sc.Buffer(nil, 4<<20)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), `{"jsonrpc":"2.0","id":2,`) {
			answer = sc.Text()
			break
		}
	}
	stdin.Close()
	io.Copy(io.Discard, stdout)
	if err := cmd.Wait(); err != nil {
		t.Errorf("%v: %v\nstderr:\n%s", cmd.Args, err, stderr.String())
	}
	if answer == "" {
		t.Fatalf("%v answered no tools/list; stderr:\n%s", cmd.Args, stderr.String())
	}
	return answer
}

// The Inspector commands of the README put the server's command, flags
// included, before "--" and the Inspector's options after it (Inspector
// 2's --cli), and the HTTP one sends the bearer header.
func TestReadmeInspectorCommands(t *testing.T) {
	all, _ := readmeBlocks(t, "sh")
	var stdio, http int
	for _, b := range all {
		for _, line := range strings.Split(b, "\n") {
			rest, ok := strings.CutPrefix(line, "npx @modelcontextprotocol/inspector --cli ")
			if !ok {
				continue
			}
			if target, opts, ok := strings.Cut(rest, " -- "); ok {
				stdio++
				if !strings.HasPrefix(target, "backplane serve --stdio") || !strings.HasPrefix(opts, "--method ") {
					t.Errorf("stdio: want backplane serve --stdio before -- and --method after it: %s", line)
				}
				continue
			}
			http++
			if !strings.Contains(rest, "http://127.0.0.1:8787/mcp") || !strings.Contains(rest, `--header "Authorization: Bearer `) {
				t.Errorf("http: want the /mcp URL and the bearer header: %s", line)
			}
		}
	}
	if stdio == 0 || http == 0 {
		t.Errorf("README.md shows %d stdio and %d HTTP Inspector commands; want both", stdio, http)
	}
}
