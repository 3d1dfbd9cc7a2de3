package opsview

import (
	"time"

	"github.com/agentbackplane/backplane/store"
)

// Outcomes an overview counts. A refusal counts as OutcomeRefused+class
// ("refused:forbidden").
const (
	OutcomeSucceeded = "succeeded"
	OutcomeToolError = "tool_error"
	OutcomeFailed    = "failed"
	OutcomeUncertain = "uncertain"
	OutcomeStarted   = "started"
	OutcomeResolved  = "resolved" // an uncertain call an operator resolved
	OutcomeRefused   = "refused:"
)

// MaxOverviewScan bounds the rows of each kind one overview reads.
const MaxOverviewScan = 50000

// Overview is the gateway's activity from Since to Until.
type Overview struct {
	Since, Until time.Time
	Bucket       time.Duration
	// Buckets are consecutive, oldest first, Bucket long each.
	Buckets []OverviewBucket
	// Totals count the range's calls by outcome.
	Totals map[string]int
	// P50 and P95 are the latencies of the calls that settled (commit to
	// settlement), over Settled calls.
	P50, P95 time.Duration
	Settled  int
	// Pending approvals now; Decided in the range.
	Pending, Decided int
	// Truncated says the range held more than MaxOverviewScan rows of a
	// kind: the counts are of the newest.
	Truncated bool
}

// OverviewBucket counts the calls of one bucket by outcome.
type OverviewBucket struct {
	Start  time.Time
	Counts map[string]int
}

// Outcome is how an intent's call ended, as the overview counts it.
func Outcome(in *store.Intent) string {
	switch in.Status {
	case store.StatusSucceeded:
		if ToolReportedError(in) {
			return OutcomeToolError
		}
		return OutcomeSucceeded
	case store.StatusFailed:
		return OutcomeFailed
	case store.StatusUncertain:
		return OutcomeUncertain
	case store.StatusStarted:
		return OutcomeStarted
	}
	return OutcomeResolved
}
