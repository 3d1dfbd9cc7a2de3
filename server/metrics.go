package server

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/tool"
)

// Outcomes of a tool call, the "outcome" label of backplane_mcp_tool_calls_total.
const (
	outcomeSucceeded = "succeeded"  // the tool ran and returned a result
	outcomeToolError = "tool_error" // the tool ran and reported an error (isError)
	outcomeRefused   = "refused"    // the gateway refused it before invocation
	outcomeFailed    = "failed"     // invoked, then failed, timed out or became uncertain
)

// unknownTool is the tool label of calls naming no registered tool: a
// client must not be able to create a label value per made-up name.
const unknownTool = "(unknown)"

// metrics are the server's Prometheus metrics, in a registry of their own
// (never the global one: two servers in one process must not collide).
type metrics struct {
	reg      *prometheus.Registry
	calls    *prometheus.CounterVec
	refusals *prometheus.CounterVec
	failures *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	limited  *prometheus.CounterVec
	evicted  *prometheus.CounterVec
}

// budgetUsage is where the budget figures are read: the gateway's view
// of its store's usage.
type budgetUsage interface {
	BudgetUsage(ctx context.Context) ([]store.Usage, error)
}

func newMetrics(st budgetUsage, extra ...prometheus.Collector) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "backplane_mcp_tool_calls_total",
			Help: "MCP tools/call requests by tool and outcome (succeeded, tool_error, refused, failed).",
		}, []string{"tool", "outcome"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "backplane_mcp_tool_call_refusals_total",
			Help: "Calls the gateway refused before invoking the tool, by error class.",
		}, []string{"class"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "backplane_mcp_tool_call_failures_total",
			Help: "Calls that were invoked and then failed, timed out or became uncertain, by error class.",
		}, []string{"class"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "backplane_mcp_tool_call_duration_seconds",
			Help: "Time from receiving tools/call to its answer, approval waits included, by tool.",
			// From a fast built-in tool (~100µs) to a call held for an
			// approval (minutes).
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300},
		}, []string{"tool"}),
		limited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "backplane_mcp_requests_limited_total",
			Help: "MCP requests refused by a limit of the server, by caller and limit (rate, sessions, subscriptions_per_session, subscriptions_per_caller).",
		}, []string{"caller", "limit"}),
		evicted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "backplane_mcp_sessions_evicted_total",
			Help: "Idle HTTP sessions closed to make room for a new one of the same caller at serve.max_sessions_per_caller, by caller.",
		}, []string{"caller"}),
	}
	m.reg.MustRegister(m.calls, m.refusals, m.failures, m.latency, m.limited, m.evicted,
		&budgetCollector{st: st},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.reg.MustRegister(extra...)
	return m
}

// observe records one answered tools/call.
func (m *metrics) observe(name string, res *gateway.CallResult, err error, d time.Duration) {
	var outcome string
	switch {
	case err == nil && res.IsError:
		outcome = outcomeToolError
	case err == nil:
		outcome = outcomeSucceeded
	default:
		class := string(tool.ClassExecutionFailure)
		var ge *gateway.Error
		if errors.As(err, &ge) {
			class = string(ge.Class)
		}
		if refusedBeforeInvocation(err) {
			outcome = outcomeRefused
			m.refusals.WithLabelValues(class).Inc()
		} else {
			outcome = outcomeFailed
			m.failures.WithLabelValues(class).Inc()
		}
	}
	m.calls.WithLabelValues(name, outcome).Inc()
	m.latency.WithLabelValues(name).Observe(d.Seconds())
}

// refusedBeforeInvocation tells a refusal (nothing ran) from a failure of a
// call that was invoked: the gateway's Step says where the call stopped.
func refusedBeforeInvocation(err error) bool {
	var ge *gateway.Error
	if !errors.As(err, &ge) {
		return false
	}
	return ge.Step != "invoke" && ge.Step != "settle"
}

// budgetCollector reads the store's budget usage (through the gateway) at
// each scrape, so the figure is the store's (shared with other processes),
// not a local count.
type budgetCollector struct{ st budgetUsage }

var budgetUsedDesc = prometheus.NewDesc("backplane_budget_used",
	"Budget units held per scope (caller or session), key and window length (per, \"\" for none) in the current window, as the store reports them.",
	[]string{"scope", "key", "per"}, nil)

func (c *budgetCollector) Describe(ch chan<- *prometheus.Desc) { ch <- budgetUsedDesc }

func (c *budgetCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	usage, err := c.st.BudgetUsage(ctx)
	if err != nil {
		// The scrape fails visibly rather than reporting no usage.
		ch <- prometheus.NewInvalidMetric(budgetUsedDesc, err)
		return
	}
	now := time.Now()
	for _, u := range usage {
		per := ""
		if !u.Window.IsZero() {
			if !now.Before(u.Window.End()) || now.Before(u.Window.Start) {
				continue // only the current window: one series per (scope, key, per)
			}
			per = u.Window.Per.String()
		}
		ch <- prometheus.MustNewConstMetric(budgetUsedDesc, prometheus.GaugeValue, float64(u.Used), u.Scope, u.Key, per)
	}
}

// sessionCollector reports the open HTTP sessions per caller at each
// scrape, from the server's table (the figure the cap is held to).
type sessionCollector struct{ s *Server }

var (
	sessionsOpenDesc = prometheus.NewDesc("backplane_mcp_sessions_open",
		"Open MCP HTTP sessions per caller.", []string{"caller"}, nil)
	sessionsBusyDesc = prometheus.NewDesc("backplane_mcp_sessions_in_use",
		"Open MCP HTTP sessions per caller with a request, stream or call in progress (never closed to make room).", []string{"caller"}, nil)
)

func (c sessionCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- sessionsOpenDesc
	ch <- sessionsBusyDesc
}

func (c sessionCollector) Collect(ch chan<- prometheus.Metric) {
	open, busy := map[string]int{}, map[string]int{}
	for _, si := range c.s.Sessions() {
		open[si.Caller]++
		if si.InFlight > 0 {
			busy[si.Caller]++
		}
	}
	for caller, n := range open {
		ch <- prometheus.MustNewConstMetric(sessionsOpenDesc, prometheus.GaugeValue, float64(n), caller)
		ch <- prometheus.MustNewConstMetric(sessionsBusyDesc, prometheus.GaugeValue, float64(busy[caller]), caller)
	}
}

// upstreamCollector reports each upstream server's state at each scrape,
// from the gateway (the states its health checks read).
type upstreamCollector struct{ g *gateway.Gateway }

var (
	upstreamUpDesc = prometheus.NewDesc("backplane_upstream_up",
		"1 while the upstream MCP server is connected, 0 while it is down.", []string{"server"}, nil)
	upstreamRestartsDesc = prometheus.NewDesc("backplane_upstream_restarts_total",
		"Reconnections of the upstream MCP server after it went down.", []string{"server"}, nil)
)

func (c upstreamCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- upstreamUpDesc
	ch <- upstreamRestartsDesc
}

func (c upstreamCollector) Collect(ch chan<- prometheus.Metric) {
	for _, u := range c.g.Upstreams() {
		up := 0.0
		if u.Up {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(upstreamUpDesc, prometheus.GaugeValue, up, u.Name)
		ch <- prometheus.MustNewConstMetric(upstreamRestartsDesc, prometheus.CounterValue, float64(u.Restarts), u.Name)
	}
}
