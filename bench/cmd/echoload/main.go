// Command echoload drives bench/cmd/echoserver directly over its stdin and
// stdout, with no gateway, to see what one tools/call costs the upstream
// for each shape of request a gateway may send: a 2025-11-25 session's
// plain params, or a 2026-07-28 request with its per-request _meta. It
// keeps -inflight requests outstanding and reports the server's CPU time
// per call (utime+stime from /proc).
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

const discover = `{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/clientCapabilities":{"elicitation":{"form":{},"url":{}},"roots":{}},"io.modelcontextprotocol/clientInfo":{"name":"backplane","version":"1"},"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`
const initialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"mcp-proxy","version":"1.0.0"}}}` + "\n" + `{"jsonrpc":"2.0","method":"notifications/initialized"}`

// shapes are the params of a call, %d the call's number.
var shapes = map[string]string{
	"2025":        `{"name":"echo","arguments":{"message":"call %d of session 0"}}`,
	"2026-full":   `{"_meta":{"io.modelcontextprotocol/clientCapabilities":{"roots":{}},"io.modelcontextprotocol/clientInfo":{"name":"backplane","version":"1"},"io.modelcontextprotocol/logLevel":"debug","io.modelcontextprotocol/protocolVersion":"2026-07-28","progressToken":"backplane-%[1]d"},"name":"echo","arguments":{"message":"call %[1]d of session 0"}}`,
	"2026-nolog":  `{"_meta":{"io.modelcontextprotocol/clientCapabilities":{"roots":{}},"io.modelcontextprotocol/clientInfo":{"name":"backplane","version":"1"},"io.modelcontextprotocol/protocolVersion":"2026-07-28","progressToken":"backplane-%[1]d"},"name":"echo","arguments":{"message":"call %[1]d of session 0"}}`,
	"2026-noprog": `{"_meta":{"io.modelcontextprotocol/clientCapabilities":{"roots":{}},"io.modelcontextprotocol/clientInfo":{"name":"backplane","version":"1"},"io.modelcontextprotocol/logLevel":"debug","io.modelcontextprotocol/protocolVersion":"2026-07-28"},"name":"echo","arguments":{"message":"call %[1]d of session 0"}}`,
	"2026-noinfo": `{"_meta":{"io.modelcontextprotocol/clientCapabilities":{"roots":{}},"io.modelcontextprotocol/logLevel":"debug","io.modelcontextprotocol/protocolVersion":"2026-07-28","progressToken":"backplane-%[1]d"},"name":"echo","arguments":{"message":"call %[1]d of session 0"}}`,
	"2026-caps":   `{"_meta":{"io.modelcontextprotocol/clientCapabilities":{"roots":{}},"io.modelcontextprotocol/protocolVersion":"2026-07-28"},"name":"echo","arguments":{"message":"call %[1]d of session 0"}}`,
	"2026-info":   `{"_meta":{"io.modelcontextprotocol/clientCapabilities":{"roots":{}},"io.modelcontextprotocol/clientInfo":{"name":"backplane","version":"1"},"io.modelcontextprotocol/protocolVersion":"2026-07-28"},"name":"echo","arguments":{"message":"call %[1]d of session 0"}}`,
	"2026-req":    `{"_meta":{"io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/protocolVersion":"2026-07-28"},"name":"echo","arguments":{"message":"call %[1]d of session 0"}}`,
	"2026-min":    `{"_meta":{"io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"backplane","version":"1"},"io.modelcontextprotocol/protocolVersion":"2026-07-28"},"name":"echo","arguments":{"message":"call %[1]d of session 0"}}`,
}

func main() {
	server := flag.String("server", "", "the echo server")
	shape := flag.String("shape", "2025", "the request's shape: 2025 (after initialize), or 2026-full (what Backplane sent before), 2026-noprog, 2026-nolog, 2026-noinfo, 2026-info, 2026-caps (what it sends now), 2026-req, 2026-min")
	calls := flag.Int("calls", 5000, "calls")
	inflight := flag.Int("inflight", 1, "requests outstanding")
	flag.Parse()
	params, ok := shapes[*shape]
	if !ok {
		log.Fatalf("unknown shape %q", *shape)
	}
	if *server == "" || *calls <= 0 || *inflight <= 0 {
		log.Fatal("-server is required; -calls and -inflight must be positive")
	}
	cmd := exec.Command(*server)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		log.Fatal(err)
	}
	outp, err := cmd.StdoutPipe()
	if err != nil {
		log.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		log.Fatal(err)
	}
	out := bufio.NewReader(outp)
	hello := initialize
	if strings.HasPrefix(*shape, "2026") {
		hello = discover
	}
	if _, err := io.WriteString(in, hello+"\n"); err != nil {
		log.Fatal(err)
	}
	if _, err := out.ReadBytes('\n'); err != nil {
		log.Fatal(err)
	}
	send := func(i int) {
		line := `{"jsonrpc":"2.0","id":` + strconv.Itoa(i+10) + `,"method":"tools/call","params":` + fmt.Sprintf(params, i) + "}\n"
		if _, err := io.WriteString(in, line); err != nil {
			log.Fatal(err)
		}
	}
	run := func(n int) {
		sent := 0
		for ; sent < *inflight && sent < n; sent++ {
			send(sent)
		}
		for got := 0; got < n; got++ {
			line, err := out.ReadBytes('\n')
			if err != nil {
				log.Fatal(err)
			}
			if !strings.Contains(string(line), "Echo: call") {
				log.Fatalf("answer %s", line)
			}
			if sent < n {
				send(sent)
				sent++
			}
		}
	}
	run(500) // warm up
	cpu0 := cpuOf(cmd.Process.Pid)
	t0 := time.Now()
	run(*calls)
	el := time.Since(t0)
	cpu := cpuOf(cmd.Process.Pid) - cpu0
	in.Close()
	cmd.Wait()
	fmt.Printf("shape %-10s inflight %3d  %6.0f calls/s  server CPU %4.0f us/call\n", *shape, *inflight,
		float64(*calls)/el.Seconds(), float64(cpu.Microseconds())/float64(*calls))
}

// cpuOf is the process's user and system time.
func cpuOf(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		log.Fatal(err)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * (time.Second / 100)
}
