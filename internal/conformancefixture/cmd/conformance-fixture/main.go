// Command conformance-fixture serves the conformance fixture server
// (package conformancefixture) over stdio, or over streamable HTTP at
// http://ADDR/mcp with -http ADDR (with resumable streams: an in-memory
// event store). With -http it prints "listening on http://HOST:PORT/mcp"
// to stderr once it accepts connections, so ADDR may use port 0. With
// -stateless as well, it serves MCP 2026-07-28 (and the earlier versions
// without sessions) through the SDK's stateless handler. With -mrtr (and
// no -http) it serves only the multi round-trip tools and prompt of
// 2026-07-28 over stdio, every version offered (conformancefixture.NewMRTR).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbackplane/backplane/internal/conformancefixture"
)

func main() {
	addr := flag.String("http", "", "serve streamable HTTP on this address (e.g. 127.0.0.1:0) instead of stdio")
	stateless := flag.Bool("stateless", false, "with -http: serve 2026-07-28, statelessly")
	mrtr := flag.Bool("mrtr", false, "over stdio: serve only the multi round-trip tools and prompt, 2026-07-28 offered")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch {
	case *addr == "" && *mrtr:
		err = conformancefixture.NewMRTR().Run(ctx, &mcp.StdioTransport{})
	case *addr == "":
		err = conformancefixture.New().Run(ctx, &mcp.StdioTransport{})
	default:
		err = serveHTTP(ctx, *addr, *stateless)
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		log.Fatal(err)
	}
}

func serveHTTP(ctx context.Context, addr string, stateless bool) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	server := conformancefixture.New()
	opts := &mcp.StreamableHTTPOptions{EventStore: mcp.NewMemoryEventStore(nil)}
	if stateless {
		server = conformancefixture.NewStateless()
		opts = &mcp.StreamableHTTPOptions{Stateless: true}
	}
	handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, opts)
	mux := http.NewServeMux()
	mux.Handle("/mcp", handler)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(os.Stderr, "listening on http://%s/mcp\n", ln.Addr())
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
