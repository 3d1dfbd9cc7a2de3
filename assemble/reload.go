package assemble

import "github.com/agentbackplane/backplane/config"

// ReloadPolicy re-reads the configuration file and, when the whole file is
// valid, puts its policy in force: calls authorized from then on are decided
// by it, calls already authorized keep the decision they had. An invalid
// file is refused with its line and the running policy stays. Only the
// policy section takes effect; tools, servers, operators, budgets and the
// store are those the runtime was opened with (a change to them needs a
// restart).
func (rt *Runtime) ReloadPolicy() (*config.Config, error) {
	c, err := config.Load(rt.Config.Path)
	if err != nil {
		return nil, err
	}
	rules, err := c.CompilePolicy()
	if err != nil {
		return nil, err
	}
	rt.Policy.Store(rules)
	return c, nil
}
