//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/conf"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	kjson "sigs.k8s.io/json"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/byzlog/byzlog/services/internal/localnet"
)

// k8sObject is one decoded manifest document.
type k8sObject struct {
	file string
	obj  any
}

func newK8sObject(apiVersion, kind string) any {
	switch apiVersion + "/" + kind {
	case "v1/Service":
		return &corev1.Service{}
	case "v1/ConfigMap":
		return &corev1.ConfigMap{}
	case "v1/Secret":
		return &corev1.Secret{}
	case "v1/Namespace":
		return &corev1.Namespace{}
	case "apps/v1/StatefulSet":
		return &appsv1.StatefulSet{}
	case "apps/v1/Deployment":
		return &appsv1.Deployment{}
	case "autoscaling/v2/HorizontalPodAutoscaler":
		return &autoscalingv2.HorizontalPodAutoscaler{}
	case "policy/v1/PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}
	}
	return nil
}

// decodeManifests decodes every document of file strictly: an unknown or
// misspelled field is an error, as `kubectl apply --validate=strict` says.
func decodeManifests(t *testing.T, file string) []k8sObject {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var objs []k8sObject
	for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(b), -1) {
		var meta struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if err := sigsyaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Errorf("%s document %d: %v", filepath.Base(file), i+1, err)
			continue
		}
		if meta.Kind == "" && meta.APIVersion == "" {
			continue // comments only
		}
		obj := newK8sObject(meta.APIVersion, meta.Kind)
		if obj == nil {
			t.Errorf("%s document %d: %s %s is not a kind this test knows", filepath.Base(file), i+1, meta.APIVersion, meta.Kind)
			continue
		}
		if err := strictDecode([]byte(doc), obj); err != nil {
			t.Errorf("%s document %d (%s): %v", filepath.Base(file), i+1, meta.Kind, err)
			continue
		}
		objs = append(objs, k8sObject{file: filepath.Base(file), obj: obj})
	}
	return objs
}

// strictDecode decodes YAML as the API server's strict validation does: a
// duplicate key, an unknown field or a field in the wrong case is an error
// (encoding/json alone would accept "containerport" for containerPort).
func strictDecode(doc []byte, obj any) error {
	j, err := sigsyaml.YAMLToJSONStrict(doc)
	if err != nil {
		return err
	}
	strict, err := kjson.UnmarshalStrict(j, obj, kjson.DisallowUnknownFields)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

// workload is a StatefulSet or Deployment: its pod's labels and containers.
type workload struct {
	kind, name, file string
	replicas         int32
	serviceName      string
	labels           map[string]string
	pvcTemplates     []string
	spec             corev1.PodSpec
	containers       []*container
	namedPorts       map[string]int
}

type k8sNetwork struct {
	workloads map[string]*workload
	services  map[string]*corev1.Service
	natsHost  string
	natsPort  int
	natsTLS   tlsMode
}

func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func (w *workload) podDeclares(port int) *container {
	for _, c := range w.containers {
		if c.declared[port] {
			return c
		}
	}
	return nil
}

var rePodDNS = regexp.MustCompile(`^([a-z0-9-]+)-(\d+)\.([a-z0-9-]+)$`)

func (n *k8sNetwork) dial(from *container, host string, port int) (target, error) {
	if loopback(host) {
		w := n.workloads[from.pod]
		if w == nil {
			return target{}, fmt.Errorf("%s is in no pod", from.where)
		}
		for _, c := range w.containers {
			if ls, _ := c.listeners(); slices.ContainsFunc(ls, func(l listener) bool { return l.port == port }) {
				return arrive(from, c, port)
			}
		}
		return target{}, fmt.Errorf("no container of pod %s listens on port %d", from.pod, port)
	}
	if host == n.natsHost {
		if port != n.natsPort {
			return target{}, fmt.Errorf("the NATS Helm release %s serves clients on port %d (nats-values.yaml config.nats.port), not %d", host, n.natsPort, port)
		}
		return target{external: "the NATS Helm release " + host, port: port, tls: n.natsTLS}, nil
	}
	if m := rePodDNS.FindStringSubmatch(host); m != nil {
		w := n.workloads[m[1]]
		if w == nil || w.kind != "StatefulSet" {
			return target{}, fmt.Errorf("%s: no StatefulSet %s", host, m[1])
		}
		ord, _ := strconv.Atoi(m[2])
		if int32(ord) >= w.replicas {
			return target{}, fmt.Errorf("%s: StatefulSet %s has %d replicas, no pod %d", host, w.name, w.replicas, ord)
		}
		if m[3] != w.serviceName {
			return target{}, fmt.Errorf("%s: pod DNS names use the StatefulSet's serviceName %s, not %s", host, w.serviceName, m[3])
		}
		svc := n.services[m[3]]
		if svc == nil || svc.Spec.ClusterIP != corev1.ClusterIPNone || !selects(svc.Spec.Selector, w.labels) {
			return target{}, fmt.Errorf("%s: needs a headless Service %s selecting StatefulSet %s's pods", host, m[3], w.name)
		}
		c := w.podDeclares(port)
		if c == nil {
			return target{}, fmt.Errorf("%s: no container of StatefulSet %s declares containerPort %d", host, w.name, port)
		}
		return arrive(from, c, port)
	}
	svc := n.services[host]
	if svc == nil {
		return target{}, fmt.Errorf("no Service, StatefulSet pod or NATS release named %q", host)
	}
	for _, sp := range svc.Spec.Ports {
		if int(sp.Port) != port {
			continue
		}
		for _, w := range n.workloads {
			if !selects(svc.Spec.Selector, w.labels) {
				continue
			}
			tp := int(sp.TargetPort.IntVal)
			if sp.TargetPort.Type == intstr.String {
				tp = w.namedPorts[sp.TargetPort.StrVal]
			} else if tp == 0 {
				tp = port
			}
			if c := w.podDeclares(tp); c != nil {
				return arrive(from, c, tp)
			}
		}
		return target{}, fmt.Errorf("Service %s port %d (targetPort %s) reaches no declared container port", host, port, sp.TargetPort.String())
	}
	return target{}, fmt.Errorf("Service %s has no port %d", host, port)
}

func (d *deployment) checkK8s(t *testing.T) {
	dir := filepath.Join(d.dep, "k8s")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var manifests []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".yaml") && e.Name() != "kustomization.yaml" && e.Name() != "nats-values.yaml" {
			manifests = append(manifests, e.Name())
		}
	}
	var objs []k8sObject
	if !t.Run("strict", func(t *testing.T) {
		for _, m := range manifests {
			objs = append(objs, decodeManifests(t, filepath.Join(dir, m))...)
		}
	}) {
		t.FailNow()
	}
	d.checkKustomization(t, dir, manifests)
	nw := &k8sNetwork{workloads: map[string]*workload{}, services: map[string]*corev1.Service{}}
	values := d.checkNATSValues(t, dir)
	nw.natsHost, nw.natsPort, nw.natsTLS = values.release, values.port, tlsIf(values.tls)

	var ws []*workload
	configs := map[string]map[string][]byte{} // ConfigMap or Secret name -> keys
	for _, o := range objs {
		switch x := o.obj.(type) {
		case *appsv1.StatefulSet:
			r := int32(1)
			if x.Spec.Replicas != nil {
				r = *x.Spec.Replicas
			}
			w := &workload{kind: "StatefulSet", name: x.Name, file: o.file, replicas: r, serviceName: x.Spec.ServiceName, labels: x.Spec.Template.Labels, spec: x.Spec.Template.Spec}
			for _, tpl := range x.Spec.VolumeClaimTemplates {
				w.pvcTemplates = append(w.pvcTemplates, tpl.Name)
			}
			ws = append(ws, w)
			checkSelector(t, o.file, "StatefulSet "+x.Name, x.Spec.Selector.MatchLabels, x.Spec.Template.Labels)
		case *appsv1.Deployment:
			r := int32(1)
			if x.Spec.Replicas != nil {
				r = *x.Spec.Replicas
			}
			ws = append(ws, &workload{kind: "Deployment", name: x.Name, file: o.file, replicas: r, labels: x.Spec.Template.Labels, spec: x.Spec.Template.Spec})
			checkSelector(t, o.file, "Deployment "+x.Name, x.Spec.Selector.MatchLabels, x.Spec.Template.Labels)
		case *corev1.Service:
			nw.services[x.Name] = x
		case *corev1.ConfigMap:
			configs["configMap/"+x.Name] = configMapKeys(x)
		case *corev1.Secret:
			configs["secret/"+x.Name] = secretKeys(x)
		}
	}
	var cs []*container
	for _, w := range ws {
		nw.workloads[w.name] = w
		w.containers = d.k8sContainers(t, w)
		cs = append(cs, w.containers...)
	}

	// bootstrap.sh's output, generated once: the nodes' config.toml says
	// whether their RPC is TLS, its Secrets hold what the pods mount.
	var boot *k8sBoot
	bootDir := t.TempDir()
	if !t.Run("generate", func(t *testing.T) { boot = d.generateK8s(t, bootDir, ws, configs) }) {
		t.FailNow()
	}

	t.Run("containers", func(t *testing.T) {
		for _, c := range cs {
			checkContainer(t, c, nw)
		}
		checkTopology(t, cs, nw)
	})
	t.Run("objects", func(t *testing.T) { d.checkK8sObjects(t, objs, nw) })
	t.Run("bootstrap", func(t *testing.T) { d.checkK8sBootstrap(t, ws, nw, configs, boot) })
	t.Run("tls", func(t *testing.T) { d.checkK8sTLS(t, cs, nw, boot, configs, values) })
}

// k8sBoot is what bootstrap.sh wrote, in a temporary directory.
type k8sBoot struct {
	dir string
	sts *workload // the validators' StatefulSet
}

// generateK8s runs bootstrap.sh, reads the ConfigMaps and Secrets it
// writes into configs, and learns from the nodes' config.toml whether
// they serve RPC over TLS.
func (d *deployment) generateK8s(t *testing.T, dir string, ws []*workload, configs map[string]map[string][]byte) *k8sBoot {
	b := &k8sBoot{dir: dir}
	for _, w := range ws {
		if w.kind == "StatefulSet" && slices.ContainsFunc(w.containers, func(c *container) bool { return c.binary == "cometbft" }) {
			b.sts = w
		}
	}
	if b.sts == nil {
		t.Fatal("k8s: no StatefulSet runs cometbft")
	}
	runScript(t, d, filepath.Join(d.dep, "k8s", "bootstrap.sh"), b.dir)
	generated, _ := filepath.Glob(filepath.Join(b.dir, "k8s", "*.yaml"))
	if len(generated) == 0 {
		t.Fatalf("bootstrap.sh wrote no manifests to %s/k8s", b.dir)
	}
	for _, f := range generated {
		for _, o := range decodeManifests(t, f) {
			switch x := o.obj.(type) {
			case *corev1.ConfigMap:
				configs["configMap/"+x.Name] = configMapKeys(x)
			case *corev1.Secret:
				configs["secret/"+x.Name] = secretKeys(x)
			}
		}
	}
	// Every pod's config.toml is config-<i>.toml (checkK8sBootstrap checks
	// they are the generated nodes'); pod 0 speaks for the template.
	if cfg, err := readCometConfig(filepath.Join(b.dir, "node0")); err == nil {
		for _, c := range b.sts.containers {
			if c.binary == "cometbft" {
				c.rpcTLS = tlsIf(cfg.RPC.IsTLSEnabled())
			}
		}
	}
	return b
}

func checkSelector(t *testing.T, file, what string, selector, labels map[string]string) {
	t.Helper()
	if !selects(selector, labels) {
		t.Errorf("k8s/%s: %s: selector %v does not match its pod labels %v", file, what, selector, labels)
	}
}

func configMapKeys(cm *corev1.ConfigMap) map[string][]byte {
	keys := map[string][]byte{}
	for k, v := range cm.Data {
		keys[k] = []byte(v)
	}
	for k, v := range cm.BinaryData {
		keys[k] = v
	}
	return keys
}

func secretKeys(s *corev1.Secret) map[string][]byte {
	keys := map[string][]byte{}
	for k, v := range s.Data {
		keys[k] = v
	}
	for k, v := range s.StringData {
		keys[k] = []byte(v)
	}
	return keys
}

// k8sContainers turns a pod template into containers; native sidecars (init
// containers with restartPolicy Always) run beside the others.
func (d *deployment) k8sContainers(t *testing.T, w *workload) []*container {
	vols := map[string]corev1.Volume{}
	for _, v := range w.spec.Volumes {
		vols[v.Name] = v
	}
	w.namedPorts = map[string]int{}
	var out []*container
	all := append(slices.Clone(w.spec.InitContainers), w.spec.Containers...)
	for i, kc := range all {
		init := i < len(w.spec.InitContainers)
		sidecar := init && kc.RestartPolicy != nil && *kc.RestartPolicy == corev1.ContainerRestartPolicyAlways
		where := fmt.Sprintf("k8s/%s %s/%s container %s", w.file, w.kind, w.name, kc.Name)
		if init && !sidecar {
			where = fmt.Sprintf("k8s/%s %s/%s init container %s", w.file, w.kind, w.name, kc.Name)
		}
		req := kc.Resources.Requests
		if req.Cpu().IsZero() || req.Memory().IsZero() {
			t.Errorf("%s: set resources.requests for cpu and memory", where)
		}
		if len(kc.Command) == 0 {
			t.Errorf("%s: set command, so what it runs is stated (and checked)", where)
			continue
		}
		binary := path.Base(kc.Command[0])
		repo, _, _ := strings.Cut(kc.Image, ":")
		if slices.Contains(knownBinaries, binary) {
			stage := d.df.byName[strings.TrimPrefix(repo, "byzlog/")]
			switch {
			case !strings.HasPrefix(repo, "byzlog/") || stage == nil:
				t.Errorf("%s: image %s is no target of deployments/docker/Dockerfile", where, kc.Image)
			case len(stage.Entrypoint()) == 0 || path.Base(stage.Entrypoint()[0]) != binary:
				t.Errorf("%s: runs %s, but image %s (Dockerfile target %s) is built for %v", where, binary, kc.Image, stage.name, stage.Entrypoint())
			}
		}
		c := &container{where: where, binary: binary, declared: map[int]bool{}, pod: w.name, checked: true}
		for _, p := range kc.Ports {
			c.declared[int(p.ContainerPort)] = true
			if p.Name != "" {
				w.namedPorts[p.Name] = int(p.ContainerPort)
			}
		}
		for _, vm := range kc.VolumeMounts {
			m := mount{target: vm.MountPath, volume: vm.Name, readOnly: vm.ReadOnly}
			v, ok := vols[vm.Name]
			switch {
			case ok && v.PersistentVolumeClaim != nil:
				m.persistent = true
			case ok && (v.ConfigMap != nil || v.Secret != nil):
				m.readOnly = true
			case !ok && slices.Contains(w.pvcTemplates, vm.Name):
				m.persistent, ok = true, true
			}
			if !ok {
				t.Errorf("%s: mounts %s, which is no volume or volumeClaimTemplate of its pod", where, vm.Name)
			}
			c.mounts = append(c.mounts, m)
		}
		for _, p := range []struct {
			kind string
			p    *corev1.Probe
		}{{"readiness", kc.ReadinessProbe}, {"liveness", kc.LivenessProbe}, {"startup", kc.StartupProbe}} {
			if p.p == nil {
				continue
			}
			pr, err := k8sProbe(p.kind, p.p, kc.Ports)
			if err != nil {
				t.Errorf("%s: %v", where, err)
				continue
			}
			c.probes = append(c.probes, pr)
		}
		if !slices.Contains(knownBinaries, binary) {
			// A shell step such as the validators' bootstrap: only the
			// files it reads are checked.
			c.inv, c.checked = &invocation{flags: map[string]string{}}, false
			c.script = strings.Join(append(kc.Command, kc.Args...), " ")
			out = append(out, c)
			continue
		}
		c.inv = d.invoke(t, where, binary, append(slices.Clone(kc.Command[1:]), kc.Args...))
		if c.longRunning() {
			if init && !sidecar {
				t.Errorf("%s: a long-running %s as a plain init container blocks the pod: give it restartPolicy: Always (a sidecar)", where, binary)
			}
			if kc.ReadinessProbe == nil || kc.LivenessProbe == nil {
				t.Errorf("%s: give it both a readinessProbe and a livenessProbe", where)
			}
			if sidecar && kc.StartupProbe == nil {
				t.Errorf("%s: a sidecar without a startupProbe lets the main containers start before it serves", where)
			}
		}
		out = append(out, c)
	}
	return out
}

func k8sProbe(kind string, p *corev1.Probe, ports []corev1.ContainerPort) (probe, error) {
	resolve := func(port intstr.IntOrString) (int, error) {
		if port.Type == intstr.Int {
			return int(port.IntVal), nil
		}
		for _, cp := range ports {
			if cp.Name == port.StrVal {
				return int(cp.ContainerPort), nil
			}
		}
		return 0, fmt.Errorf("%s probe: no container port named %q", kind, port.StrVal)
	}
	switch {
	case p.HTTPGet != nil:
		port, err := resolve(p.HTTPGet.Port)
		return probe{kind: kind, port: port, path: p.HTTPGet.Path, tls: p.HTTPGet.Scheme == corev1.URISchemeHTTPS}, err
	case p.TCPSocket != nil:
		port, err := resolve(p.TCPSocket.Port)
		return probe{kind: kind, port: port}, err
	case p.Exec != nil:
		return probeCommand(kind, p.Exec.Command)
	}
	return probe{}, fmt.Errorf("%s probe: use httpGet, tcpSocket or exec probe", kind)
}

func (d *deployment) checkKustomization(t *testing.T, dir string, manifests []string) {
	t.Helper()
	var k struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Namespace  string `json:"namespace"`
		Labels     []struct {
			Pairs            map[string]string `json:"pairs"`
			IncludeSelectors bool              `json:"includeSelectors"`
			IncludeTemplates bool              `json:"includeTemplates"`
		} `json:"labels"`
		Resources []string `json:"resources"`
		Images    []struct {
			Name    string `json:"name"`
			NewName string `json:"newName"`
			NewTag  string `json:"newTag"`
		} `json:"images"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := strictDecode(b, &k); err != nil {
		t.Errorf("k8s/kustomization.yaml: %v", err)
		return
	}
	for _, r := range k.Resources {
		if !slices.Contains(manifests, r) {
			t.Errorf("k8s/kustomization.yaml: resource %s is not a manifest in k8s/", r)
		}
	}
	for _, m := range manifests {
		if !slices.Contains(k.Resources, m) {
			t.Errorf("k8s/kustomization.yaml: does not list %s", m)
		}
	}
	for _, l := range k.Labels {
		if l.IncludeSelectors {
			t.Errorf("k8s/kustomization.yaml: labels with includeSelectors change selectors, which are immutable on a live StatefulSet")
		}
	}
	for _, img := range k.Images {
		if d.df.byName[strings.TrimPrefix(img.Name, "byzlog/")] == nil {
			t.Errorf("k8s/kustomization.yaml: image %s is no Dockerfile target", img.Name)
		}
	}
}

// natsValues is what checkNATSValues read: the client Service's name (the
// Helm release in the install command it documents) and port, whether
// clients must speak TLS, and the values themselves.
type natsValues struct {
	release string
	port    int
	tls     bool
	get     func(keys ...string) any
}

// checkNATSValues checks nats-values.yaml on its own; checkK8sTLS checks
// it against bootstrap.sh's Secrets and the localnet.
func (d *deployment) checkNATSValues(t *testing.T, dir string) natsValues {
	t.Helper()
	file := filepath.Join(dir, "nats-values.yaml")
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := sigsyaml.Unmarshal(b, &v); err != nil {
		t.Fatalf("k8s/nats-values.yaml: %v", err)
	}
	get := func(keys ...string) any {
		var cur any = v
		for _, k := range keys {
			m, ok := cur.(map[string]any)
			if !ok {
				return nil
			}
			cur = m[k]
		}
		return cur
	}
	out := natsValues{get: get, tls: get("config", "nats", "tls", "enabled") == true}
	if !out.tls {
		t.Errorf("k8s/nats-values.yaml: config.nats.tls.enabled must be true: records and passwords cross the client port")
	}
	if get("config", "cluster", "enabled") == true && (get("config", "cluster", "tls", "enabled") != true || get("config", "cluster", "tls", "merge", "verify") != true) {
		t.Errorf("k8s/nats-values.yaml: config.cluster.tls.enabled and config.cluster.tls.merge.verify must be true: routes carry every record, and an unverified peer could join as a route")
	}
	// The chart's monitoring listens on every address, unauthenticated.
	if get("config", "monitor", "enabled") != false {
		t.Errorf("k8s/nats-values.yaml: config.monitor.enabled must be false (the chart's default, true, serves monitoring on every address); put it on loopback with config.merge.http")
	}
	mon, _ := get("config", "merge", "http").(string)
	if mon != "" {
		if h, _, err := net.SplitHostPort(mon); err != nil || !loopback(h) {
			t.Errorf("k8s/nats-values.yaml: config.merge.http %q: monitoring must listen on loopback only", mon)
		}
	}
	for _, kind := range []string{"startupProbe", "readinessProbe", "livenessProbe"} {
		cmd, _ := get("container", "merge", kind, "exec", "command").([]any)
		var args []string
		for _, a := range cmd {
			s, _ := a.(string)
			args = append(args, s)
		}
		pr, err := probeCommand(kind, args)
		switch {
		case err != nil:
			t.Errorf("k8s/nats-values.yaml: container.merge.%s: %v (the chart's own probes need config.monitor)", kind, err)
		case mon == "" || net.JoinHostPort(pr.host, strconv.Itoa(pr.port)) != mon || pr.path != "/healthz":
			t.Errorf("k8s/nats-values.yaml: container.merge.%s dials %s:%d%s; monitoring is at %q (config.merge.http), /healthz", kind, pr.host, pr.port, pr.path, mon)
		}
	}
	for _, keys := range [][]string{
		{"config", "jetstream", "enabled"},
		{"config", "jetstream", "fileStore", "enabled"},
		{"config", "jetstream", "fileStore", "pvc", "enabled"},
	} {
		if get(keys...) != true {
			t.Errorf("k8s/nats-values.yaml: %s must be true (JetStream on file storage, on a PVC)", strings.Join(keys, "."))
		}
	}
	if tag, _ := get("container", "image", "tag").(string); strings.TrimSuffix(tag, "-alpine") != d.pins.nats {
		t.Errorf("k8s/nats-values.yaml: container.image.tag %q, but the Makefile pins nats-server v%s", tag, d.pins.nats)
	}
	port := 4222 // the chart's default
	if p, ok := get("config", "nats", "port").(float64); ok {
		port = int(p)
	}
	out.port = port
	m := regexp.MustCompile(`helm (?:install|upgrade --install) (\S+) nats/nats`).FindSubmatch(b)
	if m == nil {
		t.Errorf("k8s/nats-values.yaml: document the `helm install RELEASE nats/nats` command: the release names the Service the indexer dials")
		return out
	}
	out.release = string(m[1])
	return out
}

// checkK8sObjects checks Services, the autoscaler and the disruption budgets
// against the workloads, and the indexer against the NATS cluster.
func (d *deployment) checkK8sObjects(t *testing.T, objs []k8sObject, nw *k8sNetwork) {
	natsReplicas := 1
	if b, err := os.ReadFile(filepath.Join(d.dep, "k8s", "nats-values.yaml")); err == nil {
		var v struct {
			Config struct {
				Cluster struct {
					Enabled  bool `json:"enabled"`
					Replicas int  `json:"replicas"`
				} `json:"cluster"`
			} `json:"config"`
		}
		if sigsyaml.Unmarshal(b, &v) == nil && v.Config.Cluster.Enabled {
			natsReplicas = v.Config.Cluster.Replicas
		}
	}
	for _, o := range objs {
		switch x := o.obj.(type) {
		case *corev1.Service:
			var sel []*workload
			for _, w := range nw.workloads {
				if selects(x.Spec.Selector, w.labels) {
					sel = append(sel, w)
				}
			}
			if len(sel) == 0 {
				t.Errorf("k8s/%s: Service %s selects no pod (selector %v)", o.file, x.Name, x.Spec.Selector)
				continue
			}
			for _, sp := range x.Spec.Ports {
				if _, err := nw.dial(&container{where: "Service " + x.Name, pod: "(outside)"}, x.Name, int(sp.Port)); err != nil {
					t.Errorf("k8s/%s: Service %s port %s: %v", o.file, x.Name, sp.Name, err)
				}
			}
		case *autoscalingv2.HorizontalPodAutoscaler:
			w := nw.workloads[x.Spec.ScaleTargetRef.Name]
			if w == nil || w.kind != x.Spec.ScaleTargetRef.Kind {
				t.Errorf("k8s/%s: HorizontalPodAutoscaler %s scales %s %s, which is not here", o.file, x.Name, x.Spec.ScaleTargetRef.Kind, x.Spec.ScaleTargetRef.Name)
				continue
			}
			if x.Spec.MinReplicas == nil || *x.Spec.MinReplicas < 2 {
				t.Errorf("k8s/%s: HorizontalPodAutoscaler %s: minReplicas below 2 leaves one gateway, a single point of failure", o.file, x.Name)
			}
			for _, c := range w.spec.Containers {
				if c.Resources.Requests.Cpu().IsZero() {
					t.Errorf("k8s/%s: HorizontalPodAutoscaler %s scales on CPU utilization, but container %s requests no CPU", o.file, x.Name, c.Name)
				}
			}
			for _, c := range w.containers {
				if c.binary != "byzlog-gateway" {
					t.Errorf("k8s/%s: HorizontalPodAutoscaler %s scales %s, which runs %s: only the stateless gateways scale freely", o.file, x.Name, w.name, c.binary)
				}
			}
		case *policyv1.PodDisruptionBudget:
			if !slices.ContainsFunc(slices.Collect(maps.Values(nw.workloads)), func(w *workload) bool { return selects(x.Spec.Selector.MatchLabels, w.labels) }) {
				t.Errorf("k8s/%s: PodDisruptionBudget %s selects no pod", o.file, x.Name)
			}
		}
	}
	for _, w := range nw.workloads {
		for _, c := range w.containers {
			if c.binary != "byzlog-indexer" {
				continue
			}
			if w.replicas > 1 {
				t.Errorf("%s: %d replicas share one --id: run a second indexer as its own Deployment with another --id", c.where, w.replicas)
			}
			if r, _ := strconv.Atoi(c.inv.flags["replicas"]); r > natsReplicas {
				t.Errorf("%s: --replicas %d, but the NATS cluster (nats-values.yaml) has %d servers", c.where, r, natsReplicas)
			}
		}
	}
}

// checkK8sBootstrap runs k8s/bootstrap.sh and checks what it writes against
// the StatefulSet: the network's peers are its pods, and every file the pods
// read from the ConfigMap and Secret is in them.
func (d *deployment) checkK8sBootstrap(t *testing.T, ws []*workload, nw *k8sNetwork, configs map[string]map[string][]byte, boot *k8sBoot) {
	sts := boot.sts
	var node, app *container
	for _, c := range sts.containers {
		switch c.binary {
		case "cometbft":
			node = c
		case "byzlog-app":
			app = c
		}
	}
	if node == nil || app == nil {
		t.Fatalf("k8s StatefulSet %s: want a cometbft and a byzlog-app container", sts.name)
	}
	p2pL, _ := node.listenerOf("--p2p.laddr")
	appL, _ := app.listenerOf("--listen")

	tmp := boot.dir
	host := func(i int) string { return fmt.Sprintf("%s-%d.%s", sts.name, i, sts.serviceName) }
	peers := d.checkGenerated(t, tmp, int(sts.replicas), "", host, p2pL.port, appL.port)
	for i, ps := range peers {
		for _, p := range ps {
			tg, err := nw.dial(node, p.host, p.port)
			if err != nil {
				t.Errorf("generated node%d: persistent peer %s:%d: %v", i, p.host, p.port, err)
			} else if l, ok := tg.c.listenerOf("--p2p.laddr"); !ok || l.port != p.port {
				t.Errorf("generated node%d: persistent peer %s:%d is not %s's --p2p.laddr", i, p.host, p.port, tg.c.where)
			}
		}
	}

	// What pod i reads from a ConfigMap or Secret volume must be in it; a
	// script's $i is the pod's ordinal.
	for _, w := range ws {
		vols := map[string]corev1.Volume{}
		for _, v := range w.spec.Volumes {
			vols[v.Name] = v
		}
		keysOf := func(v corev1.Volume) (string, map[string][]byte) {
			switch {
			case v.ConfigMap != nil:
				for _, it := range v.ConfigMap.Items {
					if _, ok := configs["configMap/"+v.ConfigMap.Name][it.Key]; !ok {
						t.Errorf("k8s/%s %s/%s: volume %s takes key %s, which ConfigMap %s lacks", w.file, w.kind, w.name, v.Name, it.Key, v.ConfigMap.Name)
					}
				}
				return "ConfigMap " + v.ConfigMap.Name, configs["configMap/"+v.ConfigMap.Name]
			case v.Secret != nil:
				return "Secret " + v.Secret.SecretName, configs["secret/"+v.Secret.SecretName]
			}
			return "", nil
		}
		for _, c := range w.containers {
			for _, m := range c.mounts {
				v, ok := vols[m.volume]
				if !ok {
					continue
				}
				what, keys := keysOf(v)
				if what == "" {
					continue
				}
				if keys == nil {
					t.Errorf("%s: mounts %s, which neither k8s/ nor bootstrap.sh provides", c.where, what)
					continue
				}
				var texts []string
				for _, pf := range c.paths() {
					texts = append(texts, pf.path)
				}
				texts = append(texts, c.script)
				re := regexp.MustCompile(regexp.QuoteMeta(strings.TrimSuffix(m.target, "/")) + `/([A-Za-z0-9_.${}-]+)`)
				for _, text := range texts {
					for _, ref := range re.FindAllStringSubmatch(text, -1) {
						for ord := 0; ord < int(w.replicas); ord++ {
							key := strings.NewReplacer("${i}", strconv.Itoa(ord), "$i", strconv.Itoa(ord)).Replace(ref[1])
							if _, ok := keys[key]; !ok {
								t.Errorf("%s: reads %s/%s, but %s has no key %s", c.where, m.target, key, what, key)
							}
						}
					}
				}
			}
		}
	}
	// The config and keys in the manifests are the generated nodes'.
	for i := 0; i < int(sts.replicas); i++ {
		for key, file := range map[string]string{
			fmt.Sprintf("configMap/validator-config/config-%d.toml", i):        filepath.Join(tmp, fmt.Sprintf("node%d", i), "config", "config.toml"),
			fmt.Sprintf("secret/validator-keys/node_key-%d.json", i):           filepath.Join(tmp, fmt.Sprintf("node%d", i), "config", "node_key.json"),
			fmt.Sprintf("secret/validator-keys/priv_validator_key-%d.json", i): filepath.Join(tmp, fmt.Sprintf("node%d", i), "config", "priv_validator_key.json"),
			fmt.Sprintf("secret/validator-keys/rpc-%d.pem", i):                 filepath.Join(tmp, fmt.Sprintf("node%d", i), "config", "rpc.pem"),
			fmt.Sprintf("secret/validator-keys/rpc-key-%d.pem", i):             filepath.Join(tmp, fmt.Sprintf("node%d", i), "config", "rpc-key.pem"),
			"configMap/validator-config/genesis.json":                          filepath.Join(tmp, "genesis", "genesis.json"),
			"configMap/validator-config/rpc-ca.pem":                            filepath.Join(tmp, "ca", "ca.pem"),
		} {
			obj, k := path.Dir(key), path.Base(key)
			want, _ := os.ReadFile(file)
			if got := configs[obj][k]; !bytes.Equal(got, want) {
				t.Errorf("bootstrap.sh: %s key %s differs from %s", obj, k, file)
			}
		}
	}
}

// podFile writes what container c reads at p to a temporary file, for the
// checks that take files: a key of the ConfigMap or Secret mounted there,
// or, under a validator's --home, pod 0's file as bootstrap.sh generated
// it.
func podFile(t *testing.T, c *container, nw *k8sNetwork, boot *k8sBoot, configs map[string]map[string][]byte, p string) (string, error) {
	t.Helper()
	if c.binary == "cometbft" {
		if home := c.inv.flags["home"]; strings.HasPrefix(p, home+"/") {
			return filepath.Join(boot.dir, "node0", strings.TrimPrefix(p, home+"/")), nil
		}
	}
	m := c.mountOf(p)
	w := nw.workloads[c.pod]
	if m == nil || w == nil {
		return "", fmt.Errorf("%s: %s is on no volume", c.where, p)
	}
	rel := strings.TrimPrefix(p, strings.TrimSuffix(m.target, "/")+"/")
	for _, v := range w.spec.Volumes {
		if v.Name != m.volume {
			continue
		}
		var keys map[string][]byte
		var what string
		switch {
		case v.Secret != nil:
			what, keys = "Secret "+v.Secret.SecretName, configs["secret/"+v.Secret.SecretName]
		case v.ConfigMap != nil:
			what, keys = "ConfigMap "+v.ConfigMap.Name, configs["configMap/"+v.ConfigMap.Name]
			for _, it := range v.ConfigMap.Items {
				if it.Path == rel {
					rel = it.Key
				}
			}
		}
		b, ok := keys[rel]
		if !ok {
			return "", fmt.Errorf("%s: %s: %s has no key %s", c.where, p, what, rel)
		}
		f := filepath.Join(t.TempDir(), path.Base(rel))
		return f, os.WriteFile(f, b, 0o600)
	}
	return "", fmt.Errorf("%s: %s: volume %s is no ConfigMap or Secret", c.where, p, m.volume)
}

// file0 is podFile, failing the test when the file is not there.
func file0(t *testing.T, c *container, nw *k8sNetwork, boot *k8sBoot, configs map[string]map[string][]byte, p string) string {
	t.Helper()
	f, err := podFile(t, c, nw, boot, configs, p)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// secretFile writes key of Secret name (from bootstrap.sh) to a file.
func secretFile(t *testing.T, configs map[string]map[string][]byte, name, key string) (string, error) {
	b, ok := configs["secret/"+name][key]
	if !ok {
		return "", fmt.Errorf("bootstrap.sh writes no Secret %s with key %s", name, key)
	}
	f := filepath.Join(t.TempDir(), key)
	return f, os.WriteFile(f, b, 0o600)
}

var reEnvRef = regexp.MustCompile(`^<<\s*\$([A-Za-z_][A-Za-z0-9_]*)\s*>>$`)

// checkK8sTLS follows the TLS links of the manifests to what bootstrap.sh
// wrote: the gateways' and the indexer's --nodes to each pod's RPC
// certificate under the name they dial, the validators' readiness check to
// its CA, the indexer's --nats to the certificate nats-values.yaml serves,
// the NATS servers' routes to each other, and each NATS user's password
// from the Secret the servers read it from to the one its client holds.
// The NATS permissions are the localnet's, and no ConfigMap or Secret
// holds the CA's key.
func (d *deployment) checkK8sTLS(t *testing.T, cs []*container, nw *k8sNetwork, boot *k8sBoot, configs map[string]map[string][]byte, v natsValues) {
	file := func(c *container, p string) string {
		f, err := podFile(t, c, nw, boot, configs, p)
		if err != nil {
			t.Error(err)
		}
		return f
	}
	rpcCert := func(host string) (string, string, error) {
		m := rePodDNS.FindStringSubmatch(host)
		if m == nil {
			return "", "", fmt.Errorf("%s is no pod of the StatefulSet", host)
		}
		cfg, err := readCometConfig(filepath.Join(boot.dir, "node"+m[2]))
		if err != nil {
			return "", "", err
		}
		if !cfg.RPC.IsTLSEnabled() {
			return "", "", fmt.Errorf("node%s serves RPC in plaintext", m[2])
		}
		return cfg.RPC.CertFile(), cfg.RPC.KeyFile(), nil
	}
	str := func(keys ...string) string { s, _ := v.get(keys...).(string); return s }
	orDefault := func(s, def string) string {
		if s == "" {
			return def
		}
		return s
	}
	natsCert := func(section string) (cert, key string, err error) {
		secret := str("config", section, "tls", "secretName")
		if cert, err = secretFile(t, configs, secret, orDefault(str("config", section, "tls", "cert"), "tls.crt")); err != nil {
			return
		}
		key, err = secretFile(t, configs, secret, orDefault(str("config", section, "tls", "key"), "tls.key"))
		return
	}
	users := natsUsers(v.get("config", "merge", "accounts"))
	// password is user's password as the NATS servers read it: an
	// environment variable from a Secret.
	password := func(user string) (string, error) {
		u := users[user]
		ref, _ := u["password"].(string)
		m := reEnvRef.FindStringSubmatch(ref)
		if m == nil {
			return "", fmt.Errorf("user %s: password %q: want \"<< $VAR >>\", VAR from a Secret in container.env (a password here is in the chart's ConfigMap)", user, ref)
		}
		sk, _ := v.get("container", "env", m[1], "valueFrom", "secretKeyRef").(map[string]any)
		name, _ := sk["name"].(string)
		key, _ := sk["key"].(string)
		b, ok := configs["secret/"+name][key]
		if !ok {
			return "", fmt.Errorf("user %s: container.env %s: no secretKeyRef to a Secret bootstrap.sh writes (got %v)", user, m[1], sk)
		}
		t.Setenv(m[1], string(b)) // as the pod's environment has it
		pw := strings.TrimSpace(string(b))
		parsed, err := conf.Parse("password: $" + m[1])
		if err != nil || parsed["password"] != pw {
			return "", fmt.Errorf("user %s: NATS reads $%s as %#v, not the password in Secret %s (%v)", user, m[1], parsed["password"], name, err)
		}
		return pw, nil
	}

	for _, c := range cs {
		f := c.inv.flags
		if c.binary == "cometbft" {
			for _, pr := range c.probes {
				if pr.ca == "" {
					continue
				}
				cert, key, err := rpcCert(fmt.Sprintf("%s-0.%s", boot.sts.name, boot.sts.serviceName))
				if err == nil {
					err = checkCert(file(c, pr.ca), cert, key, pr.host)
				}
				if err != nil {
					t.Errorf("%s: the %s probe would fail: %v", c.where, pr.kind, err)
				}
			}
		}
		if c.binary != "byzlog-gateway" && c.binary != "byzlog-indexer" {
			continue
		}
		ca := file(c, f["node-tls-ca"])
		for _, node := range strings.Split(f["nodes"], ",") {
			u, err := url.Parse(node)
			if err != nil {
				continue // checkAddresses says so
			}
			cert, key, err := rpcCert(u.Hostname())
			if err == nil {
				err = checkCert(ca, cert, key, u.Hostname())
			}
			if err != nil {
				t.Errorf("%s: --nodes %s with --node-tls-ca %s: %v", c.where, node, f["node-tls-ca"], err)
			}
		}
		if c.binary == "byzlog-gateway" {
			for name, svc := range nw.services {
				if selects(svc.Spec.Selector, nw.workloads[c.pod].labels) {
					if err := checkCert(ca, file(c, f["tls-cert"]), file(c, f["tls-key"]), name); err != nil {
						t.Errorf("%s: --tls-cert, for clients of Service %s: %v", c.where, name, err)
					}
				}
			}
			continue
		}
		for _, n := range strings.Split(f["nats"], ",") {
			u, err := url.Parse(n)
			if err != nil {
				continue
			}
			cert, key, err := natsCert("nats")
			if err == nil {
				err = checkCert(file(c, f["nats-tls-ca"]), cert, key, u.Hostname())
			}
			if err != nil {
				t.Errorf("%s: --nats %s with --nats-tls-ca %s, against config.nats.tls of nats-values.yaml: %v", c.where, n, f["nats-tls-ca"], err)
			}
		}
		pw, err := password(f["nats-user"])
		if err == nil {
			if b, rerr := os.ReadFile(file(c, f["nats-password-file"])); rerr != nil || strings.TrimSpace(string(b)) != pw {
				err = fmt.Errorf("--nats-password-file %s is not the password the NATS servers read (%v)", f["nats-password-file"], rerr)
			}
		}
		if err != nil {
			t.Errorf("%s: k8s/nats-values.yaml: %v", c.where, err)
		}
	}

	// Routes dial the servers' pods by the headless Service's names.
	if v.get("config", "cluster", "enabled") == true {
		route := fmt.Sprintf("%s-0.%s-headless", v.release, v.release)
		cert, key, err := natsCert("cluster")
		var ca string
		if err == nil {
			ca, err = secretFile(t, configs, str("tlsCA", "secretName"), orDefault(str("tlsCA", "key"), "ca.crt"))
		}
		if err == nil {
			err = checkCert(ca, cert, key, route)
		}
		if err != nil {
			t.Errorf("k8s/nats-values.yaml: the routes to %s, with config.cluster.tls and tlsCA: %v", route, err)
		}
	}
	if pw, err := password(localnet.NATSConsumerUser); err != nil {
		t.Errorf("k8s/nats-values.yaml: %v", err)
	} else if b, _ := os.ReadFile(filepath.Join(boot.dir, "consumer", "nats.password")); strings.TrimSpace(string(b)) != pw {
		t.Errorf("k8s/nats-values.yaml: user consumer's password is not the one in bootstrap.sh's consumer/nats.password")
	}
	checkNATSAccounts(t, "k8s/nats-values.yaml config.merge.accounts", v.get("config", "merge", "accounts"), staticNATSAccountsWant(t, "BYZLOG"))

	// One NATS server as the chart configures it from these values, on
	// loopback, with the Secrets bootstrap.sh writes.
	for _, c := range cs {
		if c.binary != "byzlog-indexer" {
			continue
		}
		f := c.inv.flags
		cert, key, err := natsCert("nats")
		if err != nil {
			t.Errorf("k8s/nats-values.yaml: %v", err)
			break
		}
		var accounts bytes.Buffer
		enc := json.NewEncoder(&accounts)
		enc.SetEscapeHTML(false) // NATS reads no \u escapes
		if err := enc.Encode(v.get("config", "merge", "accounts")); err != nil {
			t.Fatal(err)
		}
		port := freePorts(t, 1)[0]
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		text := fmt.Sprintf("listen: %q\njetstream { store_dir: %q }\ntls { cert_file: %q, key_file: %q }\naccounts: %s\n",
			addr, t.TempDir(), cert, key, regexp.MustCompile(`"<<\s+(.*?)\s+>>"`).ReplaceAll(accounts.Bytes(), []byte("$1")))
		file := filepath.Join(t.TempDir(), "nats.conf")
		if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		startProc(t, "nats-server", addr, "--config", file) // the passwords come from the environment, as in the chart's pods
		checkNATSUsers(t, "tls://"+addr,
			natsCreds{user: f["nats-user"], password: readPassword(t, file0(t, c, nw, boot, configs, f["nats-password-file"])), ca: file0(t, c, nw, boot, configs, f["nats-tls-ca"])},
			natsCreds{user: localnet.NATSConsumerUser, password: readPassword(t, filepath.Join(boot.dir, "consumer", "nats.password")), ca: filepath.Join(boot.dir, "consumer", "ca.pem")},
			nil)
		break
	}

	caKey, err := os.ReadFile(filepath.Join(boot.dir, "ca", "ca-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	for name, keys := range configs {
		for k, b := range keys {
			if bytes.Contains(b, bytes.TrimSpace(caKey)) {
				t.Errorf("%s key %s holds the CA's key: whoever reads it can pose as any node, gateway or NATS server", name, k)
			}
		}
	}
}
