package server

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/time/rate"

	"github.com/agentbackplane/backplane/tool"
)

// Limits of the work one caller can make the gateway do (issue 22, item
// 7): a token bucket per caller that every request draws on, and caps on
// the resource subscriptions a session and a caller hold (content.go).
// What is refused is counted in /metrics and sampled in the audit log:
// a flooding caller must not fill the audit log with its refusals.

// Defaults of the subscription caps.
const (
	DefaultMaxSubscriptionsPerSession = 256
	DefaultMaxSubscriptionsPerCaller  = 1024
)

// CodeLimitExceeded is the JSON-RPC error code of a request refused by a
// limit of this server: the rate limit (over stdio; HTTP answers 429) or a
// subscription cap. JSON-RPC leaves -32000 to -32099 to the server; the
// error's data says which limit ("limit") and, for the rate, when to try
// again ("retryAfterSeconds").
const CodeLimitExceeded = -32029

// Kinds of limit, the "limit" label of backplane_mcp_requests_limited_total
// and the limit of the audit event.
const (
	limitRate                = "rate"
	limitSubscriptionSession = "subscriptions_per_session"
	limitSubscriptionCaller  = "subscriptions_per_caller"
)

// maxIdleLimiters is how many callers' buckets are kept before the full
// ones (the same as a new bucket) are forgotten: callers named by JWT
// claims are not a fixed set.
const maxIdleLimiters = 4096

// rateLimits holds the callers' buckets.
type rateLimits struct {
	every rate.Limit // 0: no limit
	burst int

	mu       sync.Mutex
	byCaller map[string]*rate.Limiter
}

func newRateLimits(perSecond, burst int) *rateLimits {
	r := &rateLimits{byCaller: map[string]*rate.Limiter{}}
	if perSecond > 0 {
		r.every = rate.Limit(perSecond)
		r.burst = max(burst, 1)
	}
	return r
}

// allow takes one request of caller from its bucket; when the bucket is
// empty it takes nothing and says how long until a request would pass.
func (r *rateLimits) allow(caller string) (ok bool, retryAfter time.Duration) {
	if r.every == 0 {
		return true, 0
	}
	now := time.Now()
	r.mu.Lock()
	lim := r.byCaller[caller]
	if lim == nil {
		if len(r.byCaller) >= maxIdleLimiters {
			for c, l := range r.byCaller {
				if l.TokensAt(now) >= float64(r.burst) {
					delete(r.byCaller, c)
				}
			}
		}
		lim = rate.NewLimiter(r.every, r.burst)
		r.byCaller[caller] = lim
	}
	r.mu.Unlock()
	res := lim.ReserveN(now, 1)
	if d := res.DelayFrom(now); d > 0 {
		res.CancelAt(now)
		return false, d
	}
	return true, 0
}

// refusalSampler samples the refusals of each caller for the audit log:
// the first of each second, with how many there were since the last one
// written.
type refusalSampler struct {
	mu   sync.Mutex
	last map[refusalKey]*refusalCount
}

type refusalKey struct{ caller, limit string }

type refusalCount struct {
	written time.Time
	since   int // refusals since the last event, this one included
}

// sample counts one refusal and says whether to write it, with the count.
func (f *refusalSampler) sample(caller, limit string, now time.Time) (write bool, count int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.last == nil {
		f.last = map[refusalKey]*refusalCount{}
	}
	k := refusalKey{caller, limit}
	c := f.last[k]
	if c == nil {
		if len(f.last) >= maxIdleLimiters {
			for k, c := range f.last {
				if now.Sub(c.written) > time.Minute {
					delete(f.last, k)
				}
			}
		}
		c = &refusalCount{}
		f.last[k] = c
	}
	c.since++
	if !c.written.IsZero() && now.Sub(c.written) < time.Second {
		return false, 0
	}
	count, c.since, c.written = c.since, 0, now
	return true, count
}

// limited records a request refused by a limit: the metric always; the
// audit event sampled (the first per caller and limit each second, with
// the count since the last); the log line throttled as every refusal's
// (logthrottle.go).
func (s *Server) limited(caller, limit, method, detail string) {
	s.metrics.limited.WithLabelValues(caller, limit).Inc()
	s.refusals.warn(s.log, "limit "+limit+" "+caller, "request refused by a limit",
		"caller", caller, "limit", limit, "method", method, "reason", detail)
	write, count := s.refused.sample(caller, limit, time.Now())
	if write {
		s.g.Record(context.Background(), tool.Event{Msg: "limit", Warn: true, Attrs: []any{"step", "limit", "outcome", "refused", "caller", caller,
			"limit", limit, "method", method, "refused", count, "reason", detail}})
	}
}

// rateLimitError is the JSON-RPC answer to a request over the rate limit.
func (s *Server) rateLimitError(caller string, retryAfter time.Duration) error {
	secs := retrySeconds(retryAfter)
	data, _ := json.Marshal(map[string]any{"limit": limitRate, "retryAfterSeconds": secs})
	return &jsonrpc.Error{Code: CodeLimitExceeded, Data: data, Message: fmt.Sprintf(
		"rate limited: caller %s is over %s (serve.rate_limit); retry after %ds", caller, s.describeRate(), secs)}
}

func (s *Server) describeRate() string {
	return fmt.Sprintf("%g requests a second, %d at once", float64(s.rates.every), s.rates.burst)
}

// retrySeconds is a Retry-After: whole seconds, at least 1.
func retrySeconds(d time.Duration) int {
	return max(1, int(math.Ceil(d.Seconds())))
}

// rateLimitHTTP answers 429, with Retry-After, to an HTTP request whose
// caller (requireToken put it there) is over its rate, before the MCP
// handler reads it: every request to /mcp (a POST of any message, the GET
// of a stream, a DELETE) draws on the bucket.
func (s *Server) rateLimitHTTP(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, _ := identFrom(r.Context())
		ok, retry := s.rates.allow(id.caller)
		if ok {
			next.ServeHTTP(w, r)
			return
		}
		s.limited(id.caller, limitRate, "http "+r.Method, s.describeRate())
		secs := retrySeconds(retry)
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		http.Error(w, fmt.Sprintf("rate limited: caller %s is over %s (serve.rate_limit); retry after %ds",
			id.caller, s.describeRate(), secs), http.StatusTooManyRequests)
	})
}

// rateLimitStdio is the stdio server's receiving middleware: a request
// over the caller's rate is answered with CodeLimitExceeded, a
// notification dropped, before any other work. (Over HTTP, rateLimitHTTP
// counts the HTTP requests instead: each would otherwise count twice.)
func (s *Server) rateLimitStdio(callerOf func(mcp.Request) (string, error)) mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			caller, err := callerOf(req)
			if err != nil {
				return next(ctx, method, req)
			}
			if ok, retry := s.rates.allow(caller); !ok {
				s.limited(caller, limitRate, method, s.describeRate())
				return nil, s.rateLimitError(caller, retry)
			}
			return next(ctx, method, req)
		}
	}
}
