// Command rawhttp is the floor of scripts/bench-http: plain net/http
// answering the load generator's MCP requests with canned JSON bodies of
// the sizes a gateway sends (an initialize result; the echo of a
// tools/call with a call id in _meta), no MCP library, no upstream, no
// store. What a gateway costs per call beyond this is its own.
//
//	rawhttp -addr 127.0.0.1:PORT    # serves /mcp
package main

import (
	"encoding/json"
	"flag"
	"log"
	"net/http"
	"strings"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "where to listen (loopback)")
	flag.Parse()
	http.HandleFunc("/mcp", func(w http.ResponseWriter, r *http.Request) {
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				Arguments struct{ Message string } `json:"arguments"`
			} `json:"params"`
		}
		if r.Method != http.MethodPost || json.NewDecoder(r.Body).Decode(&m) != nil {
			http.Error(w, "POST a JSON-RPC message", http.StatusBadRequest)
			return
		}
		if m.ID == nil { // a notification
			w.WriteHeader(http.StatusAccepted)
			return
		}
		result := `{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"rawhttp","version":"v0"}}`
		if m.Method == "tools/call" {
			text, _ := json.Marshal("Echo: " + m.Params.Arguments.Message)
			result = `{"_meta":{"backplane/call_id":"call_0123456789abcdefghij"},"content":[{"type":"text","text":` + string(text) + `}]}`
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"result":` + result + "}\n"))
	})
	if !strings.HasPrefix(*addr, "127.") && !strings.HasPrefix(*addr, "[::1]") {
		log.Fatalf("rawhttp: %s is not a loopback address", *addr)
	}
	log.Fatal(http.ListenAndServe(*addr, nil))
}
