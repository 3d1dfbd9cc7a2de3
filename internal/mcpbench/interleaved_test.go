package mcpbench

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbackplane/backplane/store/memstore"
)

// interleaveBlock is how many calls one leg makes before the next leg's
// turn in BenchmarkMCPProxyInterleaved: long enough that a leg's first
// call after another's (whose runtime state, such as a sysmon woken by
// the SQLite leg's system calls, it inherits) weighs little in its
// percentiles, short enough (tens of milliseconds) that every leg sees
// the same machine.
const interleaveBlock = 50

// BenchmarkMCPProxyInterleaved runs BenchmarkMCPProxy's three legs in one
// run, block by block in turn (direct, gateway over SQLite, gateway over
// memstore, the order rotated each block), so that their ratios are taken
// over the same seconds of a shared machine: the sub-benchmarks of
// BenchmarkMCPProxy run one after the other, and on this kind of machine
// the direct leg's p50, the ratios' denominator, moves by a third from
// one sub-benchmark to the next. Each op is one call on each leg. It
// reports each leg's p50 and p99 over all its calls and the ratios of the
// p50s (gateway/direct, memstore/direct); CPU per call is
// BenchmarkMCPProxy's (one process here serves all three legs).
//
//	go test ./internal/mcpbench -run '^$' -bench MCPProxyInterleaved -benchtime 3000x
func BenchmarkMCPProxyInterleaved(b *testing.B) {
	type leg struct {
		name string
		cs   *mcp.ClientSession
		tool string
		lat  []time.Duration
	}
	legs := []*leg{
		{name: "direct", cs: direct(b, upstreamCommand(b), upstreamEnv+"=1"), tool: "echo"},
		{name: "gateway", cs: throughGateway(b, sqliteStore(b), goUpstream(b)), tool: "up.echo"},
		{name: "memstore", cs: throughGateway(b, memstore.New(), goUpstream(b)), tool: "up.echo"},
	}
	ctx := context.Background()
	args := map[string]any{"text": "benchmark call"}
	call := func(l *leg) time.Duration {
		start := time.Now()
		res, err := l.cs.CallTool(ctx, &mcp.CallToolParams{Name: l.tool, Arguments: args})
		d := time.Since(start)
		if err != nil || res.IsError {
			b.Fatalf("%s: %v %+v", l.name, err, res)
		}
		if sc, _ := res.StructuredContent.(map[string]any); sc["text"] != "benchmark call" {
			b.Fatalf("%s answered %+v", l.name, res)
		}
		return d
	}
	for _, l := range legs {
		for range 20 { // warm up, as runCalls does
			call(l)
		}
		l.lat = make([]time.Duration, 0, b.N)
	}
	b.ResetTimer()
	for done, block := 0, 0; done < b.N; block++ {
		n := min(interleaveBlock, b.N-done)
		for k := range legs {
			l := legs[(block+k)%len(legs)]
			for range n {
				l.lat = append(l.lat, call(l))
			}
		}
		done += n
	}
	b.StopTimer()
	p50 := map[string]float64{}
	for _, l := range legs {
		slices.Sort(l.lat)
		p50[l.name] = float64(l.lat[len(l.lat)/2].Nanoseconds())
		b.ReportMetric(p50[l.name], l.name+"-p50-ns")
		b.ReportMetric(float64(l.lat[min(len(l.lat)-1, len(l.lat)*99/100)].Nanoseconds()), l.name+"-p99-ns")
	}
	b.ReportMetric(p50["gateway"]/p50["direct"], "gateway/direct")
	b.ReportMetric(p50["memstore"]/p50["direct"], "memstore/direct")
}
