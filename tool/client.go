package tool

import (
	"context"
	"encoding/json"
)

// Client is the client behind a call, as the call's backend may reach it
// while the call runs: an upstream MCP server's progress and log messages
// go to it, and so do the requests such a server makes of its client
// (sampling, elicitation, roots). It travels in the call ([Call.Client]),
// like [Asker], never in a context value: each call has its own.
//
// The messages are MCP's, carried as JSON so that this package stays free
// of any protocol library: params and results are the JSON objects of the
// MCP specification.
type Client interface {
	// Progress reports progress of the call to the client, under the
	// client's own progress token. It does nothing when the client asked
	// for no progress.
	Progress(ctx context.Context, p Progress) error
	// Log sends a log message to the calling session, which drops it when
	// its level is below the session's logging/setLevel.
	Log(ctx context.Context, m LogMessage) error
	// Request sends the client a request of a server (one of the
	// Request* methods) and returns its result. It fails with an error
	// wrapping ErrNoChannel when the client did not declare the
	// capability the method needs.
	Request(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error)
}

// The requests a Client may be sent.
const (
	RequestSampling    = "sampling/createMessage"
	RequestElicitation = "elicitation/create"
	RequestRoots       = "roots/list"
)

// Progress is one progress report (MCP notifications/progress without its
// token).
type Progress struct {
	Progress float64
	Total    float64 // 0: unknown
	Message  string
}

// LogMessage is one log message (MCP notifications/message).
type LogMessage struct {
	Level  string // debug, info, notice, warning, error, critical, alert, emergency
	Logger string
	Data   json.RawMessage
}

// Capabilities are the server requests the client behind a call declared
// it answers (its MCP client capabilities).
type Capabilities struct {
	Sampling       bool // sampling/createMessage
	Elicitation    bool // elicitation/create, form mode
	ElicitationURL bool // elicitation/create, URL mode
	Roots          bool // roots/list
}

// CapableClient is implemented by a [Client] that knows what its caller
// declared. A backend whose server takes its client's capabilities with
// each request (MCP 2026-07-28) declares no more than these, so that the
// server does not ask for what the caller cannot give.
type CapableClient interface {
	Capabilities() Capabilities
}

// ListeningClient is implemented by a [Client] that knows, when the call
// starts, what of the call's notifications can reach its caller: progress
// only when its request carried a progress token, log messages only when
// it has a log level or may set one while the call runs (a 2026-07-28
// request without a log level never can). A backend need not ask its
// server for what would be dropped: an MCP upstream is then sent no
// progress token or no log level with the call, which also spares the
// server the work of reading them. A client without it is taken to listen
// to both.
type ListeningClient interface {
	Listens() (progress, logs bool)
}

// InputDeferrer is implemented by a [Client] whose caller answers a
// server's requests by calling again (MCP 2026-07-28 multi round-trip
// requests) rather than during the call. When DefersInput reports true, a
// backend whose upstream answers input_required does not relay its
// requests with Client.Request: Invoke returns an *InputRequiredError, and
// the caller's retry comes back with Call.Input. (A client without it, or
// answering false, is asked with Request during the call.)
type InputDeferrer interface {
	DefersInput() bool
}

// InputRequest is one request of an upstream server to the calling client
// (Method one of the Request* methods, Params its JSON object), already
// marked with the server's name as Request's would be.
type InputRequest struct {
	Method string
	Params json.RawMessage
}

// InputRequiredError is a backend's answer to a call that cannot complete
// before the client answers Requests (by the server's ids). State is
// opaque, the backend's own: the retry must carry it back unchanged in
// InputAnswers.State, with the answers by the same ids. The caller is to
// bind State to the call it belongs to (sign it) before it leaves the
// process: it holds the upstream server's own request state.
type InputRequiredError struct {
	Server   string // the upstream server that asks
	Requests map[string]InputRequest
	State    string
}

func (e *InputRequiredError) Error() string {
	return "the upstream server " + e.Server + " needs the client's input before the call can complete"
}

// InputAnswers are the client's answers to an *InputRequiredError: each
// answer the JSON result of its request, by the request's id, and the
// error's State unchanged.
type InputAnswers struct {
	Responses map[string]json.RawMessage
	State     string
	// Round counts the rounds of answers before these (0: the first), for
	// a host that bounds how often a call may ask again.
	Round int
}
