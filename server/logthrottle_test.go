package server

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeTimers is a clock and the timers started on it, run by hand.
type fakeTimers struct {
	mu     sync.Mutex
	now    time.Time
	timers []fakeTimer
}

type fakeTimer struct {
	at time.Time
	f  func()
}

func (c *fakeTimers) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeTimers) After(d time.Duration, f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.timers = append(c.timers, fakeTimer{c.now.Add(d), f})
}

// advance moves the clock and runs the timers due.
func (c *fakeTimers) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []func()
	kept := c.timers[:0]
	for _, tm := range c.timers {
		if !tm.at.After(c.now) {
			due = append(due, tm.f)
		} else {
			kept = append(kept, tm)
		}
	}
	c.timers = kept
	c.mu.Unlock()
	for _, f := range due {
		f()
	}
}

func newTestThrottle() (*logThrottle, *fakeTimers, *bytes.Buffer, *slog.Logger) {
	c := &fakeTimers{now: time.Unix(1000, 0)}
	th := newLogThrottle()
	th.now, th.after = c.Now, c.After
	var buf bytes.Buffer
	return th, c, &buf, slog.New(slog.NewTextHandler(&buf, nil))
}

// TestLogThrottle: finding 24 of issue 22. A key's first refusalBurst
// lines of a window are written, the rest counted and reported in one
// line when the window ends; other keys are not affected; the next
// window writes again.
func TestLogThrottle(t *testing.T) {
	th, clock, buf, log := newTestThrottle()
	for i := range 100 {
		th.warn(log, "sessions alice", "session refused", "caller", "alice", "n", i)
	}
	th.warn(log, "sessions bob", "session refused", "caller", "bob")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != refusalBurst+1 {
		t.Fatalf("%d lines for 100 refusals of alice and 1 of bob, want %d:\n%s", len(lines), refusalBurst+1, buf)
	}
	if !strings.Contains(lines[refusalBurst], "caller=bob") {
		t.Errorf("bob's refusal was suppressed with alice's:\n%s", buf)
	}
	buf.Reset()
	clock.advance(refusalWindow)
	out := buf.String()
	if strings.Count(out, "\n") != 1 || !strings.Contains(out, `msg="session refused: 95 more suppressed"`) ||
		!strings.Contains(out, "suppressed=95") || !strings.Contains(out, "caller=alice n=99") {
		t.Errorf("at the window's end, want one line reporting 95 suppressed with the last one's attributes, got:\n%s", out)
	}
	// A new window: written again, and nothing reported twice.
	buf.Reset()
	th.warn(log, "sessions alice", "session refused", "caller", "alice")
	clock.advance(2 * refusalWindow)
	if out := buf.String(); strings.Count(out, "\n") != 1 || strings.Contains(out, "more suppressed") {
		t.Errorf("the next window:\n%s", out)
	}
}

// The timer may run after the next window began: the count is reported
// once, by whichever comes first.
func TestLogThrottleLateTimer(t *testing.T) {
	th, clock, buf, log := newTestThrottle()
	for range refusalBurst + 3 {
		th.warn(log, "k", "refused")
	}
	clock.mu.Lock()
	clock.now = clock.now.Add(refusalWindow) // the clock moves, the timer has not run
	clock.mu.Unlock()
	th.warn(log, "k", "refused")
	clock.advance(0)
	if n := strings.Count(buf.String(), "3 more suppressed"); n != 1 {
		t.Errorf("the suppressed lines were reported %d times, want once:\n%s", n, buf)
	}
}

// Keys are bounded: a flood of distinct keys (callers an OAuth issuer
// names) shares one key past maxThrottleKeys, and is throttled there.
func TestLogThrottleKeysAreBounded(t *testing.T) {
	th, _, buf, log := newTestThrottle()
	for i := range 3 * maxThrottleKeys {
		th.warn(log, fmt.Sprint("sessions caller", i), "session refused")
	}
	if n := len(th.keys); n > maxThrottleKeys+1 {
		t.Errorf("%d keys remembered, want at most %d", n, maxThrottleKeys+1)
	}
	if n := strings.Count(buf.String(), "\n"); n != maxThrottleKeys+refusalBurst {
		t.Errorf("%d lines, want %d (one per remembered key, then the shared key's burst)", n, maxThrottleKeys+refusalBurst)
	}
}
