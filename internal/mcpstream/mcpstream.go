// Package mcpstream is the MCP stdio transport (newline-delimited JSON-RPC
// over a byte stream) for the official Go SDK, decoding each message once,
// with the standard library, into the SDK's public jsonrpc types.
//
// Why not the SDK's own IOTransport: go-sdk v1.8.0 decodes every message it
// reads through a JSON decoder that allocates a 32 KiB buffer per message,
// and decodes each line twice (as a batch first, then as a message), which
// was most of the bytes allocated on the gateway's MCP path. The SDK stays
// the MCP implementation: this package only frames and decodes, behind the
// SDK's public mcp.Transport and mcp.Connection interfaces.
//
// What a connection promises:
//   - One message or batch per line, "\n" or "\r\n" ended; blank lines are
//     skipped. A line over Options.MaxMessage bytes is refused without being
//     buffered whole.
//   - Decoding is strict about the envelope (exact member names, no
//     duplicate member, "jsonrpc":"2.0", an id that is a number, a string
//     or null) and leaves params and result as the exact bytes sent.
//   - A malformed line (not JSON, not a JSON-RPC message, too deep, too
//     large) never ends the connection by itself. With
//     Options.OnMalformed (a server) it is answered with a JSON-RPC error
//     (-32700 or -32600, as JSON-RPC 2.0 says) and skipped. Without (a
//     client), its top-level "id" is recovered by a shallow scan that any
//     depth or size passes: a response becomes, for the request of that
//     id alone, an error response wrapping ErrMalformedResponse; a
//     request is answered with a JSON-RPC error; a line without a usable
//     id is dropped (Options.OnDropped is told). Only a torn line, a JSON
//     object or array that does not end where its line does, ends a
//     client connection (Read returns an error wrapping ErrBrokenFraming):
//     the stream is no longer one message per line.
//   - A batch (a JSON array of messages) is read message by message; the
//     answers to its requests are written together, as one array, once the
//     last of them is answered. (MCP 2025-06-18 dropped batches; older
//     clients may send them, and the connection cannot see the negotiated
//     version, so batches are always taken.)
//   - With Options.Drain, the end of the stream reaches Read only once the
//     requests read before it are answered, or Drain has passed.
//   - Write is safe for concurrent use; each message is one Write call on
//     the stream, encoded as jsonrpc.EncodeMessage encodes it (without its
//     reflection where the message allows: EncodeMessage). Close closes both ends once, makes a blocked Read return
//     io.EOF, and later Writes fail with mcp.ErrConnectionClosed.
//   - A stream with read deadlines (a pipe or socket in Go's poller: what
//     os.Pipe and exec.Cmd's pipes give, a net.Conn; see [Unclosed]) is read
//     by Read itself, in the goroutine that asks for the next message (the
//     SDK's reader); any other stream is read by a goroutine of the
//     connection, so that Close ends a Read blocked on a stream that
//     closing does not interrupt. The first saves a goroutine hand-off per
//     message. Read returns the same either way; reading directly, a line
//     is read (and a malformed one answered) only once the next message is
//     asked for, which the SDK's reader always is, where the goroutine
//     reads one line ahead.
//   - On Linux, a polled file (an *os.File with deadlines, or a type that
//     embeds one and says so, as upstream's process stdin) is read and
//     written with raw system calls, which do not wake the runtime's
//     sysmon thread as os.File's do (rawio_linux.go); [Polled] makes an
//     inherited stdin such a file.
//
// The package uses the standard library and the SDK's public packages only.
package mcpstream

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// DefaultMaxMessage is the longest line taken by default: the SDK's own.
const DefaultMaxMessage = mcp.DefaultMaxLineLength

// ErrConnected is returned by a second Connect of one Transport.
var ErrConnected = errors.New("mcpstream: the transport is already connected")

// Options configure a Transport. A nil *Options means the defaults.
type Options struct {
	// MaxMessage is the longest line (message or batch) taken, in bytes;
	// 0 means DefaultMaxMessage.
	MaxMessage int
	// OnMalformed, when set, makes a malformed line an answered error
	// rather than the end of the connection: the connection writes the
	// JSON-RPC error answer and reads on, and tells OnMalformed its code
	// and why. Meant for a server, whose client's stray line must not end
	// the session.
	OnMalformed func(code int64, reason string)
	// OnDropped, when set, is told of each line a client connection (one
	// without OnMalformed) dropped: one it could not decode that carries
	// no usable id (see salvage.go). Meant for the owner's log.
	OnDropped func(err error)
	// Drain, when positive, holds the end of the stream back from Read
	// until the requests already read are answered (Write of a response
	// with their id), the connection closes, or Drain has passed: a
	// client that writes a request and closes its end at once (a shell
	// pipe) gets the answer. Without it the end is reported at once, and
	// the SDK cancels the requests it is still handling. Meant for a
	// server; a request never answered costs the whole Drain.
	Drain time.Duration
}

func (o *Options) maxMessage() int {
	if o == nil || o.MaxMessage <= 0 {
		return DefaultMaxMessage
	}
	return o.MaxMessage
}

// Transport is an mcp.Transport over a reader and a writer: a process's
// stdin and stdout, or a pipe. It connects once.
type Transport struct {
	r         io.ReadCloser
	w         io.WriteCloser
	opts      Options
	connected atomic.Bool
}

// New returns a transport that reads messages from r and writes them to w;
// the connection's Close closes both.
func New(r io.ReadCloser, w io.WriteCloser, opts *Options) *Transport {
	t := &Transport{r: r, w: w}
	if opts != nil {
		t.opts = *opts
	}
	return t
}

// Pipe returns two transports connected to each other in memory (over
// net.Pipe), for tests and benchmarks; either side may be the server.
func Pipe(opts *Options) (*Transport, *Transport) {
	a, b := net.Pipe()
	return New(a, a, opts), New(b, b, opts)
}

// Connect implements mcp.Transport: it starts reading.
func (t *Transport) Connect(context.Context) (mcp.Connection, error) {
	if !t.connected.CompareAndSwap(false, true) {
		return nil, ErrConnected
	}
	c := &conn{
		r:        t.r,
		w:        t.w,
		out:      rawWriter(t.w),
		opts:     t.opts,
		max:      t.opts.maxMessage(),
		incoming: make(chan incoming),
		closed:   make(chan struct{}),
		answered: make(chan struct{}, 1),
	}
	if d, ok := t.r.(deadliner); ok && d.SetReadDeadline(time.Time{}) == nil {
		// Closing (or a read deadline) interrupts a blocked read of this
		// stream: Read may read it itself.
		c.direct = bufio.NewReaderSize(rawReader(c.r), readBuffer)
		return c, nil
	}
	go c.readLoop()
	return c, nil
}

// readBuffer is the read buffer of a connection: a line within it (almost
// every message) is copied once.
const readBuffer = 64 << 10

// deadliner is a stream whose blocked reads a deadline interrupts.
type deadliner interface {
	SetReadDeadline(time.Time) error
}

// Unclosed returns r for [New] with a Close that only interrupts a blocked
// Read (by a read deadline in the past) and leaves r open for its owner:
// exec.Cmd's StdoutPipe, which Wait closes. r must support read deadlines
// (an *os.File from os.Pipe or exec.Cmd does); one that does not is
// wrapped as io.NopCloser would, and read by the connection's goroutine.
func Unclosed(r io.Reader) io.ReadCloser {
	if d, ok := r.(deadlineReader); ok {
		return unclosed{d}
	}
	return io.NopCloser(r)
}

type deadlineReader interface {
	io.Reader
	deadliner
}

type unclosed struct{ deadlineReader }

func (u unclosed) Close() error {
	if err := u.SetReadDeadline(time.Unix(1, 0)); err != nil && !errors.Is(err, os.ErrNoDeadline) {
		return err
	}
	return nil // without deadlines: read by the connection's goroutine
}

// incoming is what the read loop hands Read: the messages of one line, or
// the error that ends reading.
type incoming struct {
	msgs  []jsonrpc.Message
	batch bool
	err   error
}

type conn struct {
	r    io.ReadCloser
	w    io.WriteCloser
	out  io.Writer // w, or its descriptor written directly (rawWriter)
	opts Options
	max  int

	incoming chan incoming
	queue    []jsonrpc.Message // the rest of the last batch; Read is not concurrent

	// Reading by Read itself (a stream with read deadlines): the buffered
	// stream, the read a Read with a cancellable context left running
	// (its result is the next Read's), and the error that ended reading.
	direct    *bufio.Reader
	pending   chan incoming
	directErr error

	writeMu sync.Mutex
	scan    idScan // of the last line read, when it failed (one reader at a time)

	batchMu sync.Mutex
	batches map[jsonrpc.ID]*batch // the open batches' requests, by id

	// Requests read and not yet answered, for Options.Drain; answered is
	// signalled (never blocking) at each answer.
	openMu   sync.Mutex
	open     map[jsonrpc.ID]int
	answered chan struct{}

	closeOnce sync.Once
	closed    chan struct{}
	closeErr  error
}

// batch collects the answers to the requests of one batch, in the order of
// the requests.
type batch struct {
	waiting int
	answers []*jsonrpc.Response
	slot    map[jsonrpc.ID]int
}

func (c *conn) SessionID() string { return "" }

// Read implements mcp.Connection.
func (c *conn) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, err := c.read(ctx)
	if c.opts.Drain <= 0 {
		return msg, err
	}
	if req, ok := msg.(*jsonrpc.Request); ok && err == nil && req.IsCall() {
		c.openMu.Lock()
		if c.open == nil {
			c.open = map[jsonrpc.ID]int{}
		}
		c.open[req.ID]++ // a reused id is answered twice, or not
		c.openMu.Unlock()
	}
	if errors.Is(err, io.EOF) {
		c.awaitAnswers(ctx)
	}
	return msg, err
}

// awaitAnswers waits, up to Options.Drain, until every request read is
// answered; Close and ctx end it sooner.
func (c *conn) awaitAnswers(ctx context.Context) {
	timer := time.NewTimer(c.opts.Drain)
	defer timer.Stop()
	for {
		c.openMu.Lock()
		n := len(c.open)
		c.openMu.Unlock()
		if n == 0 {
			return
		}
		select {
		case <-c.answered:
		case <-timer.C:
			return
		case <-c.closed:
			return
		case <-ctx.Done():
			return
		}
	}
}

// sawAnswer forgets the request resp answers, for Options.Drain.
func (c *conn) sawAnswer(resp *jsonrpc.Response) {
	if c.opts.Drain <= 0 {
		return
	}
	c.openMu.Lock()
	if c.open[resp.ID]--; c.open[resp.ID] <= 0 {
		delete(c.open, resp.ID)
	}
	c.openMu.Unlock()
	select {
	case c.answered <- struct{}{}:
	default:
	}
}

func (c *conn) read(ctx context.Context) (jsonrpc.Message, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(c.queue) > 0 {
		m := c.queue[0]
		c.queue = c.queue[1:]
		return m, nil
	}
	if c.direct != nil {
		return c.readDirect(ctx)
	}
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-c.closed:
		return nil, io.EOF
	case in := <-c.incoming:
		return c.take(in)
	}
}

// take returns the first message of in, queuing the rest of its batch.
func (c *conn) take(in incoming) (jsonrpc.Message, error) {
	if in.err != nil {
		return nil, in.err
	}
	if in.batch {
		if err := c.openBatch(in.msgs); err != nil {
			return nil, err
		}
	}
	c.queue = in.msgs[1:]
	return in.msgs[0], nil
}

// readDirect is Read over a stream with read deadlines: the next line is
// read here, with no goroutine in between; Close interrupts it. A context
// that can be cancelled (the SDK's reader passes one that cannot) gets a
// goroutine for this one read, so that the Read can return at once while
// the line is still read in full, for the next Read.
func (c *conn) readDirect(ctx context.Context) (jsonrpc.Message, error) {
	if ctx.Done() == nil && c.pending == nil {
		select {
		case <-c.closed:
			return nil, io.EOF
		default:
		}
		return c.take(c.nextLine())
	}
	if c.pending == nil {
		c.pending = make(chan incoming, 1)
		go func(ch chan<- incoming) { ch <- c.nextLine() }(c.pending)
	}
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-c.closed:
		return nil, io.EOF
	case in := <-c.pending:
		c.pending = nil
		return c.take(in)
	}
}

// nextLine reads the messages of the next line that has any (readLoop's
// work, for readDirect). Once reading failed, it fails the same way again.
func (c *conn) nextLine() incoming {
	for c.directErr == nil {
		line, tooLong, rerr := readLine(c.direct, c.max, &c.scan)
		in := c.decodeLine(line, tooLong, &c.scan)
		if rerr != nil {
			select {
			case <-c.closed:
				rerr = io.EOF // interrupted by Close
			default:
			}
			if errors.Is(rerr, io.EOF) {
				rerr = io.EOF // as the SDK's transports report a closed stream
			}
			c.directErr = rerr
		}
		if in.err != nil {
			c.directErr = in.err
			return in
		}
		if in.msgs != nil {
			return in // a last line without a newline first, then the error
		}
	}
	return incoming{err: c.directErr}
}

// openBatch records the requests of a batch, whose answers go out together.
func (c *conn) openBatch(msgs []jsonrpc.Message) error {
	b := &batch{slot: map[jsonrpc.ID]int{}}
	for _, m := range msgs {
		if req, ok := m.(*jsonrpc.Request); ok && req.IsCall() {
			if _, dup := b.slot[req.ID]; dup {
				return fmt.Errorf("%w: the batch has two requests with id %v", ErrInvalidMessage, req.ID.Raw())
			}
			b.slot[req.ID] = len(b.answers)
			b.answers = append(b.answers, nil)
		}
	}
	if len(b.answers) == 0 {
		return nil // notifications and responses only: nothing to answer
	}
	b.waiting = len(b.answers)
	c.batchMu.Lock()
	defer c.batchMu.Unlock()
	for id := range b.slot {
		if _, busy := c.batches[id]; busy {
			return fmt.Errorf("%w: the batch reuses the id %v of a request still open", ErrInvalidMessage, id.Raw())
		}
	}
	if c.batches == nil {
		c.batches = map[jsonrpc.ID]*batch{}
	}
	for id := range b.slot {
		c.batches[id] = b
	}
	return nil
}

// answerOfBatch files resp when it answers a request of a batch: it returns
// whether it did, and the batch's answers once resp was the last.
func (c *conn) answerOfBatch(resp *jsonrpc.Response) (done []*jsonrpc.Response, inBatch bool) {
	c.batchMu.Lock()
	defer c.batchMu.Unlock()
	b := c.batches[resp.ID]
	if b == nil {
		return nil, false
	}
	delete(c.batches, resp.ID)
	b.answers[b.slot[resp.ID]] = resp
	b.waiting--
	if b.waiting > 0 {
		return nil, true
	}
	return b.answers, true
}

// Write implements mcp.Connection.
func (c *conn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case <-c.closed:
		return mcp.ErrConnectionClosed
	default:
	}
	if resp, ok := msg.(*jsonrpc.Response); ok {
		// Counted as answered once written (or failed): the drain waits
		// for the write, not merely for the handler.
		defer c.sawAnswer(resp)
		if answers, inBatch := c.answerOfBatch(resp); inBatch {
			if answers == nil {
				return nil // the batch's other answers are still to come
			}
			return c.writeBatch(answers)
		}
	}
	data, err := EncodeMessage(msg)
	if err != nil {
		return fmt.Errorf("mcpstream: encoding a message: %w", err)
	}
	return c.writeLine(append(data, '\n'))
}

func (c *conn) writeBatch(answers []*jsonrpc.Response) error {
	var b bytes.Buffer
	b.WriteByte('[')
	for i, a := range answers {
		data, err := EncodeMessage(a)
		if err != nil {
			return fmt.Errorf("mcpstream: encoding a message: %w", err)
		}
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(data)
	}
	b.WriteString("]\n")
	return c.writeLine(b.Bytes())
}

// writeLine writes one whole line under the lock.
func (c *conn) writeLine(line []byte) error {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	if _, err := c.out.Write(line); err != nil {
		select {
		case <-c.closed:
			return fmt.Errorf("%w: %v", mcp.ErrConnectionClosed, err)
		default:
		}
		return err
	}
	return nil
}

// Close implements mcp.Connection: it closes both ends, once.
func (c *conn) Close() error {
	c.closeOnce.Do(func() {
		close(c.closed)
		c.closeErr = errors.Join(c.r.Close(), c.w.Close())
	})
	return c.closeErr
}

// decodeLine returns the messages of one line read, or why it cannot be
// read; nothing for a blank line and for a malformed one that OnMalformed
// had answered.
func (c *conn) decodeLine(line []byte, tooLong bool, scan *idScan) incoming {
	var in incoming
	switch {
	case tooLong:
		in.err = fmt.Errorf("%w: a line over %d bytes", ErrTooLarge, c.max)
	case len(bytes.TrimSpace(line)) > 0:
		in.msgs, in.batch, in.err = Decode(line, c.max)
	}
	if in.err != nil && c.opts.OnMalformed != nil {
		c.answerMalformed(line, in.err)
		return incoming{}
	}
	if in.err != nil {
		// A client's: the line fails the request it answers, if any
		// (salvage.go). A too long line was scanned as it was read.
		if !tooLong {
			*scan = idScan{}
			scan.feed(line)
		}
		return c.salvage(scan, in.err)
	}
	return in
}

// readLoop reads lines until the stream ends or the connection closes. It
// runs in its own goroutine so that Close can end a Read blocked on a
// stream that Close does not interrupt.
func (c *conn) readLoop() {
	br := bufio.NewReaderSize(c.r, readBuffer)
	for {
		line, tooLong, rerr := readLine(br, c.max, &c.scan)
		in := c.decodeLine(line, tooLong, &c.scan)
		if in.err == nil && in.msgs == nil && rerr == nil {
			continue // a blank line, or a malformed one answered
		}
		if errors.Is(rerr, io.EOF) {
			rerr = io.EOF // as the SDK's transports report a closed stream
		}
		if in.err == nil && in.msgs == nil {
			in.err = rerr
		}
		select {
		case c.incoming <- in:
		case <-c.closed:
			return
		}
		if in.err != nil {
			return
		}
		if rerr != nil {
			// The stream ended (or failed) after a last line without a
			// newline.
			select {
			case c.incoming <- incoming{err: rerr}:
			case <-c.closed:
			}
			return
		}
	}
}

// readLine reads the next line without its newline. A line over max bytes
// is read to its end and dropped (tooLong), never held whole; scan is
// reset and fed the whole of such a line, for its id.
func readLine(br *bufio.Reader, max int, scan *idScan) (line []byte, tooLong bool, err error) {
	for {
		chunk, err := br.ReadSlice('\n')
		if tooLong {
			scan.feed(chunk)
		} else {
			if len(line)+len(chunk) > max+2 { // + "\r\n"
				tooLong = true
				*scan = idScan{}
				scan.feed(line)
				scan.feed(chunk)
				line = nil
			} else if line == nil && !errors.Is(err, bufio.ErrBufferFull) {
				// The usual case, a line within the buffer: one copy of
				// its exact size, which the messages then point into.
				line = bytes.Clone(chunk)
			} else {
				line = append(line, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if !tooLong && len(bytes.TrimRight(line, "\r\n")) > max {
			*scan = idScan{}
			scan.feed(line)
			tooLong, line = true, nil
		}
		return line, tooLong, err
	}
}

// answerMalformed answers a line that could not be read, as JSON-RPC says:
// -32700 when it is not JSON (or too large to read), -32600 when it is not
// a JSON-RPC message; with the id of the message at fault when it has a
// usable one.
func (c *conn) answerMalformed(line []byte, err error) {
	code := int64(jsonrpc.CodeInvalidRequest)
	reason := "Invalid Request: " + err.Error()
	if errors.Is(err, ErrNotJSON) || errors.Is(err, ErrTooLarge) {
		code, reason = jsonrpc.CodeParseError, "Parse error: "+err.Error()
	}
	id := json.RawMessage("null")
	var be *BatchError
	switch {
	case errors.As(err, &be):
		id = usableID(be.Raw)
	case code == jsonrpc.CodeInvalidRequest:
		id = usableID(line)
	}
	c.writeError(id, code, errors.New(reason))
	c.opts.OnMalformed(code, reason)
}

// writeError answers the message whose id is the JSON text id with a
// JSON-RPC error.
func (c *conn) writeError(id json.RawMessage, code int64, why error) {
	type wireError struct {
		Code    int64  `json:"code"`
		Message string `json:"message"`
	}
	data, err := json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   wireError       `json:"error"`
	}{"2.0", id, wireError{code, why.Error()}})
	if err == nil {
		c.writeLine(append(data, '\n'))
	}
}

// usableID is the id of a message that could not be decoded, when it has
// one of a valid kind, else null.
func usableID(raw []byte) json.RawMessage {
	var v struct {
		ID json.RawMessage `json:"id"`
	}
	if json.Unmarshal(raw, &v) != nil {
		return json.RawMessage("null")
	}
	if _, err := requestID(v.ID); err != nil || len(v.ID) == 0 {
		return json.RawMessage("null")
	}
	return v.ID
}
