package mcp

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// maxContentItems bounds one server's resources or prompts listing.
const maxContentItems = 10000

// ErrUnknownContent is returned for a resource or prompt no server lists.
var ErrUnknownContent = errors.New("mcp: no server lists it")

// Resources lists the server's resources now (none when it offers none).
func (u *Upstream) Resources(ctx context.Context) ([]*sdk.Resource, error) {
	l, err := u.current()
	if err != nil {
		return nil, fmt.Errorf("server %s: %w", u.srv.Name, err)
	}
	if ir := l.sess.InitializeResult(); ir == nil || ir.Capabilities == nil || ir.Capabilities.Resources == nil {
		return nil, nil
	}
	var out []*sdk.Resource
	for r, err := range l.sess.Resources(ctx, nil) {
		if err != nil {
			return nil, fmt.Errorf("server %s: resources/list: %w", u.srv.Name, err)
		}
		if len(out) == maxContentItems {
			return nil, fmt.Errorf("server %s: more than %d resources", u.srv.Name, maxContentItems)
		}
		out = append(out, r)
	}
	return out, nil
}

// Prompts lists the server's prompts now (none when it offers none).
func (u *Upstream) Prompts(ctx context.Context) ([]*sdk.Prompt, error) {
	l, err := u.current()
	if err != nil {
		return nil, fmt.Errorf("server %s: %w", u.srv.Name, err)
	}
	if ir := l.sess.InitializeResult(); ir == nil || ir.Capabilities == nil || ir.Capabilities.Prompts == nil {
		return nil, nil
	}
	var out []*sdk.Prompt
	for p, err := range l.sess.Prompts(ctx, nil) {
		if err != nil {
			return nil, fmt.Errorf("server %s: prompts/list: %w", u.srv.Name, err)
		}
		if len(out) == maxContentItems {
			return nil, fmt.Errorf("server %s: more than %d prompts", u.srv.Name, maxContentItems)
		}
		out = append(out, p)
	}
	return out, nil
}

// Content is the resources and prompts of several servers, as one set:
// resources by URI, prompts by name, each from the one server that lists
// it. A URI or name two servers list is refused at start ([NewContent]);
// found later, the first server's is kept and the other left out.
type Content struct {
	ups []*Upstream

	mu        sync.Mutex
	resources map[string]*Upstream // URI -> server
	prompts   map[string]*Upstream // name -> server
}

// NewContent lists the resources and prompts of ups and fails when two
// servers list the same resource URI or prompt name.
func NewContent(ctx context.Context, ups []*Upstream) (*Content, error) {
	c := &Content{ups: ups}
	if _, err := c.refreshResources(ctx, true); err != nil {
		return nil, err
	}
	if _, err := c.refreshPrompts(ctx, true); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Content) refreshResources(ctx context.Context, strict bool) ([]*sdk.Resource, error) {
	index := map[string]*Upstream{}
	var all []*sdk.Resource
	for _, u := range c.ups {
		list, err := u.Resources(ctx)
		if err != nil {
			if strict {
				return nil, err
			}
			u.log.Warn("upstream resources not listed", "error", err.Error())
			continue
		}
		for _, r := range list {
			if prev, ok := index[r.URI]; ok {
				if strict {
					return nil, fmt.Errorf("resource %s is listed by servers %s and %s: rename it on one of them or leave one server out", r.URI, prev.srv.Name, u.srv.Name)
				}
				u.log.Error("upstream resource left out: another server lists its URI", "uri", r.URI, "kept", prev.srv.Name)
				continue
			}
			index[r.URI] = u
			all = append(all, r)
		}
	}
	c.mu.Lock()
	c.resources = index
	c.mu.Unlock()
	slices.SortFunc(all, func(a, b *sdk.Resource) int { return strings.Compare(a.URI, b.URI) })
	return all, nil
}

func (c *Content) refreshPrompts(ctx context.Context, strict bool) ([]*sdk.Prompt, error) {
	index := map[string]*Upstream{}
	var all []*sdk.Prompt
	for _, u := range c.ups {
		list, err := u.Prompts(ctx)
		if err != nil {
			if strict {
				return nil, err
			}
			u.log.Warn("upstream prompts not listed", "error", err.Error())
			continue
		}
		for _, p := range list {
			if prev, ok := index[p.Name]; ok {
				if strict {
					return nil, fmt.Errorf("prompt %s is listed by servers %s and %s: rename it on one of them or leave one server out", p.Name, prev.srv.Name, u.srv.Name)
				}
				u.log.Error("upstream prompt left out: another server lists its name", "prompt", p.Name, "kept", prev.srv.Name)
				continue
			}
			index[p.Name] = u
			all = append(all, p)
		}
	}
	c.mu.Lock()
	c.prompts = index
	c.mu.Unlock()
	slices.SortFunc(all, func(a, b *sdk.Prompt) int { return strings.Compare(a.Name, b.Name) })
	return all, nil
}

// ListResources lists every server's resources now, by URI.
func (c *Content) ListResources(ctx context.Context) ([]*sdk.Resource, error) {
	return c.refreshResources(ctx, false)
}

// ListPrompts lists every server's prompts now, by name.
func (c *Content) ListPrompts(ctx context.Context) ([]*sdk.Prompt, error) {
	return c.refreshPrompts(ctx, false)
}

// ReadResource reads uri from the server that lists it.
func (c *Content) ReadResource(ctx context.Context, uri string) (*sdk.ReadResourceResult, error) {
	c.mu.Lock()
	u := c.resources[uri]
	c.mu.Unlock()
	if u == nil {
		return nil, fmt.Errorf("resource %s: %w", uri, ErrUnknownContent)
	}
	l, err := u.current()
	if err != nil {
		return nil, fmt.Errorf("server %s: %w", u.srv.Name, err)
	}
	return l.sess.ReadResource(ctx, &sdk.ReadResourceParams{URI: uri})
}

// GetPrompt gets the prompt name from the server that lists it.
func (c *Content) GetPrompt(ctx context.Context, name string, args map[string]string) (*sdk.GetPromptResult, error) {
	c.mu.Lock()
	u := c.prompts[name]
	c.mu.Unlock()
	if u == nil {
		return nil, fmt.Errorf("prompt %s: %w", name, ErrUnknownContent)
	}
	l, err := u.current()
	if err != nil {
		return nil, fmt.Errorf("server %s: %w", u.srv.Name, err)
	}
	return l.sess.GetPrompt(ctx, &sdk.GetPromptParams{Name: name, Arguments: args})
}
