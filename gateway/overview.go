package gateway

// The overview of a running gateway over a time range: calls by outcome
// per bucket, latency, approvals, from what the store keeps (the intents
// and the refusals of every replica), read a page at a time.

import (
	"context"
	"slices"
	"time"

	"github.com/agentbackplane/backplane/opsview"
	"github.com/agentbackplane/backplane/store"
)

// Overview counts the calls from since to until (until zero: now) in
// buckets of bucket (at least a minute; at most 500 buckets: a longer
// range gets longer buckets).
func (g *Gateway) Overview(ctx context.Context, since, until time.Time, bucket time.Duration) (*opsview.Overview, error) {
	if until.IsZero() {
		until = g.now()
	}
	if !since.Before(until) {
		since = until.Add(-time.Hour)
	}
	bucket = max(bucket, time.Minute)
	for until.Sub(since)/bucket > 500 {
		bucket *= 2
	}
	start := since.Truncate(bucket)
	o := &opsview.Overview{Since: since, Until: until, Bucket: bucket, Totals: map[string]int{}}
	for t := start; t.Before(until); t = t.Add(bucket) {
		o.Buckets = append(o.Buckets, opsview.OverviewBucket{Start: t, Counts: map[string]int{}})
	}
	count := func(at time.Time, outcome string) {
		if at.Before(since) || !at.Before(until) {
			return
		}
		i := int(at.Sub(start) / bucket)
		if i >= 0 && i < len(o.Buckets) {
			o.Buckets[i].Counts[outcome]++
		}
		o.Totals[outcome]++
	}

	var lat []time.Duration
	cursor, scanned := "", 0
scan:
	for {
		p, err := g.store.PageIntents(ctx, store.IntentFilter{Limit: journalPageRows}, cursor)
		if err != nil {
			return nil, err
		}
		for i := range p.Intents {
			in := &p.Intents[i]
			if in.CreatedAt.Before(since) {
				break scan
			}
			if scanned++; scanned > opsview.MaxOverviewScan {
				o.Truncated = true
				break scan
			}
			count(in.CreatedAt, opsview.Outcome(in))
			if !in.SettledAt.IsZero() && in.Status != store.StatusExecuted && in.Status != store.StatusNotExecuted &&
				!in.CreatedAt.Before(since) && in.CreatedAt.Before(until) {
				lat = append(lat, in.SettledAt.Sub(in.CreatedAt))
			}
		}
		if p.Next == "" {
			break
		}
		cursor = p.Next
	}
	rs, err := g.ListRefusals(ctx, store.RefusalFilter{Since: since, Until: until, Limit: opsview.MaxOverviewScan})
	if err != nil {
		return nil, err
	}
	if len(rs) == opsview.MaxOverviewScan {
		o.Truncated = true
	}
	for _, r := range rs {
		count(r.At, opsview.OutcomeRefused+r.Class)
	}
	if len(lat) > 0 {
		slices.Sort(lat)
		o.Settled = len(lat)
		o.P50, o.P95 = lat[(len(lat)-1)*50/100], lat[(len(lat)-1)*95/100]
	}
	as, err := g.store.ListApprovals(ctx, store.ApprovalFilter{Limit: 1000}, g.now())
	if err != nil {
		return nil, err
	}
	for _, a := range as {
		switch {
		case a.Status == store.ApprovalPending:
			o.Pending++
		case !a.DecidedAt.IsZero() && !a.DecidedAt.Before(since) && a.DecidedAt.Before(until):
			o.Decided++
		}
	}
	return o, nil
}
