//go:build e2e

package e2e

import (
	"bytes"
	"context"
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

	"github.com/nats-io/nats.go"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	kjson "sigs.k8s.io/json"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/byzlog/byzlog/indexer/natsauth"
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
	kube             map[*container]corev1.Container // each container's own spec
	initOnly         map[*container]bool             // plain init containers: run to completion first
	// The NATS release's pods (natsPod): the chart's nats container runs
	// nats-server as natsConf says, and the chart provides chartVolumes.
	chart        bool
	natsConf     map[string]any
	chartVolumes map[string]bool
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
	// The NATS servers' pods, with the indexer beside each (nats-values.yaml).
	if w := d.natsPod(t, values); w != nil {
		ws = append(ws, w)
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
	t.Run("authz", func(t *testing.T) { d.checkK8sAuthz(t, nw, boot, configs, values) })
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
	w.kube, w.initOnly = map[*container]corev1.Container{}, map[*container]bool{}
	var out []*container
	all := append(slices.Clone(w.spec.InitContainers), w.spec.Containers...)
	for i, kc := range all {
		init := i < len(w.spec.InitContainers)
		sidecar := init && kc.RestartPolicy != nil && *kc.RestartPolicy == corev1.ContainerRestartPolicyAlways
		where := fmt.Sprintf("k8s/%s %s/%s container %s", w.file, w.kind, w.name, kc.Name)
		if init && !sidecar {
			where = fmt.Sprintf("k8s/%s %s/%s init container %s", w.file, w.kind, w.name, kc.Name)
		}
		// The chart's own nats container runs its image's nats-server
		// with the chart's args.
		chartNATS := w.chart && !init && kc.Name == natsContainer
		req := kc.Resources.Requests
		if req.Cpu().IsZero() || req.Memory().IsZero() {
			t.Errorf("%s: set resources.requests for cpu and memory", where)
		}
		binary := "nats-server"
		if !chartNATS {
			if len(kc.Command) == 0 {
				t.Errorf("%s: set command, so what it runs is stated (and checked)", where)
				continue
			}
			binary = path.Base(kc.Command[0])
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
		}
		c := &container{where: where, binary: binary, declared: map[int]bool{}, pod: w.name, checked: true}
		w.kube[c], w.initOnly[c] = kc, init && !sidecar
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
		if chartNATS {
			// Its mounts and files are the chart's: only its listeners,
			// ports and probes are checked.
			c.inv, c.natsConf, c.checked = d.invoke(t, where, binary, kc.Args), w.natsConf, false
		} else {
			c.inv = d.invoke(t, where, binary, append(slices.Clone(kc.Command[1:]), kc.Args...))
		}
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
	include string // config.merge's $include, relative to natsChartConfigDir
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
	// The accounts are the file the indexer beside each server keeps
	// (checkK8sAuthz): the chart turns a key ending in $include into
	// `include PATH;`, unquoted, relative to its nats.conf.
	merge, _ := get("config", "merge").(map[string]any)
	var incs []string
	for k, val := range merge {
		if strings.HasSuffix(k, "$include") {
			inc, _ := val.(string)
			incs = append(incs, inc)
		}
	}
	switch {
	case len(incs) != 1:
		t.Errorf("k8s/nats-values.yaml: config.merge: want one $include, of the accounts file the indexer beside each server keeps (--nats-authz), got %q", incs)
	case incs[0] == "" || path.IsAbs(incs[0]) || strings.ContainsAny(incs[0], " \t;\"'{}"):
		t.Errorf("k8s/nats-values.yaml: config.merge.$include %q: want a path relative to the chart's config directory %s, without spaces or quotes (the chart writes it unquoted; its config reloader resolves it there)", incs[0], natsChartConfigDir)
	default:
		out.include = incs[0]
	}
	if _, ok := merge["accounts"]; ok {
		t.Errorf("k8s/nats-values.yaml: config.merge.accounts: the accounts are the included file the indexers render from the chain (natsauth); static ones would let user consumer read topics that list readers")
	}
	if get("config", "cluster", "enabled") == true && get("config", "cluster", "noAdvertise") != true {
		t.Errorf("k8s/nats-values.yaml: config.cluster.noAdvertise must be true: with the servers' client URLs advertised, an indexer whose server restarts may fail over to another server and from then on reload that one, never its own")
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
			if w.replicas > 1 && !w.fromPodName(c, c.inv.flags["id"]) {
				t.Errorf("%s: %d replicas share --id %s, so one cursor: give each pod its own, its name ($(POD_NAME), from the downward API's metadata.name)", c.where, w.replicas, c.inv.flags["id"])
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
				if !ok || w.chartVolumes[m.volume] {
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

// natsCertFiles are the certificate and key config.<section>.tls of
// nats-values.yaml serves, from the Secret bootstrap.sh writes.
func natsCertFiles(t *testing.T, configs map[string]map[string][]byte, v natsValues, section string) (cert, key string, err error) {
	str := func(keys ...string) string { s, _ := v.get(keys...).(string); return s }
	orDefault := func(s, def string) string {
		if s == "" {
			return def
		}
		return s
	}
	secret := str("config", section, "tls", "secretName")
	if cert, err = secretFile(t, configs, secret, orDefault(str("config", section, "tls", "cert"), "tls.crt")); err != nil {
		return
	}
	key, err = secretFile(t, configs, secret, orDefault(str("config", section, "tls", "key"), "tls.key"))
	return
}

// checkK8sTLS follows the TLS links of the manifests to what bootstrap.sh
// wrote: the gateways' and the indexers' --nodes to each pod's RPC
// certificate under the name they dial, the validators' readiness check to
// its CA, the indexers' --nats to the certificate nats-values.yaml serves,
// the NATS servers' routes to each other; and no ConfigMap or Secret holds
// the CA's key. (The NATS users and passwords: checkK8sAuthz.)
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
			cert, key, err := natsCertFiles(t, configs, v, "nats")
			if err == nil {
				err = checkCert(file(c, f["nats-tls-ca"]), cert, key, u.Hostname())
			}
			if err != nil {
				t.Errorf("%s: --nats %s with --nats-tls-ca %s, against config.nats.tls of nats-values.yaml: %v", c.where, n, f["nats-tls-ca"], err)
			}
		}
	}
	// Consumers dial the Service of the release.
	if cert, key, err := natsCertFiles(t, configs, v, "nats"); err != nil {
		t.Errorf("k8s/nats-values.yaml: %v", err)
	} else if err := checkCert(filepath.Join(boot.dir, "consumer", "ca.pem"), cert, key, v.release); err != nil {
		t.Errorf("k8s/nats-values.yaml: config.nats.tls, for consumers of Service %s with bootstrap.sh's consumer/ca.pem: %v", v.release, err)
	}

	// Routes dial the servers' pods by the headless Service's names.
	if v.get("config", "cluster", "enabled") == true {
		route := fmt.Sprintf("%s-0.%s-headless", v.release, v.release)
		cert, key, err := natsCertFiles(t, configs, v, "cluster")
		var ca string
		if err == nil {
			tlsCAKey := str("tlsCA", "key")
			if tlsCAKey == "" {
				tlsCAKey = "ca.crt"
			}
			ca, err = secretFile(t, configs, str("tlsCA", "secretName"), tlsCAKey)
		}
		if err == nil {
			err = checkCert(ca, cert, key, route)
		}
		if err != nil {
			t.Errorf("k8s/nats-values.yaml: the routes to %s, with config.cluster.tls and tlsCA: %v", route, err)
		}
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

// Chart nats 1.x: its server container's name, and where it mounts the
// nats.conf it renders (ConfigMap <release>-config), which an include is
// relative to.
const (
	natsContainer      = "nats"
	natsChartConfigDir = "/etc/nats-config"
)

// natsPod is a pod of the NATS release's StatefulSet as chart nats 1.x
// renders it from nats-values.yaml, as far as byzlog's values reach it:
// the chart's nats container (name, image, client port, --config, and its
// config and pid volumes) with container.merge and container.patch
// applied, then the pod with podTemplate.merge and podTemplate.patch, as
// the chart applies them (Helm's mergeOverwrite, then JSON Patch), decoded
// strictly. Its nats-server listens as the chart's nats.conf says
// (config.nats.port, TLS, config.merge.http). The routes (checked in
// checkK8sTLS) and the chart's config reloader, which byzlog's containers
// do not use, are left out.
func (d *deployment) natsPod(t *testing.T, v natsValues) *workload {
	t.Helper()
	nats := map[string]any{
		"name":  natsContainer,
		"image": fmt.Sprintf("%v:%v", v.get("container", "image", "repository"), v.get("container", "image", "tag")),
		"ports": []any{map[string]any{"name": "nats", "containerPort": v.port}},
		"args":  []any{"--config", natsChartConfigDir + "/nats.conf"},
		"env":   []any{map[string]any{"name": "POD_NAME", "valueFrom": map[string]any{"fieldRef": map[string]any{"fieldPath": "metadata.name"}}}},
		"volumeMounts": []any{
			map[string]any{"name": "config", "mountPath": natsChartConfigDir},
			map[string]any{"name": "pid", "mountPath": "/var/run/nats"},
		},
	}
	ctr, err := mergePatch(nats, v.get("container", "merge"), v.get("container", "patch"))
	if err != nil {
		t.Errorf("k8s/nats-values.yaml: container: %v", err)
		return nil
	}
	labels := map[string]any{"app.kubernetes.io/name": "nats", "app.kubernetes.io/instance": v.release}
	pod, err := mergePatch(map[string]any{
		"metadata": map[string]any{"labels": labels},
		"spec": map[string]any{
			"containers": []any{ctr},
			"volumes": []any{
				map[string]any{"name": "config", "configMap": map[string]any{"name": v.release + "-config"}},
				map[string]any{"name": "pid", "emptyDir": map[string]any{}},
			},
		},
	}, v.get("podTemplate", "merge"), v.get("podTemplate", "patch"))
	if err != nil {
		t.Errorf("k8s/nats-values.yaml: podTemplate: %v", err)
		return nil
	}
	j, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	var tpl corev1.PodTemplateSpec
	if err := strictDecode(j, &tpl); err != nil {
		t.Errorf("k8s/nats-values.yaml: the NATS server pod, with container.patch and podTemplate.patch: %v", err)
		return nil
	}
	seen := map[string]bool{}
	for _, vol := range tpl.Spec.Volumes {
		if seen[vol.Name] {
			t.Errorf("k8s/nats-values.yaml: the NATS server pod has two volumes named %s", vol.Name)
		}
		seen[vol.Name] = true
	}
	replicas := int32(1)
	if r, ok := v.get("config", "cluster", "replicas").(float64); ok && v.get("config", "cluster", "enabled") == true {
		replicas = int32(r)
	}
	conf := map[string]any{"port": int64(v.port)}
	if v.tls {
		conf["tls"] = map[string]any{}
	}
	if mon, _ := v.get("config", "merge", "http").(string); mon != "" {
		conf["http"] = mon
	}
	return &workload{kind: "StatefulSet", name: v.release, file: "nats-values.yaml", replicas: replicas,
		serviceName: v.release + "-headless", labels: tpl.Labels, spec: tpl.Spec,
		chart: true, natsConf: conf, chartVolumes: map[string]bool{"config": true, "pid": true}}
}

// mergePatch is doc with merge merged over it (Helm's mergeOverwrite:
// maps merge, everything else is replaced) and then patch applied (JSON
// Patch), on a copy: the values stay as they are.
func mergePatch(doc, merge, patch any) (any, error) {
	var out any
	b, err := json.Marshal(map[string]any{"doc": doc, "merge": merge, "patch": patch})
	if err != nil {
		return nil, err
	}
	var cp struct {
		Doc   any   `json:"doc"`
		Merge any   `json:"merge"`
		Patch []any `json:"patch"`
	}
	if err := json.Unmarshal(b, &cp); err != nil {
		return nil, fmt.Errorf("patch: want a list of operations: %w", err)
	}
	out = cp.Doc
	if m, ok := cp.Merge.(map[string]any); ok {
		d, ok := out.(map[string]any)
		if !ok {
			return nil, errors.New("merge into what is no map")
		}
		out = mergeOverwrite(d, m)
	}
	for i, o := range cp.Patch {
		op, _ := o.(map[string]any)
		name, _ := op["op"].(string)
		p, _ := op["path"].(string)
		if !strings.HasPrefix(p, "/") {
			return nil, fmt.Errorf("patch %d: path %q: want a JSON pointer (/a/b)", i, p)
		}
		var keys []string
		for _, k := range strings.Split(p[1:], "/") {
			keys = append(keys, strings.NewReplacer("~1", "/", "~0", "~").Replace(k))
		}
		if out, err = patchAt(out, keys, name, op["value"]); err != nil {
			return nil, fmt.Errorf("patch %d (%s %s): %w", i, name, p, err)
		}
	}
	return out, nil
}

func mergeOverwrite(dst, src map[string]any) map[string]any {
	for k, sv := range src {
		if sm, ok := sv.(map[string]any); ok {
			if dm, ok := dst[k].(map[string]any); ok {
				dst[k] = mergeOverwrite(dm, sm)
				continue
			}
		}
		dst[k] = sv
	}
	return dst
}

// patchAt applies a JSON Patch add, remove or replace at keys below node.
func patchAt(node any, keys []string, op string, value any) (any, error) {
	if op != "add" && op != "remove" && op != "replace" {
		return nil, fmt.Errorf("op %q: the chart's patches here use add, remove or replace", op)
	}
	k, last := keys[0], len(keys) == 1
	switch n := node.(type) {
	case map[string]any:
		child, has := n[k]
		switch {
		case last && op == "add":
			n[k] = value
		case !has:
			return nil, fmt.Errorf("no member %q", k)
		case last && op == "remove":
			delete(n, k)
		case last:
			n[k] = value
		default:
			c, err := patchAt(child, keys[1:], op, value)
			if err != nil {
				return nil, err
			}
			n[k] = c
		}
		return n, nil
	case []any:
		if last && op == "add" && k == "-" {
			return append(n, value), nil
		}
		i, err := strconv.Atoi(k)
		if err != nil || i < 0 || i > len(n) || (i == len(n) && !(last && op == "add")) {
			return nil, fmt.Errorf("no index %q in a list of %d", k, len(n))
		}
		switch {
		case last && op == "add":
			return slices.Insert(n, i, value), nil
		case last && op == "remove":
			return slices.Delete(n, i, i+1), nil
		case last:
			n[i] = value
			return n, nil
		}
		c, err := patchAt(n[i], keys[1:], op, value)
		if err != nil {
			return nil, err
		}
		n[i] = c
		return n, nil
	}
	return nil, fmt.Errorf("%q: below a value that is no object or list", k)
}

var reEnvArg = regexp.MustCompile(`^\$\(([A-Za-z_][A-Za-z0-9_]*)\)$`)

// fromPodName says whether value, an argument of c, is its pod's name:
// $(VAR), which Kubernetes expands from c's env, with VAR from the
// downward API's metadata.name.
func (w *workload) fromPodName(c *container, value string) bool {
	m := reEnvArg.FindStringSubmatch(value)
	if m == nil {
		return false
	}
	for _, e := range w.kube[c].Env {
		if e.Name == m[1] {
			return e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name"
		}
	}
	return false
}

// checkK8sAuthz checks that the NATS servers' read permissions follow the
// topics' readers, as compose's do: every NATS server pod runs one
// byzlog-indexer (checkK8sSidecar), and every byzlog-indexer runs in such
// a pod.
func (d *deployment) checkK8sAuthz(t *testing.T, nw *k8sNetwork, boot *k8sBoot, configs map[string]map[string][]byte, v natsValues) {
	found := false
	for _, w := range nw.workloads {
		var srv *container
		var idxs []*container
		for _, c := range w.containers {
			switch c.binary {
			case "nats-server":
				srv = c
			case "byzlog-indexer":
				idxs = append(idxs, c)
			}
		}
		if w.chart {
			found = true
			if len(idxs) != 1 {
				t.Errorf("k8s/nats-values.yaml: the NATS server pods run %d byzlog-indexer containers, want one beside each server (podTemplate.patch): without it no server's accounts follow the topics' readers, and two would share one file", len(idxs))
			}
		}
		for _, idx := range idxs {
			if srv == nil {
				t.Errorf("%s: runs beside no NATS server: run it in the NATS release's pods (nats-values.yaml podTemplate.patch), where it keeps its server's accounts (--nats-authz)", idx.where)
				continue
			}
			d.checkK8sSidecar(t, w, idx, srv, nw, boot, configs, v)
		}
	}
	if !found {
		t.Errorf("k8s/nats-values.yaml: no NATS server pod to check")
	}
}

// reCopy finds `cp SRC DST` in an init container's script.
var reCopy = regexp.MustCompile(`\bcp\s+(/\S+)\s+(/\S+?);?(?:\s|$)`)

// checkK8sSidecar checks the indexer idx beside the NATS server srv in
// pod w: it dials srv on loopback (it has the server its connection
// reached reload, which must be the one that reads the file it writes);
// the accounts file its --nats-authz spec names is on an emptyDir of the
// pod (one per server) that it mounts writable and srv read-only, at the
// path srv's config includes; a plain init container writes that file
// before nats-server starts, with what indexer/natsauth renders for no
// topic; and the spec's users and passwords are the ones the indexer and
// consumers hold. Then it runs a nats-server configured as the chart
// configures srv, starting from the init container's file, renders and
// reloads the accounts as idx does, and checks the users (checkNATSUsers).
func (d *deployment) checkK8sSidecar(t *testing.T, w *workload, idx, srv *container, nw *k8sNetwork, boot *k8sBoot, configs map[string]map[string][]byte, v natsValues) {
	f := idx.inv.flags
	for _, n := range strings.Split(f["nats"], ",") {
		if u, err := url.Parse(n); err == nil && !loopback(u.Hostname()) {
			t.Errorf("%s: --nats %s: dial this pod's server on loopback: the indexer has the server it is connected to reload, and only this pod's reads the file it writes", idx.where, n)
		}
	}
	if f["nats-authz"] == "" {
		t.Errorf("%s: no --nats-authz: NATS's read permissions would not follow the topics' readers", idx.where)
		return
	}
	specFile, err := podFile(t, idx, nw, boot, configs, f["nats-authz"])
	if err != nil {
		t.Error(err)
		return
	}
	spec, err := natsauthSpec(specFile)
	if err != nil {
		t.Errorf("%s: --nats-authz: %v", idx.where, err)
		return
	}
	// onVolume is where p is for c: the volume and the path on it.
	onVolume := func(c *container, p string) (*mount, string) {
		m := c.mountOf(p)
		if m == nil {
			return nil, ""
		}
		return m, strings.TrimPrefix(strings.TrimPrefix(p, strings.TrimSuffix(m.target, "/")), "/")
	}
	m, rel := onVolume(idx, spec.Conf)
	if m == nil {
		t.Errorf("%s: --nats-authz conf %s is on none of its mounts (%s)", idx.where, spec.Conf, describeMounts(idx.mounts))
		return
	}
	if m.readOnly {
		t.Errorf("%s: --nats-authz conf %s is on a read-only mount: the indexer rewrites it", idx.where, spec.Conf)
	}
	vol := m.volume
	if !slices.ContainsFunc(w.spec.Volumes, func(kv corev1.Volume) bool { return kv.Name == vol && kv.EmptyDir != nil }) {
		t.Errorf("%s: --nats-authz conf %s is on volume %s: want an emptyDir of the pod, which nats-server mounts too (a ConfigMap or Secret is read-only, and the file is this server's alone)", idx.where, spec.Conf, vol)
	}
	included := path.Join(natsChartConfigDir, v.include)
	if v.include != "" {
		sm, srel := onVolume(srv, included)
		switch {
		case sm == nil:
			t.Errorf("%s: its nats.conf includes %s (config.merge.$include), which is on none of its mounts (%s): mount volume %s there (container.patch)", srv.where, included, describeMounts(srv.mounts), vol)
		case sm.volume != vol || srel != rel:
			t.Errorf("%s: its nats.conf includes %s (%s on volume %s), but %s rewrites %s (%s on volume %s): another file", srv.where, included, srel, sm.volume, idx.where, spec.Conf, rel, vol)
		case !sm.readOnly:
			t.Errorf("%s: mounts volume %s, the accounts file's, writable: only the indexer writes it", srv.where, vol)
		}
	}
	want, err := natsauth.Render(spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	initial := ""
	for _, c := range w.containers {
		if !w.initOnly[c] {
			continue
		}
		for _, cp := range reCopy.FindAllStringSubmatch(c.script, -1) {
			dm, drel := onVolume(c, cp[2])
			if dm == nil || dm.volume != vol || drel != rel {
				continue
			}
			if dm.readOnly {
				t.Errorf("%s: copies the accounts file onto a read-only mount", c.where)
			}
			src, err := podFile(t, c, nw, boot, configs, cp[1])
			if err != nil {
				t.Errorf("%s: copies %s into the accounts file: %v", c.where, cp[1], err)
				continue
			}
			initial = readFile(t, src)
			if initial != want {
				t.Errorf("%s: the accounts file it starts the server with (%s) is not what indexer/natsauth renders for no topic with --nats-authz %s, which it must be:\n got:\n%s\n want:\n%s", c.where, cp[1], f["nats-authz"], initial, want)
			}
		}
	}
	if initial == "" {
		t.Errorf("k8s/%s %s/%s: no init container copies the accounts file onto volume %s (cp FILE %s) before nats-server starts, which cannot start without the file it includes", w.file, w.kind, w.name, vol, spec.Conf)
		return
	}
	indexer := natsCreds{user: f["nats-user"], password: readPassword(t, file0(t, idx, nw, boot, configs, f["nats-password-file"])), ca: file0(t, idx, nw, boot, configs, f["nats-tls-ca"])}
	consumer := natsCreds{user: localnet.NATSConsumerUser, password: readPassword(t, filepath.Join(boot.dir, "consumer", "nats.password")), ca: filepath.Join(boot.dir, "consumer", "ca.pem")}
	for _, u := range []struct {
		creds natsCreds
		spec  natsauth.User
		from  string
	}{{indexer, spec.Indexer, "its --nats-user and --nats-password-file"}, {consumer, spec.Consumer, "bootstrap.sh's consumer/nats.password"}} {
		if u.spec.Name != u.creds.user || u.spec.Password != u.creds.password {
			t.Errorf("%s: --nats-authz: user %s with its password, want %s with the password of %s", idx.where, u.spec.Name, u.creds.user, u.from)
		}
	}
	if t.Failed() || v.include == "" {
		return
	}

	// One NATS server as the chart configures srv (client port, TLS with
	// nats-tls, the include as the chart writes it), on loopback, starting
	// from the init container's file.
	cert, key, err := natsCertFiles(t, configs, v, "nats")
	if err != nil {
		t.Error(err)
		return
	}
	root := t.TempDir()
	confFile := filepath.Join(root, filepath.FromSlash(natsChartConfigDir), "nats.conf")
	local := spec
	local.Conf = filepath.Join(root, filepath.FromSlash(included))
	for _, dir := range []string{filepath.Dir(confFile), filepath.Dir(local.Conf)} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	addr := fmt.Sprintf("127.0.0.1:%d", freePorts(t, 1)[0])
	text := fmt.Sprintf("listen: %q\njetstream { store_dir: %q }\ntls { cert_file: %q, key_file: %q }\ninclude %s;\n", addr, t.TempDir(), cert, key, v.include)
	if err := os.WriteFile(confFile, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(local.Conf, []byte(initial), 0o600); err != nil {
		t.Fatal(err)
	}
	startProc(t, "nats-server", addr, "--config", confFile)
	natsURL := "tls://" + addr
	render := func(ctx context.Context, topics []natsauth.Topic) error {
		// As the indexer does: write the file, then have the server its
		// own connection reached reload, through the reloader.
		if err := natsauth.Write(local, topics); err != nil {
			return err
		}
		nc, err := nats.Connect(natsURL, nats.UserInfo(indexer.user, indexer.password), nats.RootCAs(indexer.ca))
		if err != nil {
			return fmt.Errorf("connect as the indexer: %w", err)
		}
		defer nc.Close()
		sys, err := nats.Connect(natsURL, nats.UserInfo(spec.Reloader.Name, spec.Reloader.Password), nats.RootCAs(indexer.ca))
		if err != nil {
			return fmt.Errorf("connect as the reloader: %w", err)
		}
		defer sys.Close()
		return natsauth.Reload(ctx, sys, nc.ConnectedServerId())
	}
	checkNATSUsers(t, natsURL, indexer, consumer, render)
}
