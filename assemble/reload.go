package assemble

import (
	"context"

	"github.com/agentbackplane/backplane/config"
	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/policy"
)

// ReloadPolicy re-reads the configuration file and, when the whole file is
// valid, puts its policy in force, through the gateway's operator action
// ([gateway.Gateway.ReloadPolicy], which audits it, via naming how it was
// asked): calls authorized from then on are decided by it, calls already
// authorized keep the decision they had. An invalid file is refused with
// its line and the running policy stays. Only the policy section takes
// effect; tools, servers, operators, budgets and the store are those the
// runtime was opened with (a change to them needs a restart). The policy
// is compiled once per reload.
func (rt *Runtime) ReloadPolicy(ctx context.Context, via string) error {
	return rt.Gateway.ReloadPolicy(ctx, gateway.PolicyReload{
		Via: via, Source: rt.Config.Path,
		Load: func(context.Context) (policy.Policy, error) {
			c, err := config.Load(rt.Config.Path)
			if err != nil {
				return nil, err
			}
			return c.CompiledPolicy()
		},
	})
}
