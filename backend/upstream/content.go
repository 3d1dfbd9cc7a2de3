package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/yosida95/uritemplate/v3"

	"github.com/agentbackplane/backplane/internal/termtext"
	"github.com/agentbackplane/backplane/tool"
)

// maxContentItems bounds one server's resources or prompts listing.
const maxContentItems = 10000

// maxTemplateLen bounds a resource template's URI template: a longer one
// is left out rather than compiled.
const maxTemplateLen = 2048

// ErrUnknownContent is returned for a resource or prompt no server lists.
var ErrUnknownContent = errors.New("mcp: no server lists it")

// ErrAmbiguousContent is returned for a resource URI that more than one
// server lists, or that no server lists and the templates of more than one
// match, and for a prompt name (with its prefix) two servers have: which
// server should answer cannot be decided, so none is asked. The error
// names both servers.
var ErrAmbiguousContent = errors.New("mcp: several servers answer for it")

// Resources lists the server's resources now (none when it offers none).
func (u *Upstream) Resources(ctx context.Context) ([]*sdk.Resource, error) {
	l, err := u.offering(func(c *sdk.ServerCapabilities) bool { return c.Resources != nil })
	if l == nil {
		return nil, err
	}
	defer l.nudgeWhileWaiting().stop() // a stalled Go server: see nudge.go
	list, err := listRaw(ctx, u, l, "resources/list", "resources", func(ctx context.Context, cursor string) error {
		_, err := l.sess.ListResources(ctx, &sdk.ListResourcesParams{Cursor: cursor})
		return err
	}, func(r *sdk.Resource) string { return r.URI })
	return wellNamed(u, list, "resource", checkResourceName, func(r *sdk.Resource) string { return r.Name }), err
}

// ResourceTemplates lists the server's resource templates now (none when
// it offers no resources).
func (u *Upstream) ResourceTemplates(ctx context.Context) ([]*sdk.ResourceTemplate, error) {
	l, err := u.offering(func(c *sdk.ServerCapabilities) bool { return c.Resources != nil })
	if l == nil {
		return nil, err
	}
	defer l.nudgeWhileWaiting().stop()
	list, err := listRaw(ctx, u, l, "resources/templates/list", "resourceTemplates", func(ctx context.Context, cursor string) error {
		_, err := l.sess.ListResourceTemplates(ctx, &sdk.ListResourceTemplatesParams{Cursor: cursor})
		return err
	}, func(t *sdk.ResourceTemplate) string { return t.URITemplate })
	return wellNamed(u, list, "resource template", checkResourceName, func(t *sdk.ResourceTemplate) string { return t.Name }), err
}

// offering returns the live connection when the server declared what
// declared says at its initialize; nil and no error when it did not, nil
// and the error when the server is down.
func (u *Upstream) offering(declared func(*sdk.ServerCapabilities) bool) (*link, error) {
	l, err := u.current()
	if err != nil {
		return nil, fmt.Errorf("server %s: %w", u.srv.Name, err)
	}
	if ir := l.sess.InitializeResult(); ir == nil || ir.Capabilities == nil || !declared(ir.Capabilities) {
		return nil, nil
	}
	return l, nil
}

// listRaw collects the items of a paged list (method, its items under
// member), at most maxContentItems of them, page by page from the raw
// answers: each item is read into the SDK's type for routing, and its
// bytes are kept as the server sent them (Upstream.descriptor, by the key
// key gives), since the SDK's types drop what they do not know or hold as
// a zero value ("required": false, "priority": 0). call asks for one page.
func listRaw[T any](ctx context.Context, u *Upstream, l *link, method, member string, call func(context.Context, string) error, key func(*T) string) ([]*T, error) {
	var out []*T
	raws := map[string]json.RawMessage{}
	seen := map[string]bool{}
	cursor := ""
	for page := 0; ; page++ {
		if page == maxPages {
			return nil, fmt.Errorf("server %s: %s: more than %d pages", u.srv.Name, method, maxPages)
		}
		e := &exchange{method: method}
		err := call(withExchange(ctx, e), cursor)
		l.wire.forget(e)
		_, done, raw, rpcErr := e.state()
		switch {
		case done && rpcErr != nil:
			return nil, fmt.Errorf("server %s: %s: the server answered with an error: %v", u.srv.Name, method, rpcErr)
		case !done && err != nil:
			return nil, fmt.Errorf("server %s: %s: %w", u.srv.Name, method, err)
		case !done:
			return nil, fmt.Errorf("server %s: %s: the answer was not seen on the wire", u.srv.Name, method)
		}
		m, err := members(raw)
		if err != nil {
			return nil, fmt.Errorf("server %s: %s: the result: %w", u.srv.Name, method, err)
		}
		var items []json.RawMessage
		if err := json.Unmarshal(m[member], &items); err != nil || m[member] == nil {
			return nil, fmt.Errorf("server %s: %s: %s is not an array", u.srv.Name, method, member)
		}
		for i, item := range items {
			if len(out) == maxContentItems {
				return nil, fmt.Errorf("server %s: %s: more than %d items", u.srv.Name, method, maxContentItems)
			}
			v := new(T)
			if err := json.Unmarshal(item, v); err != nil {
				return nil, fmt.Errorf("server %s: %s: item %d: %v", u.srv.Name, method, i, err)
			}
			out = append(out, v)
			if k := key(v); raws[k] == nil {
				raws[k] = json.RawMessage(bytes.Clone(item))
			}
		}
		var next string
		if c, ok := m["nextCursor"]; ok && string(c) != "null" {
			if err := json.Unmarshal(c, &next); err != nil {
				return nil, fmt.Errorf("server %s: %s: nextCursor is not a string", u.srv.Name, method)
			}
		}
		if next == "" {
			break
		}
		if seen[next] {
			return nil, fmt.Errorf("server %s: %s: the cursor %q came back: the listing loops", u.srv.Name, method, next)
		}
		seen[next] = true
		cursor = next
	}
	u.mu.Lock()
	if u.descriptors == nil {
		u.descriptors = map[string]map[string]json.RawMessage{}
	}
	u.descriptors[method] = raws
	u.mu.Unlock()
	return out, nil
}

// descriptor is the item keyed key of the server's last listing by method,
// as the server sent it.
func (u *Upstream) descriptor(method, key string) (json.RawMessage, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	raw, ok := u.descriptors[method][key]
	return raw, ok
}

// Descriptor is the resource (method "resources/list", by URI), resource
// template ("resources/templates/list", by URI template) or prompt
// ("prompts/list", by name) as the server that lists it sent it in its
// last listing: every member, the SDK's reading of it aside. ok is false
// when no server's last listing has it.
func (c *Content) Descriptor(method, key string) (json.RawMessage, bool) {
	c.mu.Lock()
	var u *Upstream
	ownKey, rename := key, ""
	switch method {
	case "resources/list":
		// A URI two servers list is listed once and refused when read:
		// whose descriptor it would be is unknown, so none is.
		if us := c.resources[key]; len(us) == 1 {
			u = us[0]
		}
	case "prompts/list":
		// Listed under the server's prefix, asked by its own name: the
		// descriptor is the server's, its name the prefixed one.
		if ps := c.prompts[key]; len(ps) == 1 {
			u, ownKey = ps[0].u, ps[0].name
			if ownKey != key {
				rename = key
			}
		}
	case "resources/templates/list":
		for _, t := range c.templates {
			if t.raw == key {
				u = t.u
				break
			}
		}
	}
	c.mu.Unlock()
	if u == nil {
		return nil, false
	}
	raw, ok := u.descriptor(method, ownKey)
	if !ok || rename == "" {
		return raw, ok
	}
	return renamed(raw, rename)
}

// renamed is the object raw with its name member set to name, every other
// member as it was.
func renamed(raw json.RawMessage, name string) (json.RawMessage, bool) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, false
	}
	n, err := json.Marshal(name)
	if err != nil {
		return nil, false
	}
	m["name"] = n
	out, err := json.Marshal(m)
	return out, err == nil
}

// capabilities are what the server declared at its (last) initialize.
func (u *Upstream) capabilities() *sdk.ServerCapabilities {
	l, err := u.current()
	if err != nil {
		return nil
	}
	if ir := l.sess.InitializeResult(); ir != nil {
		return ir.Capabilities
	}
	return nil
}

// Prompts lists the server's prompts now (none when it offers none).
func (u *Upstream) Prompts(ctx context.Context) ([]*sdk.Prompt, error) {
	l, err := u.offering(func(c *sdk.ServerCapabilities) bool { return c.Prompts != nil })
	if l == nil {
		return nil, err
	}
	defer l.nudgeWhileWaiting().stop()
	list, err := listRaw(ctx, u, l, "prompts/list", "prompts", func(ctx context.Context, cursor string) error {
		_, err := l.sess.ListPrompts(ctx, &sdk.ListPromptsParams{Cursor: cursor})
		return err
	}, func(p *sdk.Prompt) string { return p.Name })
	return wellNamed(u, list, "prompt", tool.CheckName, func(p *sdk.Prompt) string { return p.Name }), err
}

// wellNamed leaves out, with a log line, the items whose name check
// refuses: the name reaches clients, logs and the console.
func wellNamed[T any](u *Upstream, items []T, what string, check func(string) error, name func(T) string) []T {
	out := items[:0]
	for _, it := range items {
		if n := name(it); check(n) != nil {
			u.log.Error("upstream "+what+" refused: "+check(n).Error(), what, termtext.Line(n))
			continue
		}
		out = append(out, it)
	}
	return out
}

// errResourceName is why a resource (or template) name is refused.
var errResourceName = errors.New("its name is empty, or holds a control, a format or bidi character, or a byte outside UTF-8")

// checkResourceName refuses the resource names a terminal or a page would
// act on rather than show (termtext.Unsafe). Unlike tool and prompt names,
// which calls and policy patterns spell, a resource's name serves as its
// display name (it is addressed by URI): servers give names such as
// "Dynamic Text Resource" (server-everything), which [A-Za-z0-9_.-] would
// refuse with every resource of the server.
func checkResourceName(name string) error {
	if name == "" || !utf8.ValidString(name) || strings.ContainsFunc(name, termtext.Unsafe) {
		return errResourceName
	}
	return nil
}

// Content is the resources, resource templates and prompts of several
// servers, as one set: resources by URI, templates by URI template, prompts
// by name. A prompt's name is put after the server's prefix, as its tools'
// are ([Server.ToolPrefix]: "docs.help" for the prompt help of server
// docs), and the server is asked by the prompt's own name. Two servers
// that list the same resource URI or URI template, or the same prompt name
// after their prefixes (two copies of a server with prefix ""), do not
// stop the start: the URI, template or name is listed once, and reading,
// getting, completing or subscribing to it is refused with
// [ErrAmbiguousContent], naming both servers.
//
// A URI is answered by the server that lists it as a resource, else by the
// server whose templates match it; when two servers list it, or templates
// of two servers match it, by none ([ErrAmbiguousContent]). Reads,
// completions and subscriptions go to that server. Subscriptions are counted per URI: the server is
// subscribed at the first and unsubscribed at the last, and subscribed
// again after it reconnects.
type Content struct {
	ups []*Upstream

	mu        sync.Mutex
	resources map[string][]*Upstream // URI -> the servers that list it
	templates []upTemplate           // by URI template, each server's
	prompts   map[string][]upPrompt  // prefixed name -> the servers' prompts
	subs      map[string]*subscription
}

// upPrompt is a prompt as its server names it.
type upPrompt struct {
	name string
	u    *Upstream
}

// upTemplate is a resource template and the server that lists it.
type upTemplate struct {
	raw string         // the URI template
	re  *regexp.Regexp // the URIs it matches
	u   *Upstream
}

// subscription is one URI's subscribers and the server subscribed.
type subscription struct {
	n int
	u *Upstream
}

// NewContent lists the resources, resource templates and prompts of ups;
// it fails when a server cannot list them. Two servers listing the same
// URI, URI template or prompt name is logged, not refused (see Content).
func NewContent(ctx context.Context, ups []*Upstream) (*Content, error) {
	c := &Content{ups: ups, subs: map[string]*subscription{}}
	if _, err := c.refreshResources(ctx, true); err != nil {
		return nil, err
	}
	if _, err := c.refreshTemplates(ctx, true); err != nil {
		return nil, err
	}
	if _, err := c.refreshPrompts(ctx, true); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Content) refreshResources(ctx context.Context, strict bool) ([]*sdk.Resource, error) {
	index := map[string][]*Upstream{}
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
			prev := index[r.URI]
			if slices.Contains(prev, u) {
				continue
			}
			index[r.URI] = append(prev, u)
			if len(prev) > 0 {
				if strict {
					u.log.Warn("upstream resource listed by another server too: reading it will be refused", "uri", r.URI, "other", prev[0].srv.Name)
				}
				continue // listed once
			}
			all = append(all, r)
		}
	}
	c.mu.Lock()
	c.resources = index
	c.mu.Unlock()
	slices.SortFunc(all, func(a, b *sdk.Resource) int { return strings.Compare(a.URI, b.URI) })
	return all, nil
}

func (c *Content) refreshTemplates(ctx context.Context, strict bool) ([]*sdk.ResourceTemplate, error) {
	owner := map[string]*Upstream{}
	var index []upTemplate
	var all []*sdk.ResourceTemplate
	for _, u := range c.ups {
		list, err := u.ResourceTemplates(ctx)
		if err != nil {
			if strict {
				return nil, err
			}
			u.log.Warn("upstream resource templates not listed", "error", err.Error())
			continue
		}
		for _, t := range list {
			prev, listed := owner[t.URITemplate]
			if listed && prev == u {
				continue
			}
			if len(t.URITemplate) > maxTemplateLen {
				u.log.Warn("upstream resource template left out: too long", "bytes", len(t.URITemplate), "max", maxTemplateLen)
				continue
			}
			tmpl, err := uritemplate.New(t.URITemplate)
			if err != nil {
				// Not a URI template: no URI can be mapped to it.
				u.log.Warn("upstream resource template left out: not an RFC 6570 URI template", "uri_template", t.URITemplate, "error", err.Error())
				continue
			}
			// A template two servers list is kept for both, and listed once:
			// the URIs it matches are then ambiguous (owner).
			index = append(index, upTemplate{raw: t.URITemplate, re: tmpl.Regexp(), u: u})
			if listed {
				if strict {
					u.log.Warn("upstream resource template listed by another server too: its URIs will be refused", "uri_template", t.URITemplate, "other", prev.srv.Name)
				}
				continue
			}
			owner[t.URITemplate] = u
			all = append(all, t)
		}
	}
	c.mu.Lock()
	c.templates = index
	c.mu.Unlock()
	slices.SortFunc(all, func(a, b *sdk.ResourceTemplate) int { return strings.Compare(a.URITemplate, b.URITemplate) })
	return all, nil
}

func (c *Content) refreshPrompts(ctx context.Context, strict bool) ([]*sdk.Prompt, error) {
	index := map[string][]upPrompt{}
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
			if p == nil {
				continue
			}
			// Named like the server's tools: two servers' "help" are
			// "one.help" and "two.help".
			name := u.srv.ToolPrefix() + p.Name
			prev := index[name]
			index[name] = append(prev, upPrompt{name: p.Name, u: u})
			if len(prev) > 0 {
				if strict {
					u.log.Warn("upstream prompt has the name of another server's (the same prefix): getting it will be refused", "prompt", name, "other", prev[0].u.srv.Name)
				}
				continue
			}
			cp := *p
			cp.Name = name
			all = append(all, &cp)
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

// ListResourceTemplates lists every server's resource templates now, by
// URI template.
func (c *Content) ListResourceTemplates(ctx context.Context) ([]*sdk.ResourceTemplate, error) {
	return c.refreshTemplates(ctx, false)
}

// ListPrompts lists every server's prompts now, by name.
func (c *Content) ListPrompts(ctx context.Context) ([]*sdk.Prompt, error) {
	return c.refreshPrompts(ctx, false)
}

// owner is the server that answers for uri: the one listing it as a
// resource, else the one whose templates match it.
func (c *Content) owner(uri string) (*Upstream, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch us := c.resources[uri]; len(us) {
	case 0:
	case 1:
		return us[0], nil
	default:
		return nil, fmt.Errorf("resource %s: %w: servers %s and %s both list it", uri, ErrAmbiguousContent, us[0].srv.Name, us[1].srv.Name)
	}
	var found *Upstream
	for _, t := range c.templates {
		if !t.re.MatchString(uri) {
			continue
		}
		if found != nil && found != t.u {
			return nil, fmt.Errorf("resource %s: %w: templates of servers %s and %s match it", uri, ErrAmbiguousContent, found.srv.Name, t.u.srv.Name)
		}
		found = t.u
	}
	if found == nil {
		return nil, fmt.Errorf("resource %s: %w", uri, ErrUnknownContent)
	}
	return found, nil
}

// ReadResource reads uri from the server that answers for it. via, when
// set, is the request's client and the answers of a retry (its Client,
// Session, CallID and Input; its tool and arguments are not used): a
// server that asks for input while reading (a 2026-07-28 server's
// input_required, an earlier one's requests during the read) is answered
// as during a tool call (contentRounds).
func (c *Content) ReadResource(ctx context.Context, uri string, via *tool.Call) (*sdk.ReadResourceResult, error) {
	u, err := c.owner(uri)
	if err != nil {
		return nil, err
	}
	l, err := u.current()
	if err != nil {
		return nil, fmt.Errorf("server %s: %w", u.srv.Name, err)
	}
	defer l.nudgeWhileWaiting().stop() // a stalled Go server: see nudge.go
	return contentRounds(ctx, u, via, func(resp sdk.InputResponseMap, state string) (*sdk.ReadResourceResult, error) {
		return l.sess.ReadResource(ctx, &sdk.ReadResourceParams{Meta: u.contentMeta(l, via), URI: uri, InputResponses: resp, RequestState: state})
	}, func(r *sdk.ReadResourceResult) (sdk.InputRequestMap, string, bool) {
		return r.InputRequests, r.RequestState, r.NeedsInput()
	})
}

// prompt finds the server of the prompt name (with its prefix) and the
// prompt's name there.
func (c *Content) prompt(name string) (upPrompt, error) {
	c.mu.Lock()
	ps := c.prompts[name]
	c.mu.Unlock()
	switch len(ps) {
	case 0:
		return upPrompt{}, fmt.Errorf("prompt %s: %w", name, ErrUnknownContent)
	case 1:
		return ps[0], nil
	}
	return upPrompt{}, fmt.Errorf("prompt %s: %w: servers %s and %s both have it (give one of them another prefix)", name, ErrAmbiguousContent, ps[0].u.srv.Name, ps[1].u.srv.Name)
}

// GetPrompt gets the prompt name (as listed: with the server's prefix) from
// the server that lists it; via is as for ReadResource.
func (c *Content) GetPrompt(ctx context.Context, name string, args map[string]string, via *tool.Call) (*sdk.GetPromptResult, error) {
	p, err := c.prompt(name)
	if err != nil {
		return nil, err
	}
	l, err := p.u.current()
	if err != nil {
		return nil, fmt.Errorf("server %s: %w", p.u.srv.Name, err)
	}
	defer l.nudgeWhileWaiting().stop() // a stalled Go server: see nudge.go
	return contentRounds(ctx, p.u, via, func(resp sdk.InputResponseMap, state string) (*sdk.GetPromptResult, error) {
		return l.sess.GetPrompt(ctx, &sdk.GetPromptParams{Meta: p.u.contentMeta(l, via), Name: p.name, Arguments: args, InputResponses: resp, RequestState: state})
	}, func(r *sdk.GetPromptResult) (sdk.InputRequestMap, string, bool) {
		return r.InputRequests, r.RequestState, r.NeedsInput()
	})
}

// Complete asks for completions of an argument of a prompt (ref/prompt,
// by name) or of a resource template (ref/resource, by URI template, or
// by a URI the server answers for), from the server that lists it.
func (c *Content) Complete(ctx context.Context, p *sdk.CompleteParams) (*sdk.CompleteResult, error) {
	if p == nil || p.Ref == nil {
		return nil, errors.New("completion: no ref")
	}
	var u *Upstream
	ref := *p.Ref
	switch p.Ref.Type {
	case "ref/prompt":
		up, err := c.prompt(p.Ref.Name)
		if err != nil {
			return nil, err
		}
		u, ref.Name = up.u, up.name
	case "ref/resource":
		c.mu.Lock()
		var ambiguous error
		for _, t := range c.templates {
			if t.raw != p.Ref.URI {
				continue
			}
			if u != nil && u != t.u {
				ambiguous = fmt.Errorf("resource template %s: %w: servers %s and %s both list it", t.raw, ErrAmbiguousContent, u.srv.Name, t.u.srv.Name)
				break
			}
			u = t.u
		}
		c.mu.Unlock()
		if ambiguous != nil {
			return nil, ambiguous
		}
		if u == nil {
			var err error
			if u, err = c.owner(p.Ref.URI); err != nil {
				return nil, err
			}
		}
	default:
		return nil, fmt.Errorf("completion: ref type %q: %w", p.Ref.Type, ErrUnknownContent)
	}
	l, err := u.current()
	if err != nil {
		return nil, fmt.Errorf("server %s: %w", u.srv.Name, err)
	}
	defer l.nudgeWhileWaiting().stop() // a stalled Go server: see nudge.go
	return l.sess.Complete(ctx, &sdk.CompleteParams{Ref: &ref, Argument: p.Argument, Context: p.Context})
}

// Offers says which optional features a server declared at start:
// completions and resource subscriptions, any server's.
func (c *Content) Offers() (completions, subscribe bool) {
	for _, u := range c.ups {
		caps := u.capabilities()
		if caps == nil {
			continue
		}
		completions = completions || caps.Completions != nil
		subscribe = subscribe || (caps.Resources != nil && caps.Resources.Subscribe)
	}
	return completions, subscribe
}

// OnResourceUpdated sets what is called with the URI of each
// notifications/resources/updated of a server, for URIs subscribed
// through c; it is called on its own goroutine.
func (c *Content) OnResourceUpdated(fn func(uri string)) {
	for _, u := range c.ups {
		u.setResourceUpdated(fn)
	}
}

// Subscribe subscribes to uri at the server that answers for it, unless a
// subscription to it is already open: each Subscribe is matched by one
// Unsubscribe.
func (c *Content) Subscribe(ctx context.Context, uri string) error {
	u, err := c.owner(uri)
	if err != nil {
		return err
	}
	c.mu.Lock()
	if s := c.subs[uri]; s != nil {
		s.n++
		c.mu.Unlock()
		return nil
	}
	c.mu.Unlock()
	// Not under c.mu: the server's answer may take long. Two first
	// subscribers may both ask it; subscribing is idempotent.
	if err := u.subscribe(ctx, uri); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.subs[uri]; s != nil {
		s.n++
	} else {
		c.subs[uri] = &subscription{n: 1, u: u}
	}
	return nil
}

// Unsubscribe ends one Subscribe of uri; the server is unsubscribed with
// the last one. An unknown uri is no error (unsubscribing is idempotent).
func (c *Content) Unsubscribe(ctx context.Context, uri string) error {
	c.mu.Lock()
	s := c.subs[uri]
	if s == nil {
		c.mu.Unlock()
		return nil
	}
	s.n--
	if s.n > 0 {
		c.mu.Unlock()
		return nil
	}
	delete(c.subs, uri)
	c.mu.Unlock()
	return s.u.unsubscribe(ctx, uri)
}
