//go:build e2e

package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	kjson "sigs.k8s.io/json"
	sigsyaml "sigs.k8s.io/yaml"
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
				return target{c: c, port: port}, reach(from, c, port)
			}
		}
		return target{}, fmt.Errorf("no container of pod %s listens on port %d", from.pod, port)
	}
	if host == n.natsHost {
		if port != n.natsPort {
			return target{}, fmt.Errorf("the NATS Helm release %s serves clients on port %d (nats-values.yaml config.nats.port), not %d", host, n.natsPort, port)
		}
		return target{external: "the NATS Helm release " + host, port: port}, nil
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
		return target{c: c, port: port}, reach(from, c, port)
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
				return target{c: c, port: tp}, reach(from, c, tp)
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
	nw.natsHost, nw.natsPort = d.checkNATSValues(t, dir)

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

	t.Run("containers", func(t *testing.T) {
		for _, c := range cs {
			checkContainer(t, c, nw)
		}
		checkTopology(t, cs, nw)
	})
	t.Run("objects", func(t *testing.T) { d.checkK8sObjects(t, objs, nw) })
	t.Run("bootstrap", func(t *testing.T) { d.checkK8sBootstrap(t, ws, nw, configs) })
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
		return probe{kind: kind, port: port, path: p.HTTPGet.Path}, err
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

// checkNATSValues checks nats-values.yaml and returns the client Service's
// name (the Helm release in the install command it documents) and port.
func (d *deployment) checkNATSValues(t *testing.T, dir string) (string, int) {
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
	m := regexp.MustCompile(`helm (?:install|upgrade --install) (\S+) nats/nats`).FindSubmatch(b)
	if m == nil {
		t.Errorf("k8s/nats-values.yaml: document the `helm install RELEASE nats/nats` command: the release names the Service the indexer dials")
		return "", port
	}
	return string(m[1]), port
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
func (d *deployment) checkK8sBootstrap(t *testing.T, ws []*workload, nw *k8sNetwork, configs map[string]map[string][]byte) {
	var sts *workload
	for _, w := range ws {
		if w.kind == "StatefulSet" && slices.ContainsFunc(w.containers, func(c *container) bool { return c.binary == "cometbft" }) {
			sts = w
		}
	}
	if sts == nil {
		t.Fatal("k8s: no StatefulSet runs cometbft")
	}
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

	tmp := t.TempDir()
	runScript(t, d, filepath.Join(d.dep, "k8s", "bootstrap.sh"), tmp)
	host := func(i int) string { return fmt.Sprintf("%s-%d.%s", sts.name, i, sts.serviceName) }
	peers := checkGenerated(t, tmp, int(sts.replicas), "", host, p2pL.port, appL.port)
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

	generated, _ := filepath.Glob(filepath.Join(tmp, "k8s", "*.yaml"))
	if len(generated) == 0 {
		t.Fatalf("bootstrap.sh wrote no manifests to %s/k8s", tmp)
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
			"configMap/validator-config/genesis.json":                          filepath.Join(tmp, "genesis", "genesis.json"),
		} {
			obj, k := path.Dir(key), path.Base(key)
			want, _ := os.ReadFile(file)
			if got := configs[obj][k]; !bytes.Equal(got, want) {
				t.Errorf("bootstrap.sh: %s key %s differs from %s", obj, k, file)
			}
		}
	}
}
