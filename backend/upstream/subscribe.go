package upstream

import (
	"context"
	"fmt"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// subscribe subscribes to uri at the server, and remembers it so that a
// reconnection subscribes again.
func (u *Upstream) subscribe(ctx context.Context, uri string) error {
	l, err := u.current()
	if err != nil {
		return fmt.Errorf("server %s: %w", u.srv.Name, err)
	}
	if err := l.sess.Subscribe(ctx, &sdk.SubscribeParams{URI: uri}); err != nil {
		return err
	}
	u.mu.Lock()
	if u.subs == nil {
		u.subs = map[string]bool{}
	}
	u.subs[uri] = true
	u.mu.Unlock()
	return nil
}

// unsubscribe ends the subscription to uri at the server.
func (u *Upstream) unsubscribe(ctx context.Context, uri string) error {
	u.mu.Lock()
	delete(u.subs, uri)
	u.mu.Unlock()
	l, err := u.current()
	if err != nil {
		return nil // down: the new connection will not subscribe to it
	}
	return l.sess.Unsubscribe(ctx, &sdk.UnsubscribeParams{URI: uri})
}

// resubscribe subscribes a new connection to what the last one was
// subscribed to.
func (u *Upstream) resubscribe(ctx context.Context, l *link) {
	u.mu.Lock()
	uris := make([]string, 0, len(u.subs))
	for uri := range u.subs {
		uris = append(uris, uri)
	}
	u.mu.Unlock()
	for _, uri := range uris {
		if err := l.sess.Subscribe(ctx, &sdk.SubscribeParams{URI: uri}); err != nil {
			u.log.Warn("upstream resource not subscribed again after reconnecting", "uri", uri, "error", err.Error())
		}
	}
}

// setResourceUpdated sets the hook of the server's resource updates.
func (u *Upstream) setResourceUpdated(fn func(uri string)) {
	u.mu.Lock()
	u.onUpdated = fn
	u.mu.Unlock()
}

// onResourceUpdated passes a notifications/resources/updated of a
// subscribed URI on. The SDK calls it on the connection's reading
// goroutine: the hook runs on another, so that a slow client never holds
// the server's connection.
func (u *Upstream) onResourceUpdated(_ context.Context, req *sdk.ResourceUpdatedNotificationRequest) {
	if req.Params == nil {
		return
	}
	uri := req.Params.URI
	u.mu.Lock()
	fn, subscribed := u.onUpdated, u.subs[uri]
	u.mu.Unlock()
	if fn == nil || !subscribed {
		return // not asked for through the gateway
	}
	go fn(uri)
}
