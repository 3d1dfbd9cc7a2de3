package budget

import (
	"fmt"
	"time"
)

// Reservation is the budget one call takes from one (scope, key).
type Reservation struct {
	Scope  string `json:"scope"` // "caller" or "session"
	Key    string `json:"key"`   // the caller name or the session id
	Quota  int64  `json:"quota"` // the limit in force, checked at reservation
	Amount int64  `json:"amount"`
	// Window is the window the call counts in (the one holding the call's
	// commit time); zero for a budget without windows. Each window of a
	// (scope, key) has its own usage.
	Window Window `json:"window,omitzero"`
}

// Window is the fixed time window a reservation counts in: [Start,
// Start+Per), aligned to the Unix epoch (Start is a whole multiple of Per
// after 1970-01-01T00:00:00Z). The zero Window is no window: the budget is
// counted for ever, as before windows existed.
//
// Per is a whole number of seconds, at least one (stores keep seconds);
// CheckWindow refuses anything else.
type Window struct {
	Per   time.Duration `json:"per,omitzero"`
	Start time.Time     `json:"start,omitzero"`
}

// MaxWindow bounds a window's length: a window longer than this would
// start at the epoch itself for every call of the next decades, which is
// no window at all.
const MaxWindow = 366 * 24 * time.Hour

// WindowAt returns the window of length per that holds t; the zero Window
// when per is 0.
func WindowAt(per time.Duration, t time.Time) Window {
	if per <= 0 {
		return Window{}
	}
	secs := int64(per / time.Second)
	u := t.Unix()
	start := u - u%secs
	if u < 0 && u%secs != 0 { // floor for instants before the epoch
		start -= secs
	}
	return Window{Per: per, Start: time.Unix(start, 0).UTC()}
}

// IsZero reports whether w is no window.
func (w Window) IsZero() bool { return w.Per == 0 }

// End is when w closes and its budget starts afresh (the next window's
// start); the zero time for no window.
func (w Window) End() time.Time {
	if w.IsZero() {
		return time.Time{}
	}
	return w.Start.Add(w.Per)
}

// CheckWindow reports a window a store cannot keep exactly.
func CheckWindow(w Window) error {
	if w.IsZero() {
		if !w.Start.IsZero() {
			return fmt.Errorf("budget window without a length starts at %v", w.Start)
		}
		return nil
	}
	if w.Per < time.Second || w.Per%time.Second != 0 || w.Per > MaxWindow {
		return fmt.Errorf("budget window of %v: must be whole seconds, from 1s to %v", w.Per, MaxWindow)
	}
	if w.Start.Nanosecond() != 0 || w.Start.Unix()%int64(w.Per/time.Second) != 0 {
		return fmt.Errorf("budget window start %v is not aligned to %v windows since the Unix epoch", w.Start, w.Per)
	}
	return nil
}

// PerSeconds and StartSeconds are the window as stores keep it: 0, 0 for
// no window.
func (w Window) PerSeconds() int64 { return int64(w.Per / time.Second) }

func (w Window) StartSeconds() int64 {
	if w.IsZero() {
		return 0
	}
	return w.Start.Unix()
}

// WindowOf is the inverse of PerSeconds and StartSeconds.
func WindowOf(perSeconds, startSeconds int64) Window {
	if perSeconds <= 0 {
		return Window{}
	}
	return Window{Per: time.Duration(perSeconds) * time.Second, Start: time.Unix(startSeconds, 0).UTC()}
}
