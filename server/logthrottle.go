package server

import (
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Refusals are logged a few at a time: a caller retrying in a loop would
// otherwise write one line per request, burying everything else in the
// log and, when serve's stderr is a pipe nobody reads, blocking the
// requests that log once the pipe is full.
const (
	// refusalBurst lines per key and refusalWindow are written as they
	// come; the rest of the window's are counted and reported in one line
	// when the window ends.
	refusalBurst  = 5
	refusalWindow = time.Minute
	// maxThrottleKeys bounds the keys remembered (a key holds a caller's
	// name, which an OAuth issuer chooses); beyond it, new keys share one.
	maxThrottleKeys = 1024
)

// overflowKey is the key of the lines whose own key found no room.
const overflowKey = "\x00overflow"

// logThrottle lets the first burst lines of each key and window through
// and counts the rest, which one line then reports ("N more suppressed"),
// with the attributes of the last line suppressed.
type logThrottle struct {
	burst  int
	window time.Duration
	now    func() time.Time
	// after runs f after d (time.AfterFunc; tests replace it).
	after func(d time.Duration, f func())

	mu   sync.Mutex
	keys map[string]*throttled
}

// throttled is one key's window.
type throttled struct {
	start      time.Time
	n          int // lines of this window, written or not
	suppressed int
	msg        string
	args       []any // of the last line suppressed
}

func newLogThrottle() *logThrottle {
	return &logThrottle{burst: refusalBurst, window: refusalWindow, now: time.Now,
		after: func(d time.Duration, f func()) { time.AfterFunc(d, f) }, keys: map[string]*throttled{}}
}

// warn writes msg and args at WARN to log, unless key already had burst
// lines in its window.
func (t *logThrottle) warn(log *slog.Logger, key, msg string, args ...any) {
	now := t.now()
	t.mu.Lock()
	k := t.keys[key]
	if k == nil {
		if len(t.keys) >= maxThrottleKeys {
			t.sweepLocked(now)
		}
		if len(t.keys) >= maxThrottleKeys {
			key = overflowKey
			k = t.keys[key]
		}
		if k == nil {
			k = &throttled{start: now}
			t.keys[key] = k
		}
	}
	var summary func()
	if now.Sub(k.start) >= t.window {
		// A new window. A count the timer has not reported yet (it runs
		// late, or not before this line) is reported now.
		summary = t.summaryLocked(log, k)
		k.start, k.n = now, 0
	}
	k.n++
	write := k.n <= t.burst
	if !write {
		k.suppressed++
		k.msg, k.args = msg, args
		if k.suppressed == 1 {
			start := k.start
			t.after(start.Add(t.window).Sub(now), func() { t.flush(log, key, start) })
		}
	}
	t.mu.Unlock()
	if summary != nil {
		summary()
	}
	if write {
		log.Warn(msg, args...)
	}
}

// flush reports the suppressed lines of key's window that began at start,
// if that window is still the key's and they were not reported yet.
func (t *logThrottle) flush(log *slog.Logger, key string, start time.Time) {
	t.mu.Lock()
	k := t.keys[key]
	var summary func()
	if k != nil && k.start.Equal(start) {
		summary = t.summaryLocked(log, k)
	}
	t.mu.Unlock()
	if summary != nil {
		summary()
	}
}

// summaryLocked takes k's count of suppressed lines and returns the write
// of the line that reports it (nil when there is none), to run unlocked.
func (t *logThrottle) summaryLocked(log *slog.Logger, k *throttled) func() {
	if k.suppressed == 0 {
		return nil
	}
	n, msg, args := k.suppressed, k.msg, k.args
	k.suppressed, k.msg, k.args = 0, "", nil
	window := t.window
	return func() {
		log.Warn(fmt.Sprintf("%s: %d more suppressed", msg, n), append([]any{"suppressed", n, "within", window}, args...)...)
	}
}

// sweepLocked forgets the keys whose window ended with nothing to report.
func (t *logThrottle) sweepLocked(now time.Time) {
	for key, k := range t.keys {
		if k.suppressed == 0 && now.Sub(k.start) >= t.window {
			delete(t.keys, key)
		}
	}
}
