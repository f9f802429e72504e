package manifests_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/manifests"
	"github.com/opkit-dev/opkit/internal/runners"
)

const runnersFixture = "testdata/runners"

// copyDir copies a fixture's directory into a temporary one, modes kept,
// so that a test may change it.
func copyDir(t *testing.T, from string) string {
	t.Helper()
	to := t.TempDir()
	err := filepath.WalkDir(from, func(p string, e os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		if e.IsDir() {
			return os.MkdirAll(filepath.Join(to, rel), 0o755)
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(to, rel), data, info.Mode().Perm())
	})
	if err != nil {
		t.Fatal(err)
	}
	return to
}

func runnerManifests(t *testing.T, dir string, opts manifests.Options) *manifests.Manifests {
	t.Helper()
	defs, err := definition.CompileFiles(filepath.Join(dir, "operator.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := manifests.New(defs, opts)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func objectsOf(t *testing.T, m *manifests.Manifests) map[string]*unstructured.Unstructured {
	t.Helper()
	objs, err := m.Objects()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		out[o.GetKind()+"/"+o.GetName()] = o
	}
	return out
}

func configMap(t *testing.T, objs map[string]*unstructured.Unstructured, name string) *corev1.ConfigMap {
	t.Helper()
	u := objs["ConfigMap/"+name]
	if u == nil {
		t.Fatalf("no ConfigMap %s among %v", name, keys(objs))
	}
	cm := &corev1.ConfigMap{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, cm); err != nil {
		t.Fatal(err)
	}
	return cm
}

func TestARunnerPerOperatorAndImageIsRestrictedAndGetsTheAgentFilesCAAndItsOwnToken(t *testing.T) {
	m := runnerManifests(t, runnersFixture, manifests.Options{Version: "v1.4.0"})
	objs := objectsOf(t, m)
	python, alpine := manifests.RunnerName("notes", "python:3.12-slim"), manifests.RunnerName("notes", "alpine:3.20")
	// sha256("python:3.12-slim") begins 1d044754.
	if python != "notes-runner-1d044754" || !strings.HasPrefix(alpine, "notes-runner-") || len(alpine) != len(python) || python == alpine {
		t.Errorf("runner names %s and %s; want OPERATOR-runner-<8 hex of sha256(image)>", python, alpine)
	}
	var runners []string
	for k := range objs {
		if strings.HasPrefix(k, "Deployment/notes-runner-") {
			runners = append(runners, k)
		}
	}
	slices.Sort(runners)
	want := []string{"Deployment/" + python, "Deployment/" + alpine}
	slices.Sort(want)
	if !slices.Equal(runners, want) {
		t.Fatalf("runner Deployments %v; want one per image: %v", runners, want)
	}

	d := deployment(t, objs, python)
	pod := d.Spec.Template.Spec
	if pod.ServiceAccountName != "opkit-runner-notes" || pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Errorf("runner ServiceAccount %q, automount %v; want opkit-runner-notes, false", pod.ServiceAccountName, pod.AutomountServiceAccountToken)
	}
	psc := pod.SecurityContext
	if !*psc.RunAsNonRoot || *psc.RunAsUser != 65532 || *psc.RunAsGroup != 65532 || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod security %+v: want non-root 65532:65532, RuntimeDefault", psc)
	}
	for _, c := range append(append([]corev1.Container{}, pod.InitContainers...), pod.Containers...) {
		sc := c.SecurityContext
		if sc == nil || *sc.AllowPrivilegeEscalation || !*sc.RunAsNonRoot || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("container %s: security %+v: not restricted", c.Name, sc)
		}
	}
	if len(pod.InitContainers) != 1 || len(pod.Containers) != 1 {
		t.Fatalf("%d init containers and %d containers; want an agent and a runner", len(pod.InitContainers), len(pod.Containers))
	}
	agent, runner := pod.InitContainers[0], pod.Containers[0]
	if agent.Name != "agent" || agent.Image != "ghcr.io/opkit-dev/opkit:v1.4.0" || !slices.Equal(agent.Command, []string{"/opkit", "agent", "install", "/opkit-bin"}) {
		t.Errorf("agent: %s %s %v", agent.Name, agent.Image, agent.Command)
	}
	if runner.Name != "runner" || runner.Image != "python:3.12-slim" || !slices.Equal(runner.Command, []string{"/opkit/bin/opkit", "agent", "run"}) {
		t.Errorf("runner: %s %s %v", runner.Name, runner.Image, runner.Command)
	}
	wantArgs := []string{"--engine=https://opkit-runners.opkit.svc:7384", "--operator=notes", "--image=python:3.12-slim", "--files=/opkit/files",
		"--ca-file=/opkit/engine-ca/ca.crt", "--token-file=/var/run/secrets/opkit.dev/runner/token"}
	if !slices.Equal(runner.Args, wantArgs) {
		t.Errorf("runner args %q; want %q", runner.Args, wantArgs)
	}
	if len(runner.Env) != 1 || runner.Env[0].Name != "POD_NAME" || runner.Env[0].ValueFrom.FieldRef.FieldPath != "metadata.name" {
		t.Errorf("runner env %+v; want POD_NAME from metadata.name", runner.Env)
	}

	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = v
	}
	mounts := map[string]string{}
	for _, vm := range runner.VolumeMounts {
		mounts[vm.Name] = vm.MountPath
		if !vm.ReadOnly {
			t.Errorf("the runner mounts %s writable", vm.Name)
		}
	}
	if agent.VolumeMounts[0].Name != "opkit-bin" || volumes["opkit-bin"].EmptyDir == nil || mounts["opkit-bin"] != "/opkit/bin" {
		t.Errorf("opkit-bin: %+v at %s in the runner, %+v in the agent", volumes["opkit-bin"], mounts["opkit-bin"], agent.VolumeMounts)
	}
	if v := volumes["files"]; v.ConfigMap == nil || v.ConfigMap.Name != "notes-files" || mounts["files"] != "/opkit/files" {
		t.Errorf("files: %+v at %s", v, mounts["files"])
	}
	if v := volumes["engine-ca"]; v.ConfigMap == nil || v.ConfigMap.Name != "opkit-runners-ca" || mounts["engine-ca"] != "/opkit/engine-ca" {
		t.Errorf("engine-ca: %+v at %s", v, mounts["engine-ca"])
	}
	if v := volumes["token"]; v.Projected == nil || len(v.Projected.Sources) != 1 || mounts["token"] != "/var/run/secrets/opkit.dev/runner" {
		t.Errorf("token: %+v at %s", v, mounts["token"])
	} else if tok := v.Projected.Sources[0].ServiceAccountToken; tok == nil || tok.Audience != "opkit.dev/runner" || *tok.ExpirationSeconds != 3600 || tok.Path != "token" {
		t.Errorf("token projection %+v; want audience opkit.dev/runner, 3600s, path token", tok)
	}
	if len(d.Spec.Template.Annotations[manifests.FilesHashAnnotation]) != 64 {
		t.Errorf("no files hash on the runner's template: %v", d.Spec.Template.Annotations)
	}
	// The engine's Deployment and Service never select a runner.
	engine := deployment(t, objs, "opkit")
	for k, v := range engine.Spec.Selector.MatchLabels {
		if d.Spec.Template.Labels[k] != v {
			return
		}
	}
	t.Errorf("the engine's selector %v selects the runner's Pods %v", engine.Spec.Selector.MatchLabels, d.Spec.Template.Labels)
}

func TestRunnersServiceAccountHasNoRightsAndNoMountedToken(t *testing.T) {
	objs := objectsOf(t, runnerManifests(t, runnersFixture, manifests.Options{}))
	sa := objs["ServiceAccount/opkit-runner-notes"]
	if sa == nil {
		t.Fatalf("no ServiceAccount opkit-runner-notes among %v", keys(objs))
	}
	if v, _, _ := unstructured.NestedBool(sa.Object, "automountServiceAccountToken"); v {
		t.Errorf("the runner's ServiceAccount mounts its token")
	}
	for k, o := range objs {
		if o.GetKind() != "RoleBinding" && o.GetKind() != "ClusterRoleBinding" {
			continue
		}
		b := &rbacv1.RoleBinding{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, b); err != nil {
			t.Fatal(err)
		}
		for _, s := range b.Subjects {
			if s.Name == "opkit-runner-notes" {
				t.Errorf("%s binds the runner's ServiceAccount", k)
			}
		}
	}
}

func TestEngineServesTheRunnerAPIWithTheRightsItNeeds(t *testing.T) {
	m := runnerManifests(t, runnersFixture, manifests.Options{Name: "ops", Namespace: "tools"})
	objs := objectsOf(t, m)
	c := deployment(t, objs, "ops").Spec.Template.Spec.Containers[0]
	args := strings.Join(c.Args, " ")
	if !strings.Contains(args, "--runners-addr :7384 --runners-service opkit-runners --runners-endpointslice opkit-runners") {
		t.Errorf("engine args %q lack --runners-addr :7384 --runners-service opkit-runners --runners-endpointslice opkit-runners", args)
	}
	if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "runners" && p.ContainerPort == 7384 }) {
		t.Errorf("engine ports %+v lack runners", c.Ports)
	}
	if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
		return e.Name == "POD_IP" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "status.podIP"
	}) {
		t.Errorf("engine env %+v lacks POD_IP, which it writes to the runners' EndpointSlice", c.Env)
	}
	// The runners reach the acting replica only: their Service selects no
	// Pods, its EndpointSlice is made empty for the engine to write, and
	// the runners dial it by the name its certificate has.
	svc := &corev1.Service{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(objs["Service/opkit-runners"].Object, svc); err != nil {
		t.Fatal(err)
	}
	if len(svc.Spec.Selector) != 0 || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Name != "runners" || svc.Spec.Ports[0].Port != 7384 || svc.Spec.Ports[0].TargetPort.IntValue() != 7384 {
		t.Errorf("the runners' Service %+v: want no selector and the one port runners 7384", svc.Spec)
	}
	slice := objs["EndpointSlice/opkit-runners"]
	if slice == nil || slice.GetLabels()["kubernetes.io/service-name"] != "opkit-runners" || slice.Object["endpoints"] != nil || slice.Object["ports"] != nil {
		t.Errorf("the runners' EndpointSlice %v: want one of the Service opkit-runners, with no endpoints and no ports", slice)
	}
	engineSvc := &corev1.Service{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(objs["Service/ops"].Object, engineSvc); err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(engineSvc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == "runners" }) {
		t.Errorf("the engine's Service %+v has a runners port, which would reach standbys", engineSvc.Spec.Ports)
	}
	for _, image := range []string{"python:3.12-slim", "alpine:3.20"} {
		runner := deployment(t, objs, manifests.RunnerName("notes", image)).Spec.Template.Spec.Containers[0]
		if !slices.Contains(runner.Args, "--engine=https://opkit-runners.tools.svc:7384") {
			t.Errorf("the runner of %s dials %q; want https://opkit-runners.tools.svc:7384, which the engine's certificate names", image, runner.Args)
		}
	}
	if objs["Secret/opkit-runners-tls"] == nil || objs["ConfigMap/opkit-runners-ca"] == nil {
		t.Errorf("no empty certificate Secret or CA ConfigMap for the engine to fill: %v", keys(objs))
	}
	has := func(rules []rbacv1.PolicyRule, group, resource, name string, verbs ...string) bool {
		return slices.ContainsFunc(rules, func(r rbacv1.PolicyRule) bool {
			return slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource) &&
				(name == "" && len(r.ResourceNames) == 0 || slices.Contains(r.ResourceNames, name)) &&
				!slices.ContainsFunc(verbs, func(v string) bool { return !slices.Contains(r.Verbs, v) })
		})
	}
	cluster, engine := manifests.PolicyRules(m.Rules.Cluster), manifests.PolicyRules(m.Rules.Engine)
	if !has(cluster, "authentication.k8s.io", "tokenreviews", "", "create") {
		t.Errorf("no create of tokenreviews: %+v", cluster)
	}
	if !has(engine, "", "secrets", "opkit-runners-tls", "get", "update") || !has(engine, "", "configmaps", "opkit-runners-ca", "get", "update") {
		t.Errorf("no get and update of the runners' Secret and CA ConfigMap by name in the engine's namespace: %+v", engine)
	}
	if !has(engine, "discovery.k8s.io", "endpointslices", "opkit-runners", "get", "update", "patch") {
		t.Errorf("no get, update and patch of the runners' EndpointSlice by name in the engine's namespace: %+v", engine)
	}
	for _, r := range engine {
		if (slices.Contains(r.Resources, "secrets") || slices.Contains(r.Resources, "configmaps")) && len(r.ResourceNames) == 0 {
			t.Errorf("a rule on %v not limited by name: %+v", r.Resources, r)
		}
	}
	// Without an image, none of it.
	printer := objects(t, manifests.Options{}, "printer")
	if printer["Secret/opkit-runners-tls"] != nil || strings.Contains(strings.Join(deployment(t, printer, "opkit").Spec.Template.Spec.Containers[0].Args, " "), "--runners-addr") {
		t.Errorf("runners served for an operator without exec handlers in images")
	}
}

func TestRunnerFilesAreTheDefinitionsDirectoryWithoutCredentials(t *testing.T) {
	m := runnerManifests(t, runnersFixture, manifests.Options{})
	objs := objectsOf(t, m)
	cm := configMap(t, objs, "notes-files")
	items := map[string]corev1.KeyToPath{}
	for _, it := range deployment(t, objs, manifests.RunnerName("notes", "alpine:3.20")).Spec.Template.Spec.Volumes[1].ConfigMap.Items {
		items[it.Path] = it
	}
	for _, p := range []string{"notify.py", "lib/helpers.py", "requirements.txt", "bin/archive.sh", "bin/run.sh", "operator.yaml"} {
		it, ok := items[p]
		if !ok {
			t.Errorf("%s is not in the runner's files: %v", p, items)
			continue
		}
		want, err := os.ReadFile(filepath.Join(runnersFixture, p))
		if err != nil {
			t.Fatal(err)
		}
		if cm.Data[it.Key] != string(want) {
			t.Errorf("%s (key %s): %q; want the file", p, it.Key, cm.Data[it.Key])
		}
	}
	if it := items["bin/archive.sh"]; it.Mode == nil || *it.Mode != 0o755 {
		t.Errorf("an executable script's mode: %v; want 0755", it.Mode)
	}
	if it := items["bin/run.sh"]; it.Mode != nil {
		t.Errorf("a script that is not executable gets mode %o", *it.Mode)
	}
	bin := items["data.bin"]
	if want, _ := os.ReadFile(filepath.Join(runnersFixture, "data.bin")); !bytes.Equal(cm.BinaryData[bin.Key], want) || cm.Data[bin.Key] != "" {
		t.Errorf("data.bin: binaryData %q; want the file's bytes", cm.BinaryData[bin.Key])
	}
	for _, p := range []string{"secret.yaml", ".env"} {
		if _, ok := items[p]; ok {
			t.Errorf("%s, a credential, is given to the runners", p)
		}
	}
	for k, v := range cm.Data {
		if strings.Contains(v, "not-a-real-token") {
			t.Errorf("key %s holds the fixture's credential", k)
		}
	}
	if !slices.ContainsFunc(m.Warnings, func(w string) bool {
		return strings.Contains(w, filepath.Join(runnersFixture, "secret.yaml")) && strings.Contains(w, "Secret")
	}) {
		t.Errorf("no warning that secret.yaml is left out: %q", m.Warnings)
	}
}

func TestAChangedScriptChangesTheRunnersFilesHash(t *testing.T) {
	dir := copyDir(t, runnersFixture)
	hash := func() string {
		objs := objectsOf(t, runnerManifests(t, dir, manifests.Options{}))
		return deployment(t, objs, manifests.RunnerName("notes", "python:3.12-slim")).Spec.Template.Annotations[manifests.FilesHashAnnotation]
	}
	before := hash()
	if again := hash(); again != before {
		t.Fatalf("the hash of unchanged files changed: %s, %s", before, again)
	}
	if err := os.WriteFile(filepath.Join(dir, "lib", "helpers.py"), []byte("def shout(text):\n    return text.upper() + '!'\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if after := hash(); after == before {
		t.Errorf("a changed script left the hash %s", after)
	}
}

func TestFilesPastTheConfigMapLimitAreRefusedNamingTheLargest(t *testing.T) {
	dir := copyDir(t, runnersFixture)
	if err := os.WriteFile(filepath.Join(dir, "model.csv"), bytes.Repeat([]byte("0.5,"), manifests.MaxFilesSize/4), 0o644); err != nil {
		t.Fatal(err)
	}
	defs, err := definition.CompileFiles(filepath.Join(dir, "operator.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = manifests.New(defs, manifests.Options{})
	if err == nil {
		t.Fatal("1 MiB of files and more were accepted")
	}
	for _, s := range []string{"operator notes", "model.csv (1048576 bytes)", "past the 1048576 bytes (1 MiB)", "notes-files"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("the refusal does not say %q: %v", s, err)
		}
	}
}

func TestAHandlerNamingAFileItsRunnersDoNotGetIsRefused(t *testing.T) {
	for _, c := range []struct {
		name, command, want string
	}{
		{"outside the directory", `[python3, ../outside.py]`, `exec.command[1] "../outside.py"`},
		{"a credential", `[python3, ./secret.yaml]`, `secret.yaml, which is not given to runners: it holds a Kubernetes Secret`},
		{"a missing program", `[./nosuch.sh]`, `exec.command[0] "./nosuch.sh"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			dir := filepath.Join(root, "op")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			files := map[string]string{
				filepath.Join(root, "outside.py"): "print(1)\n",
				filepath.Join(dir, "secret.yaml"): "kind: Secret\n",
				filepath.Join(dir, "operator.yaml"): `apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: op}
spec:
  resource:
    group: demo.example.com
    kind: Thing
    versions: [{name: v1, schema: {type: object}}]
  handlers:
  - name: h
    on: [create]
    exec: {image: python:3.12-slim, command: ` + c.command + `}
`,
			}
			for p, s := range files {
				if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			defs, err := definition.CompileFiles(filepath.Join(dir, "operator.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			_, err = manifests.New(defs, manifests.Options{})
			if err == nil || !strings.Contains(err.Error(), "operator op: handler h") || !strings.Contains(err.Error(), c.want) {
				t.Errorf("New: %v; want a refusal naming the handler and %s", err, c.want)
			}
		})
	}
}

func TestImagesArePinnedToTheVersionNeverLatest(t *testing.T) {
	for _, version := range []string{"v1.4.0", "v1.4.0-3-gabc1234-dirty", ""} {
		m := runnerManifests(t, runnersFixture, manifests.Options{Version: version})
		var b bytes.Buffer
		if err := m.WriteManifests(&b); err != nil {
			t.Fatal(err)
		}
		if err := m.WriteValues(&b); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(b.String(), ":latest") {
			t.Errorf("version %q: an image is :latest", version)
		}
		tag, _ := manifests.ImageTag(version)
		if n := strings.Count(b.String(), "ghcr.io/opkit-dev/opkit:"+tag+"\n"); n < 4 {
			t.Errorf("version %q: the engine and the two agents' images in the manifests and the values are ghcr.io/opkit-dev/opkit:%s %d times; want 4", version, tag, n)
		}
	}
}

func TestDevNodeMakesTheEnginesAndTheRunnersPodsTolerateTheDevNodeOnly(t *testing.T) {
	for _, devNode := range []bool{false, true} {
		objs := objectsOf(t, runnerManifests(t, runnersFixture, manifests.Options{Version: "v1.4.0", DevNode: devNode}))
		n := 0
		for k, u := range objs {
			if u.GetKind() != "Deployment" {
				continue
			}
			n++
			got, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "tolerations")
			want := 0
			if devNode {
				want = 1
			}
			if len(got) != want {
				t.Errorf("DevNode %v: %s tolerates %v; want %d toleration", devNode, k, got, want)
				continue
			}
			if devNode && fmt.Sprint(got[0]) != "map[effect:NoSchedule key:opkit.dev/dev-node operator:Exists]" {
				t.Errorf("DevNode: %s tolerates %v; want the dev node's taint", k, got[0])
			}
		}
		if n != 3 {
			t.Errorf("%d Deployments; want the engine's and two runners'", n)
		}
	}
}

// The engine scales the runner Deployments (package runners' Scaler): it
// gets each and gets and updates its scale, by name, in its own namespace,
// and nothing else of apps anywhere.
func TestTheEnginesRoleScalesExactlyTheRunnerDeployments(t *testing.T) {
	m := runnerManifests(t, runnersFixture, manifests.Options{Name: "ops", Namespace: "tools"})
	names := []string{runners.DeploymentName("notes", "alpine:3.20"), runners.DeploymentName("notes", "python:3.12-slim")}
	slices.Sort(names)
	apps := func(rules []rbacv1.PolicyRule) []string {
		var out []string
		for _, r := range rules {
			if !slices.Contains(r.APIGroups, "apps") {
				continue
			}
			names := slices.Clone(r.ResourceNames)
			slices.Sort(names)
			out = append(out, fmt.Sprintf("%v %v %v", r.Resources, r.Verbs, names))
		}
		return out
	}
	want := []string{
		fmt.Sprintf("[deployments] [get] %v", names),
		fmt.Sprintf("[deployments/scale] [get update] %v", names),
	}
	if got := apps(manifests.PolicyRules(m.Rules.Engine)); !slices.Equal(got, want) {
		t.Errorf("the engine's Role grants on apps:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got := apps(manifests.PolicyRules(m.Rules.Cluster)); len(got) != 0 {
		t.Errorf("the ClusterRole grants on apps %v; want nothing", got)
	}
	for ns, rules := range m.Rules.Namespaces {
		if got := apps(manifests.PolicyRules(rules)); len(got) != 0 {
			t.Errorf("the Role of %s grants on apps %v; want nothing", ns, got)
		}
	}
}
