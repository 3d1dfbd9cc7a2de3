package upstream

import "errors"

// State reports whether the server is up, how many times it was
// reconnected after going down, and, while it is down, why (for health
// checks, /metrics and the console).
func (u *Upstream) State() (up bool, restarts int, down error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.link != nil {
		return true, u.restarts, nil
	}
	down = u.downErr
	if down == nil {
		down = errNotConnected
	}
	return false, u.restarts, down
}

var errNotConnected = errors.New("not connected")

// Protocol is the MCP revision the live connection speaks:
// Protocol20260728 when the server offered it (server/discover), else
// the one the initialize handshake agreed, such as Protocol20251125; ""
// while the server is down.
func (u *Upstream) Protocol() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.link == nil {
		return ""
	}
	return u.link.protocol
}
