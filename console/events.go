package console

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/agentbackplane/backplane/internal/termtext"
)

// keepAlive is how often an idle stream sends a comment, so that a
// browser that went away is noticed (the write fails).
const keepAlive = 20 * time.Second

// event is one server-sent event: "snapshot" lists the ids pending now
// (the script drops the cards of the others); "pending" brings one
// request's rendered card; "closed" names a request no longer pending.
type event struct {
	name string
	data any
}

// events streams the changes to pending approvals as server-sent events.
// Each stream reads the pending requests every poll interval (and at once
// after a decision made in this console): reading the store, rather than
// hooking this process, also shows requests created by another replica.
func (c *Console) events(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if err := rc.Flush(); err != nil {
		return
	}
	wake := make(chan struct{}, 1)
	c.mu.Lock()
	c.wakers[wake] = struct{}{}
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.wakers, wake)
		c.mu.Unlock()
	}()

	var changes <-chan struct{}
	if n, ok := c.b.(Notifier); ok {
		ch, stop := n.Changes()
		defer stop()
		changes = ch
	}
	tick := time.NewTicker(c.poll)
	defer tick.Stop()
	ping := time.NewTicker(keepAlive)
	defer ping.Stop()
	seen := map[string]bool{}
	first := true
	for {
		if err := c.sendChanges(w, r, seen, first); err != nil {
			return
		}
		first = false
		if err := rc.Flush(); err != nil {
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-c.done:
			return
		case <-tick.C:
		case <-wake:
		case <-changes:
		case <-ping.C:
			if _, err := w.Write([]byte(": keep-alive\n\n")); err != nil {
				return
			}
		}
	}
}

// sendChanges writes the events that bring a page which has seen the
// requests in seen up to date, and updates seen.
func (c *Console) sendChanges(w http.ResponseWriter, r *http.Request, seen map[string]bool, first bool) error {
	pending, err := c.b.ListApprovals(r.Context(), "pending", pendingPage)
	if err != nil {
		// A store that fails for a moment must not end the stream; the
		// next poll tries again.
		c.log.Warn("console: reading pending approvals", "error", err)
		return nil
	}
	now := map[string]bool{}
	var evs []event
	if first {
		ids := make([]string, 0, len(pending))
		for _, a := range pending {
			ids = append(ids, a.ID)
		}
		evs = append(evs, event{"snapshot", map[string]any{"ids": ids}})
	}
	for i := range pending {
		a := &pending[i]
		now[a.ID] = true
		if seen[a.ID] {
			continue
		}
		// Only a new request is read whole (arguments, preview).
		if full, err := c.b.GetApproval(r.Context(), a.ID); err == nil {
			a = full
		}
		html, err := c.renderFragment("pending_item", pendingItem{A: a, Open: true})
		if err != nil {
			return err
		}
		evs = append(evs, event{"pending", map[string]any{"id": a.ID, "html": html}})
	}
	var closed []string
	for id := range seen {
		if !now[id] {
			closed = append(closed, id)
		}
	}
	slices.Sort(closed)
	for _, id := range closed {
		evs = append(evs, event{"closed", map[string]any{"id": id}})
	}
	clear(seen)
	for id := range now {
		seen[id] = true
	}
	for _, ev := range evs {
		if err := writeEvent(w, ev); err != nil {
			return err
		}
	}
	return nil
}

// writeEvent writes one event; its JSON data is on one line (encoding/json
// escapes newlines inside strings), as the event-stream format needs.
func writeEvent(w http.ResponseWriter, ev event) error {
	b, err := json.Marshal(ev.data)
	if err != nil {
		return err
	}
	b = termtext.JSON(b) // as writeJSON
	if bytes.ContainsAny(b, "\r\n") {
		return fmt.Errorf("console: event data spans lines")
	}
	_, err = fmt.Fprintf(w, "event: %s\ndata: %s\n\n", ev.name, b)
	return err
}

// wake tells every live stream to read the pending requests now.
func (c *Console) wake() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for ch := range c.wakers {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}
