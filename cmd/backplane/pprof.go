package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// pprofEnv names the address of serve's opt-in profiling listener
// (net/http/pprof): unset, there is none. It is an environment variable,
// not a configuration key, because it is for whoever runs the process
// (a benchmark, an operator chasing a slowdown), not part of the gateway's
// declared setup.
const pprofEnv = "BACKPLANE_PPROF_ADDR"

// errPprofAddr: the address is not a loopback IP and port. The profiles
// show the process's memory, command line and timings: never off the
// machine, and no token guards them.
var errPprofAddr = errors.New("must be a loopback IP address and a port, such as 127.0.0.1:6060")

// startPprof serves the profiles at http://ADDR/debug/pprof/ and logs
// where; stop closes the listener. The address must be an IP literal (no
// name is resolved) in 127.0.0.0/8 or ::1; port 0 picks a free one.
func startPprof(addr string, log *slog.Logger) (stop func(), err error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("%s=%q: %w", pprofEnv, addr, errPprofAddr)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("%s=%q: %w", pprofEnv, addr, errPprofAddr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s: listening on %s: %w", pprofEnv, addr, err)
	}
	// A mux of its own: importing net/http/pprof also registers these on
	// http.DefaultServeMux, which nothing here serves.
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	// No write timeout: a CPU profile or a trace answers after the
	// seconds it was asked for.
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	log.Warn("profiling listener open ("+pprofEnv+"): loopback only, no authentication",
		"url", "http://"+ln.Addr().String()+"/debug/pprof/")
	go hs.Serve(ln)
	return func() { hs.Close() }, nil
}
