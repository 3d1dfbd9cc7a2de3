package gateway

import (
	"context"
	"errors"
	"sync"

	"github.com/agentbackplane/backplane/policy"
)

// PolicyReload is a request to put a new policy in force: how it was
// asked and where the policy comes from.
type PolicyReload struct {
	// Via is how the reload was asked ("SIGHUP", "backplane reload"): the
	// process's own user asked, as the operating system vouches (a signal,
	// a Unix socket's peer credentials), so no operator is named.
	Via string
	// Source names where the policy is read from (a configuration file),
	// for the audit event.
	Source string
	// Load reads and compiles the new policy. An error refuses the reload:
	// the running policy stays.
	Load func(context.Context) (policy.Policy, error)
}

// reloads makes reloads one at a time: two reading different files must
// not end with the older in force.
type reloads struct{ mu sync.Mutex }

// ReloadPolicy is the operator action that replaces the policy in force:
// calls authorized from then on are decided by the policy r.Load returns,
// calls already authorized keep their decision. It needs the gateway's
// policy to be a *policy.Live (Options.Policy). Each reload, taken or
// refused, writes one audit event ("policy", event reload) here; a
// refused one returns Load's error and changes nothing.
func (g *Gateway) ReloadPolicy(ctx context.Context, r PolicyReload) error {
	live, ok := g.policy.(*policy.Live)
	if !ok {
		return errors.New("gateway: the policy cannot be reloaded: Options.Policy is not a *policy.Live")
	}
	if r.Load == nil {
		return errors.New("gateway: ReloadPolicy: no Load")
	}
	g.reloads.mu.Lock()
	defer g.reloads.mu.Unlock()
	p, err := r.Load(ctx)
	if err != nil {
		g.log.Warn("policy", "event", "reload", "outcome", "refused", "via", r.Via, "config", r.Source, "error", err.Error())
		return err
	}
	live.Store(p)
	g.log.Info("policy", "event", "reload", "outcome", "ok", "via", r.Via, "config", r.Source)
	return nil
}
