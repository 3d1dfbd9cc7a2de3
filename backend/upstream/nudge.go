package upstream

import (
	"context"
	"sync"
	"time"
)

// Why a stdio server is pinged while a call waits (issue 14's stall).
//
// A server built with Go 1.26 (the toolchain of this project, and of any
// Go SDK server built now) can stop answering until it next reads its
// stdin. The Go SDK reads stdin with a blocking read(2), and Go 1.26's
// runtime has a race between a goroutine entering a blocking system call
// and a stop-the-world: reentersyscall checks sched.gcwaiting before it
// marks the goroutine _Gsyscall, stopTheWorldWithSema looks for goroutines
// in system calls only once, before it waits, and the system monitor,
// which could take the processor back, sleeps while a stop-the-world is
// pending (up to a minute when no timer is due). When they meet, the
// collector waits for the read to return, with the handler that was about
// to write the answer stopped behind it, and the read returns only when
// the client writes again; a client waiting for that answer does not. Caught in BenchmarkMCPProxy (once in 300-1,000 runs of 3,000
// calls): the upstream's handler goroutine "stopping the world" in
// gcStart, its stdin reader in a read system call, both pipes empty.
//
// Any byte on the server's stdin ends the stall. A ping is the message
// that carries one without effect: every MCP server must answer it, it
// runs nothing, and the call it unblocks is not sent again (a call whose
// outcome is unknown is never re-run).

// nudgeAfter is how long a call to a stdio server waits for its answer
// before the server is pinged, and then again each time as long.
const nudgeAfter = time.Second

// nudgeTimeout bounds one ping; a link has at most one in flight.
const nudgeTimeout = 30 * time.Second

// nudgeWhileWaiting pings the stdio server of l every nudgeAfter until the
// returned nudge is stopped; over HTTP it does nothing (and returns nil,
// whose stop does nothing).
func (l *link) nudgeWhileWaiting() *nudge {
	if l.cmd == nil {
		return nil
	}
	n := &nudge{l: l}
	n.mu.Lock()
	n.t = time.AfterFunc(nudgeAfter, n.fire)
	n.mu.Unlock()
	return n
}

// nudge is one call's timer of pings.
type nudge struct {
	l       *link
	mu      sync.Mutex
	t       *time.Timer
	stopped bool
}

func (n *nudge) fire() {
	n.l.ping()
	n.mu.Lock()
	if !n.stopped {
		n.t.Reset(nudgeAfter)
	}
	n.mu.Unlock()
}

// stop ends the pings (one running finishes on its own).
func (n *nudge) stop() {
	if n == nil {
		return
	}
	n.mu.Lock()
	n.stopped = true
	n.t.Stop()
	n.mu.Unlock()
}

// ping sends the server a ping, unless one is in flight; its answer, or
// its failure, does not matter: the request's bytes on stdin do.
func (l *link) ping() {
	if !l.pinging.CompareAndSwap(false, true) {
		return
	}
	defer l.pinging.Store(false)
	ctx, cancel := context.WithTimeout(context.Background(), nudgeTimeout)
	defer cancel()
	l.sess.Ping(ctx, nil)
}
