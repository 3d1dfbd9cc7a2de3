package config

import (
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// The sandbox section confines the processes Backplane starts for tools
// (package internal/sandbox: Landlock, rlimits, a pids cgroup):
//
//	sandbox:                 # defaults for bash, command tools (and servers that opt in)
//	  enable: auto           # auto | true | false | required
//	  read: []               # extra read-only paths (folders or files)
//	  write: []              # extra writable paths beside the workspace
//	  network: false         # true, false, or a list of TCP ports to connect to
//	  limits: {cpu: 600s, memory: 17179869184, processes: 256, file_size: 1073741824}
//	  allow_unix_sockets: false  # see SandboxConfig.AllowUnixSockets
//	tools:
//	  - name: fetch-docs
//	    command: [curl, -s, https://example.com]
//	    sandbox: {network: [443]}
//	builtin:
//	  bash: {sandbox: {write: [/tmp/scratch]}}
//	servers:
//	  - name: files
//	    command: [node, server.js]
//	    sandbox: {enable: true, read: [./server]}   # stdio servers opt in
//
// What the sections mean for one process (package assemble decides it,
// probing the kernel; this package only parses):
//
// enable: auto (the default) sandboxes where the kernel can (Landlock ABI
// 6) and the gateway's state (store folder, audit log, configuration file)
// lies outside every grant; otherwise the tool runs unsandboxed and the
// start says why. true is the same except that state inside a grant stops
// the start. required also stops the start where the kernel cannot
// sandbox. false turns it off. The workspace is writable for bash and
// command tools; a stdio server gets no workspace, and keeps the network
// unless its own sandbox section says otherwise. A tool's sandbox section
// overrides enable, network and each limit it sets, and adds its read and
// write paths to the top-level ones.

// SandboxMode is the sandbox's enable setting.
type SandboxMode string

// The sandbox modes.
const (
	SandboxAuto     SandboxMode = "auto"
	SandboxOn       SandboxMode = "true"
	SandboxOff      SandboxMode = "false"
	SandboxRequired SandboxMode = "required"
)

// SandboxConfig is a sandbox section: the top-level one or a tool's
// override. Zero fields are unset (inherited).
type SandboxConfig struct {
	Enable SandboxMode
	// Read and Write are absolute paths.
	Read, Write []string
	// Network, when set, replaces the inherited rule.
	Network *SandboxNetwork
	// Limits: a non-zero field replaces the inherited one.
	Limits SandboxLimits
	// AllowUnixSockets (top level only) lets `enable: required` start
	// with a store reachable over a Unix socket on a system where the
	// sandbox cannot refuse Unix sockets (no seccomp filter: see
	// sandbox.Status.UnixSockets). Where it can, they stay refused.
	AllowUnixSockets bool
	Line             int
}

// SandboxNetwork is a sandbox section's network rule: all TCP, or only
// connections to Ports.
type SandboxNetwork struct {
	All   bool
	Ports []uint16
}

// SandboxLimits are a sandbox section's resource limits; zero is unset.
type SandboxLimits struct {
	CPUSeconds, AddressSpace, Processes, FileSize uint64
}

func (p *parser) sandbox(c *Config, v *yaml.Node) (*SandboxConfig, error) {
	s := &SandboxConfig{Line: v.Line}
	err := p.mapping(v, "sandbox", func(key string, k, v *yaml.Node) error {
		var err error
		switch key {
		case "enable":
			n := deref(v)
			switch {
			case n.Kind == yaml.ScalarNode && n.ShortTag() == "!!bool":
				var b bool
				b, err = p.boolean(v, "enable")
				s.Enable = SandboxOff
				if b {
					s.Enable = SandboxOn
				}
			case n.Kind == yaml.ScalarNode && (n.Value == "required" || n.Value == "auto"):
				s.Enable = SandboxMode(n.Value)
			default:
				err = p.errAt(v, "sandbox enable must be true, false, auto or required, not %s", describe(v))
			}
		case "read", "write":
			var list []string
			list, err = p.strList(v, key)
			for i, path := range list {
				if path == "" {
					return p.errAt(v, "sandbox %s: an empty path", key)
				}
				list[i] = resolve(c.Dir, path)
			}
			if key == "read" {
				s.Read = list
			} else {
				s.Write = list
			}
		case "network":
			s.Network, err = p.sandboxNetwork(v)
		case "allow_unix_sockets":
			s.AllowUnixSockets, err = p.boolean(v, key)
		case "limits":
			err = p.mapping(v, "sandbox limits", func(key string, k, v *yaml.Node) error {
				switch key {
				case "cpu":
					d, err := p.duration(v, "cpu")
					if err == nil && d < time.Second {
						err = p.errAt(v, "sandbox cpu limit must be at least 1s")
					}
					s.Limits.CPUSeconds = uint64(d / time.Second)
					return err
				case "memory", "file_size":
					n, err := p.positiveInt(v, key)
					if key == "memory" {
						s.Limits.AddressSpace = uint64(n)
					} else {
						s.Limits.FileSize = uint64(n)
					}
					return err
				case "processes":
					n, err := p.integer(v, key)
					if err == nil && (n < 1 || n > 1<<20) {
						err = p.errAt(v, "sandbox processes must be between 1 and %d", 1<<20)
					}
					s.Limits.Processes = uint64(n)
					return err
				}
				return nil
			}, "cpu", "memory", "processes", "file_size")
		}
		return err
	}, "enable", "read", "write", "network", "limits", "allow_unix_sockets")
	return s, err
}

func (p *parser) sandboxNetwork(v *yaml.Node) (*SandboxNetwork, error) {
	n := deref(v)
	if n.Kind == yaml.ScalarNode {
		b, err := p.boolean(v, "sandbox network")
		if err != nil {
			return nil, p.errAt(v, "sandbox network must be true, false or a list of TCP ports, not %s", describe(v))
		}
		return &SandboxNetwork{All: b}, nil
	}
	out := &SandboxNetwork{Ports: []uint16{}}
	err := p.sequence(v, "sandbox network", func(item *yaml.Node) error {
		port, err := p.integer(item, "a sandbox network port")
		if err == nil && (port < 1 || port > 65535) {
			err = p.errAt(item, "sandbox network port %d: ports are 1 to 65535", port)
		}
		if err == nil && !slices.Contains(out.Ports, uint16(port)) {
			out.Ports = append(out.Ports, uint16(port))
		}
		return err
	})
	return out, err
}

// StoreUnixSocket says how a PostgreSQL store is reached over a Unix
// socket ("" when it is not, or the store is a folder): a host that is a
// path (host=/var/run/postgresql, a percent-encoded path as the URL's
// host) or no host at all (libpq and pgx then try the local socket
// folders first, unless PGHOST names a TCP host).
func (c *Config) StoreUnixSocket() string {
	kind := c.StoreKind
	if kind == "" {
		kind = StoreKindOf(c.Store)
	}
	if kind != StorePostgres {
		return ""
	}
	rest := c.Store[strings.Index(c.Store, "://")+3:]
	authority, query := rest, ""
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		authority = rest[:i]
	}
	if i := strings.IndexByte(rest, '?'); i >= 0 {
		query = rest[i+1:]
	}
	if i := strings.LastIndexByte(authority, '@'); i >= 0 {
		authority = authority[i+1:]
	}
	hosts := []string{}
	for _, h := range strings.Split(authority, ",") {
		if u, err := url.PathUnescape(h); err == nil {
			h = u
		}
		hosts = append(hosts, h)
	}
	if q, err := url.ParseQuery(query); err == nil && q.Has("host") {
		hosts = strings.Split(q.Get("host"), ",")
	}
	for _, h := range hosts {
		switch {
		case strings.HasPrefix(h, "/") || strings.HasPrefix(h, "@"):
			return "host " + h
		case h == "" || strings.HasPrefix(h, ":"):
			if env := os.Getenv("PGHOST"); env != "" && !strings.HasPrefix(env, "/") {
				continue
			}
			return "no host: the local socket folders come first"
		}
	}
	return ""
}
