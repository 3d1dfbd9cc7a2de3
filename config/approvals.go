package config

import (
	"time"

	"github.com/agentbackplane/backplane/policy"
	"go.yaml.in/yaml/v3"
)

func (p *parser) approvals(c *Config, v *yaml.Node) error {
	return p.mapping(v, "approvals", func(key string, k, v *yaml.Node) error {
		switch key {
		case "expire":
			d, err := p.duration(v, "expire")
			if err != nil {
				return err
			}
			if d <= 0 {
				return p.errAt(v, "approvals expire must be positive")
			}
			c.Approvals.Expire = d
		case "wait":
			d, err := p.duration(v, "wait")
			if err != nil {
				return err
			}
			if d > MaxServeApprovalWait {
				return p.errAt(v, "approvals wait %s: at most %s (a waiting call must return before its client gives up)", d, MaxServeApprovalWait)
			}
			c.Approvals.Wait = d
		case "self_approve_timeout":
			d, err := p.duration(v, "self_approve_timeout")
			if err != nil {
				return err
			}
			if d <= 0 || d > policy.MaxSelfApproveTimeout {
				return p.errAt(v, "approvals self_approve_timeout %s: must be from 1s to %s (how long the person at the caller's client has to answer)", d, policy.MaxSelfApproveTimeout)
			}
			c.Approvals.SelfApproveTimeout = d
		case "task_lease":
			d, err := p.duration(v, "task_lease")
			if err != nil {
				return err
			}
			if d < time.Second || d > time.Hour {
				return p.errAt(v, "approvals task_lease %s: must be from 1s to 1h (how long a task's runner holds its claim unless it renews it)", d)
			}
			c.Approvals.TaskLease = d
		case "max_pending":
			n, err := p.integer(v, "max_pending")
			if err != nil {
				return err
			}
			if n <= 0 {
				return p.errAt(v, "approvals max_pending must be positive")
			}
			c.Approvals.MaxPending = int(n)
		}
		return nil
	}, "expire", "wait", "self_approve_timeout", "max_pending", "task_lease")
}
