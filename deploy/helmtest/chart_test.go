package helmtest

import (
	"bytes"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/agentbackplane/backplane/config"
)

// root is the repository's root, from this package's folder.
var root = filepath.Join("..", "..")

const chart = "deploy/helm/backplane"

// helmOnce builds helm once (go tool caches the binary), so that the
// parallel runs below do not all compile it at once.
var helmOnce sync.Once

// helm runs the pinned helm (tools/go.mod) in the repository's root, with
// its configuration, cache and data folders in the test's temp folder.
func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	helmOnce.Do(func() {
		out, err := helmCmd(t, "version").CombinedOutput()
		t.Logf("helm version: %s %v", bytes.TrimSpace(out), err)
	})
	out, err := helmCmd(t, args...).CombinedOutput()
	return string(out), err
}

func helmCmd(t *testing.T, args ...string) *exec.Cmd {
	home := t.TempDir()
	cmd := exec.Command("go", append([]string{"tool", "-modfile=tools/go.mod", "helm"}, args...)...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
		// -mod=readonly from scripts/test's GOFLAGS applies to tools/go.mod.
		"GOWORK=off")
	return cmd
}

// docValues is the body of the ```yaml block after the marker line in
// docs/deploy.md: the values file the guide's Helm section installs with.
func docValues(t *testing.T, marker string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "docs", "deploy.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i := strings.Index(doc, marker)
	if i < 0 {
		t.Fatalf("docs/deploy.md has no %q", marker)
	}
	rest := doc[i:]
	j := strings.Index(rest, "\n```yaml\n")
	if j < 0 {
		t.Fatalf("docs/deploy.md: no ```yaml block after %q", marker)
	}
	body := rest[j+len("\n```yaml\n"):]
	k := strings.Index(body, "\n```\n")
	if k < 0 {
		t.Fatalf("docs/deploy.md: the block after %q is never closed", marker)
	}
	return body[:k+1]
}

// rendered is what helm template made, decoded.
type rendered struct {
	deployment  *appsv1.Deployment
	service     *corev1.Service
	pdb         *policyv1.PodDisruptionBudget
	netpol      *networkingv1.NetworkPolicy
	configMap   *corev1.ConfigMap
	secrets     map[string]*corev1.Secret
	account     *corev1.ServiceAccount
	kinds       []string
	namespace   string
	releaseName string
}

// decodeStrict decodes one manifest into obj: YAML to JSON, then JSON
// with unknown fields refused (and duplicate keys, which YAML allows).
func decodeStrict(t *testing.T, doc []byte, obj any) {
	t.Helper()
	if err := yaml.UnmarshalStrict(doc, obj); err != nil {
		t.Fatalf("%T: %v\n%s", obj, err, doc)
	}
}

// template renders the chart with helm template (valuesFile "" for the
// defaults) and decodes every manifest into its API type.
func template(t *testing.T, valuesFile string, extra ...string) *rendered {
	t.Helper()
	r := &rendered{secrets: map[string]*corev1.Secret{}, namespace: "agents", releaseName: "bp"}
	args := []string{"template", r.releaseName, chart, "--namespace", r.namespace}
	if valuesFile != "" {
		args = append(args, "--values", valuesFile)
	}
	args = append(args, extra...)
	out, err := helm(t, args...)
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	for _, doc := range strings.Split(out, "\n---\n") {
		doc = strings.TrimPrefix(doc, "---\n")
		if strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatalf("a rendered manifest is not YAML: %v\n%s", err, doc)
		}
		r.kinds = append(r.kinds, meta.APIVersion+" "+meta.Kind)
		b := []byte(doc)
		switch meta.APIVersion + " " + meta.Kind {
		case "apps/v1 Deployment":
			once(t, r.deployment == nil, meta.Kind)
			r.deployment = &appsv1.Deployment{}
			decodeStrict(t, b, r.deployment)
		case "v1 Service":
			once(t, r.service == nil, meta.Kind)
			r.service = &corev1.Service{}
			decodeStrict(t, b, r.service)
		case "policy/v1 PodDisruptionBudget":
			once(t, r.pdb == nil, meta.Kind)
			r.pdb = &policyv1.PodDisruptionBudget{}
			decodeStrict(t, b, r.pdb)
		case "networking.k8s.io/v1 NetworkPolicy":
			once(t, r.netpol == nil, meta.Kind)
			r.netpol = &networkingv1.NetworkPolicy{}
			decodeStrict(t, b, r.netpol)
		case "v1 ConfigMap":
			once(t, r.configMap == nil, meta.Kind)
			r.configMap = &corev1.ConfigMap{}
			decodeStrict(t, b, r.configMap)
		case "v1 ServiceAccount":
			once(t, r.account == nil, meta.Kind)
			r.account = &corev1.ServiceAccount{}
			decodeStrict(t, b, r.account)
		case "v1 Secret":
			s := &corev1.Secret{}
			decodeStrict(t, b, s)
			if r.secrets[s.Name] != nil {
				t.Fatalf("two Secrets named %s", s.Name)
			}
			r.secrets[s.Name] = s
		default:
			t.Fatalf("helm template rendered a %s %s the test does not know:\n%s", meta.APIVersion, meta.Kind, doc)
		}
	}
	for what, missing := range map[string]bool{"Deployment": r.deployment == nil, "Service": r.service == nil,
		"ConfigMap": r.configMap == nil} {
		if missing {
			t.Fatalf("helm template rendered no %s: %v", what, r.kinds)
		}
	}
	return r
}

func once(t *testing.T, first bool, kind string) {
	t.Helper()
	if !first {
		t.Fatalf("helm template rendered two of kind %s", kind)
	}
}

// stripComments drops the lines that are only comments ("# Source: ...").
func stripComments(doc string) string {
	var b strings.Builder
	for line := range strings.SplitSeq(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

// TestChartLint: helm lint --strict (warnings fail too) with the default
// values and with the guide's three-replica values.
func TestChartLint(t *testing.T) {
	values := writeDocValues(t)
	for _, args := range [][]string{{"lint", "--strict", chart}, {"lint", "--strict", chart, "--values", values}} {
		out, err := helm(t, args...)
		if err != nil || !strings.Contains(out, "1 chart(s) linted, 0 chart(s) failed") {
			t.Errorf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// writeDocValues writes the guide's three-replica values to a file.
func writeDocValues(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(path, []byte(docValues(t, "<!-- helm: values -->")), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// want is what a rendering must show.
type want struct {
	replicas     int32
	pgSecret     string // the Secret PGPASSWORD comes from
	pgSecretKey  string
	tokensSecret string
	tlsSecret    string
	storeURL     string
	ingressPeers int  // peers the NetworkPolicy admits to serve
	pgPeers      int  // peers of the PostgreSQL egress rule (0: any address)
	chartSecrets bool // the chart makes the password and tokens Secrets
}

// TestChartDefaults: the default values render one replica, its Secrets
// made by the chart, and everything the chart promises.
func TestChartDefaults(t *testing.T) {
	r := template(t, "")
	check(t, r, want{replicas: 1, pgSecret: "bp-backplane-postgresql", pgSecretKey: "password",
		tokensSecret: "bp-backplane-tokens", tlsSecret: "bp-backplane-tls",
		storeURL:     "postgres://backplane@postgresql:5432/backplane?sslmode=require",
		ingressPeers: 1, chartSecrets: true})
}

// TestChartThreeReplicas: the guide's values: three replicas on an
// external PostgreSQL whose password, tokens and certificate are the
// operator's own Secrets.
func TestChartThreeReplicas(t *testing.T) {
	r := template(t, writeDocValues(t))
	check(t, r, want{replicas: 3, pgSecret: "backplane-postgres", pgSecretKey: "password",
		tokensSecret: "backplane-tokens", tlsSecret: "backplane-tls",
		storeURL:     "postgres://backplane@pg.db.svc.cluster.local:5432/backplane?sslmode=verify-full",
		ingressPeers: 1, pgPeers: 1})
	if len(r.secrets) != 0 {
		t.Errorf("with existing Secrets the chart still makes %d", len(r.secrets))
	}
}

func check(t *testing.T, r *rendered, w want) {
	t.Helper()
	d := r.deployment
	if d.Spec.Replicas == nil || *d.Spec.Replicas != w.replicas {
		t.Errorf("replicas %v, want %d", d.Spec.Replicas, w.replicas)
	}
	podLabels := d.Spec.Template.Labels
	if !selects(d.Spec.Selector, podLabels) {
		t.Errorf("the Deployment's selector %v does not select its pods %v", d.Spec.Selector, podLabels)
	}
	pod := d.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]

	// Probes: liveness /healthz, readiness /readyz, over https on serve's port.
	for name, p := range map[string]*corev1.Probe{"/healthz": c.LivenessProbe, "/readyz": c.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil {
			t.Errorf("no httpGet probe for %s", name)
			continue
		}
		if p.HTTPGet.Path != name || p.HTTPGet.Port.String() != "serve" || p.HTTPGet.Scheme != corev1.URISchemeHTTPS {
			t.Errorf("probe %s: %+v", name, p.HTTPGet)
		}
	}
	if c.LivenessProbe != nil && c.LivenessProbe.HTTPGet != nil && c.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Errorf("liveness probes %s, want /healthz", c.LivenessProbe.HTTPGet.Path)
	}
	port := int32(0)
	for _, p := range c.Ports {
		if p.Name == "serve" {
			port = p.ContainerPort
		}
	}
	if port != 8787 {
		t.Errorf("container port serve %d, want 8787", port)
	}

	// The security context the sandbox needs (README.md of the chart).
	psc, sc := pod.SecurityContext, c.SecurityContext
	switch {
	case psc == nil || sc == nil:
		t.Fatal("no securityContext")
	case psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot, psc.RunAsUser == nil || *psc.RunAsUser != 65532:
		t.Errorf("the pod does not run as the image's non-root uid 65532: %+v", psc)
	case psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		t.Errorf("seccompProfile %+v, want RuntimeDefault", psc.SeccompProfile)
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Error("allowPrivilegeEscalation is not false (no_new_privs, which Landlock and seccomp need)")
	case sc.Privileged != nil && *sc.Privileged:
		t.Error("privileged")
	case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Error("the root file system is writable")
	case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0:
		t.Errorf("capabilities %+v, want all dropped, none added", sc.Capabilities)
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Error("the pod mounts a service account token")
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
		t.Errorf("resource requests %v", c.Resources.Requests)
	}

	// Secret references: PGPASSWORD, the tokens, the TLS pair.
	var pg *corev1.SecretKeySelector
	for _, e := range c.Env {
		if e.Name == "PGPASSWORD" && e.ValueFrom != nil {
			pg = e.ValueFrom.SecretKeyRef
		}
		if e.Name == "PGPASSWORD" && e.Value != "" {
			t.Error("PGPASSWORD is written in the Deployment")
		}
	}
	if pg == nil || pg.Name != w.pgSecret || pg.Key != w.pgSecretKey {
		t.Errorf("PGPASSWORD from %+v, want secret %s key %s", pg, w.pgSecret, w.pgSecretKey)
	}
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = v
	}
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		if _, ok := volumes[m.Name]; !ok {
			t.Errorf("mount %s names no volume", m.Name)
		}
		mounts[m.Name] = m.MountPath
	}
	for name, secret := range map[string]string{"tokens": w.tokensSecret, "tls": w.tlsSecret} {
		v := volumes[name]
		if v.Secret == nil || v.Secret.SecretName != secret {
			t.Errorf("volume %s: %+v, want the Secret %s", name, v.VolumeSource, secret)
		}
	}
	if v := volumes["config"]; v.ConfigMap == nil || v.ConfigMap.Name != r.configMap.Name {
		t.Errorf("volume config: %+v, want the ConfigMap %s", v.VolumeSource, r.configMap.Name)
	}
	for _, name := range []string{"workspace", "tmp"} {
		if v := volumes[name]; v.EmptyDir == nil {
			t.Errorf("volume %s: %+v, want an emptyDir (the root file system is read-only)", name, v.VolumeSource)
		}
	}
	if mounts["tmp"] != "/tmp" || mounts["workspace"] != "/var/lib/backplane/workspace" {
		t.Errorf("mounts %v", mounts)
	}
	if !slices.Equal(c.Args, []string{"serve", "--config", mounts["config"] + "/backplane.yaml"}) {
		t.Errorf("args %v, want serve with the mounted configuration", c.Args)
	}
	if w.chartSecrets {
		pgs := r.secrets[w.pgSecret]
		if pgs == nil {
			t.Errorf("the chart makes no Secret %s", w.pgSecret)
		} else if _, ok := pgs.Data[w.pgSecretKey]; !ok {
			t.Errorf("the Secret %s has no key %s", w.pgSecret, w.pgSecretKey)
		}
	}

	// The configuration: what serve is told matches what is mounted.
	checkConfig(t, r, w, mounts)

	// The Service sends to the pods' serve port.
	if !selectsMap(r.service.Spec.Selector, podLabels) || len(r.service.Spec.Ports) != 1 ||
		r.service.Spec.Ports[0].TargetPort.String() != "serve" {
		t.Errorf("the Service %+v does not reach the pods' serve port", r.service.Spec)
	}

	// The PodDisruptionBudget: at most one replica at a time.
	if r.pdb == nil {
		t.Error("no PodDisruptionBudget")
	} else if r.pdb.Spec.MaxUnavailable == nil || r.pdb.Spec.MaxUnavailable.IntValue() != 1 || !selects(r.pdb.Spec.Selector, podLabels) {
		t.Errorf("PodDisruptionBudget %+v", r.pdb.Spec)
	}

	checkNetworkPolicy(t, r.netpol, w, podLabels)
}

// checkConfig decodes the ConfigMap's backplane.yaml, checks the paths
// in it against the mounts, and has Backplane's own parser load it (the
// mounted folders stood in for by temp folders).
func checkConfig(t *testing.T, r *rendered, w want, mounts map[string]string) {
	t.Helper()
	text, ok := r.configMap.Data["backplane.yaml"]
	if !ok {
		t.Fatalf("the ConfigMap has no backplane.yaml: %v", r.configMap.Data)
	}
	var cfg struct {
		Store     string `json:"store"`
		Workspace string `json:"workspace"`
		Serve     struct {
			HTTP        string `json:"http"`
			AllowRemote bool   `json:"allow_remote"`
			TLS         struct {
				CertFile string `json:"cert_file"`
				KeyFile  string `json:"key_file"`
			} `json:"tls"`
			CallerTokens []struct {
				Caller    string `json:"caller"`
				TokenFile string `json:"token_file"`
			} `json:"caller_tokens"`
		} `json:"serve"`
		Operators []struct {
			Name      string `json:"name"`
			TokenFile string `json:"token_file"`
		} `json:"operators"`
	}
	if err := yaml.Unmarshal([]byte(text), &cfg); err != nil {
		t.Fatalf("backplane.yaml: %v\n%s", err, text)
	}
	if cfg.Store != w.storeURL {
		t.Errorf("store %q, want %q", cfg.Store, w.storeURL)
	}
	if u, err := url.Parse(cfg.Store); err != nil || u.User == nil {
		t.Errorf("store %q: %v", cfg.Store, err)
	} else if _, has := u.User.Password(); has {
		t.Error("the store URL in the ConfigMap holds a password")
	}
	if cfg.Workspace != mounts["workspace"] || cfg.Serve.HTTP != "0.0.0.0:8787" || !cfg.Serve.AllowRemote {
		t.Errorf("workspace %q, http %q, allow_remote %v", cfg.Workspace, cfg.Serve.HTTP, cfg.Serve.AllowRemote)
	}
	if cfg.Serve.TLS.CertFile != mounts["tls"]+"/tls.crt" || cfg.Serve.TLS.KeyFile != mounts["tls"]+"/tls.key" {
		t.Errorf("tls %+v, mounted at %s", cfg.Serve.TLS, mounts["tls"])
	}
	var keys []string
	for _, c := range cfg.Serve.CallerTokens {
		keys = append(keys, strings.TrimPrefix(c.TokenFile, mounts["tokens"]+"/"))
	}
	for _, o := range cfg.Operators {
		keys = append(keys, strings.TrimPrefix(o.TokenFile, mounts["tokens"]+"/"))
	}
	if !slices.Equal(keys, []string{"caller-agent", "operator-ops"}) {
		t.Errorf("token files %v, want caller-agent and operator-ops in %s", keys, mounts["tokens"])
	}
	if w.chartSecrets {
		s := r.secrets[w.tokensSecret]
		for _, k := range keys {
			if s == nil || len(s.Data[k]) < 32 {
				t.Errorf("the tokens Secret %s has no token %s of 32 bytes or more", w.tokensSecret, k)
			}
		}
	}

	// Backplane's own parser.
	if c := load(t, text); c != nil && c.StoreKind != config.StorePostgres {
		t.Errorf("store kind %s, want postgres", c.StoreKind)
	}
}

func checkNetworkPolicy(t *testing.T, np *networkingv1.NetworkPolicy, w want, podLabels map[string]string) {
	t.Helper()
	if np == nil {
		t.Fatal("no NetworkPolicy")
	}
	if !selects(&np.Spec.PodSelector, podLabels) {
		t.Errorf("the NetworkPolicy selects %v, not the pods %v", np.Spec.PodSelector, podLabels)
	}
	if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}) {
		t.Errorf("policyTypes %v: both directions must be confined", np.Spec.PolicyTypes)
	}
	// Ingress: one rule, from the ingress's peers, to serve's port only.
	if len(np.Spec.Ingress) != 1 {
		t.Fatalf("%d ingress rules, want 1", len(np.Spec.Ingress))
	}
	in := np.Spec.Ingress[0]
	if len(in.From) != w.ingressPeers || ports(in.Ports) != "TCP/8787" {
		t.Errorf("ingress from %v on %s, want %d peers on TCP/8787", in.From, ports(in.Ports), w.ingressPeers)
	}
	// Egress: PostgreSQL's port and DNS; no rule without ports (that would
	// open every port).
	var got []string
	for _, e := range np.Spec.Egress {
		if len(e.Ports) == 0 {
			t.Errorf("an egress rule with no ports admits every port: %+v", e)
		}
		got = append(got, ports(e.Ports))
		if ports(e.Ports) == "TCP/5432" && len(e.To) != w.pgPeers {
			t.Errorf("the PostgreSQL egress goes to %v, want %d peers", e.To, w.pgPeers)
		}
	}
	if !slices.Equal(got, []string{"TCP/5432", "UDP/53,TCP/53"}) {
		t.Errorf("egress ports %v, want PostgreSQL's and DNS", got)
	}
}

func ports(ps []networkingv1.NetworkPolicyPort) string {
	var s []string
	for _, p := range ps {
		proto := "TCP"
		if p.Protocol != nil {
			proto = string(*p.Protocol)
		}
		s = append(s, fmt.Sprintf("%s/%s", proto, p.Port.String()))
	}
	return strings.Join(s, ",")
}

func selects(sel *metav1.LabelSelector, labels map[string]string) bool {
	return sel != nil && len(sel.MatchExpressions) == 0 && selectsMap(sel.MatchLabels, labels)
}

func selectsMap(sel, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// TestChartTLSVariants: client certificates (a CA Secret mounted, the
// configuration naming it and caller_from), and TLS off (plain HTTP
// probes, no TLS volume, no serve.tls); Backplane loads both
// configurations. A chart key set under config fails the rendering.
func TestChartTLSVariants(t *testing.T) {
	r := template(t, "", "--set", "tls.clientCASecret=agent-cas,tls.callerFrom=san_uri")
	c := r.deployment.Spec.Template.Spec
	found := false
	for _, v := range c.Volumes {
		if v.Name == "client-ca" && v.Secret != nil && v.Secret.SecretName == "agent-cas" {
			found = true
		}
	}
	if !found {
		t.Errorf("no client-ca volume from the Secret agent-cas: %+v", c.Volumes)
	}
	text := r.configMap.Data["backplane.yaml"]
	if !strings.Contains(text, "client_ca_file: /etc/backplane/client-ca/ca.crt") || !strings.Contains(text, "caller_from: san_uri") {
		t.Errorf("the configuration does not name the client CA and caller_from:\n%s", text)
	}
	load(t, text)

	r = template(t, "", "--set", "tls.enabled=false")
	c = r.deployment.Spec.Template.Spec
	for _, v := range c.Volumes {
		if v.Name == "tls" {
			t.Error("a tls volume with tls.enabled false")
		}
	}
	for _, p := range []*corev1.Probe{c.Containers[0].LivenessProbe, c.Containers[0].ReadinessProbe} {
		if p.HTTPGet.Scheme != corev1.URISchemeHTTP {
			t.Errorf("probe scheme %s with TLS off", p.HTTPGet.Scheme)
		}
	}
	text = r.configMap.Data["backplane.yaml"]
	if strings.Contains(text, "tls:") || r.service.Spec.Ports[0].Name != "http" {
		t.Errorf("TLS off: port %s, configuration:\n%s", r.service.Spec.Ports[0].Name, text)
	}
	load(t, text)

	for _, set := range []string{"config.store=/tmp/x", "config.serve.http=0.0.0.0:1"} {
		out, err := helm(t, "template", "bp", chart, "--set", set)
		key := strings.SplitN(set, "=", 2)[0]
		if err == nil || !strings.Contains(out, key+" is the chart's") {
			t.Errorf("--set %s: %v, want a refusal naming %s\n%s", set, err, key, out)
		}
	}
}

// load has Backplane's parser load a rendered configuration, the
// mounted folders (the token files) stood in for by a temp folder.
func load(t *testing.T, text string) *config.Config {
	t.Helper()
	dir := t.TempDir()
	text = strings.ReplaceAll(text, "/etc/backplane/", dir+"/etc/")
	text = strings.ReplaceAll(text, "/var/lib/backplane/", dir+"/var/")
	for _, k := range []string{"caller-agent", "operator-ops"} {
		path := filepath.Join(dir, "etc", "tokens", k)
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(k+"-token-0123456789abcdef0123456789\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(dir, "backplane.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(path)
	if err != nil {
		t.Errorf("Backplane refuses the chart's configuration: %v\n%s", err, text)
	}
	return c
}
