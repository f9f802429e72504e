package manifests_test

import (
	"bytes"
	"maps"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/opkit-dev/opkit/internal/manifests"
	"github.com/opkit-dev/opkit/internal/tracing"
)

func objects(t *testing.T, opts manifests.Options, examples ...string) map[string]*unstructured.Unstructured {
	t.Helper()
	m, err := manifests.New(compileExamples(t, examples...), opts)
	if err != nil {
		t.Fatal(err)
	}
	return objectsOf(t, m)
}

func deployment(t *testing.T, objs map[string]*unstructured.Unstructured, name string) *appsv1.Deployment {
	t.Helper()
	u := objs["Deployment/"+name]
	if u == nil {
		t.Fatalf("no Deployment %s among %v", name, keys(objs))
	}
	d := &appsv1.Deployment{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, d); err != nil {
		t.Fatal(err)
	}
	return d
}

func keys(m map[string]*unstructured.Unstructured) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func TestEnginePodIsRestrictedProbedAndRunsTheOperatorsOfTheCluster(t *testing.T) {
	objs := objects(t, manifests.Options{CreateNamespace: true}, "printer")
	for _, k := range []string{"Namespace/opkit", "CustomResourceDefinition/operators.opkit.dev", "ServiceAccount/opkit", "ClusterRole/opkit:opkit",
		"ClusterRoleBinding/opkit:opkit", "Deployment/opkit", "Service/opkit", "Operator/printer"} {
		if objs[k] == nil {
			t.Errorf("no %s among %v", k, keys(objs))
		}
	}
	for _, k := range []string{"PodDisruptionBudget/opkit", "Role/opkit", "ConfigMap/opkit-operators"} {
		if objs[k] != nil {
			t.Errorf("%s with one replica, no leader election, and Operators from the cluster", k)
		}
	}
	d := deployment(t, objs, "opkit")
	pod := d.Spec.Template.Spec
	c := pod.Containers[0]
	sc, psc := c.SecurityContext, pod.SecurityContext
	if !*psc.RunAsNonRoot || *psc.RunAsUser != 65532 || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault ||
		*sc.AllowPrivilegeEscalation || !*sc.ReadOnlyRootFilesystem || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("not the restricted pod security: pod %+v, container %+v", psc, sc)
	}
	if want := []string{"run", "--metrics-addr", ":7381", "--hooks-addr", ":7382"}; !slices.Equal(c.Args, want) {
		t.Errorf("args %q, want %q", c.Args, want)
	}
	if c.LivenessProbe.HTTPGet.Path != "/healthz" || c.ReadinessProbe.HTTPGet.Path != "/readyz" || c.ReadinessProbe.HTTPGet.Port.String() != "metrics" {
		t.Errorf("probes %+v, %+v", c.LivenessProbe, c.ReadinessProbe)
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	if env["POD_NAMESPACE"].ValueFrom.FieldRef.FieldPath != "metadata.namespace" || env["OPKIT_ARCHIVE"].Value != manifests.SQLitePath {
		t.Errorf("env %+v", c.Env)
	}
	if pod.ServiceAccountName != "opkit" || d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType || pod.Affinity != nil {
		t.Errorf("service account %q, strategy %q, affinity %+v", pod.ServiceAccountName, d.Spec.Strategy.Type, pod.Affinity)
	}
	if got := objs["Service/opkit"].Object["spec"].(map[string]any)["ports"].([]any); len(got) != 1 {
		t.Errorf("Service ports %v; want metrics alone (no source, no console)", got)
	}
}

func TestReplicasShareAPostgreSQLArchiveElectALeaderAndSpread(t *testing.T) {
	objs := objects(t, manifests.Options{Replicas: 3, ArchiveSecret: "opkit-db", AllowHostExec: true}, "deploy-notifier")
	d := deployment(t, objs, "opkit")
	c := d.Spec.Template.Spec.Containers[0]
	if !slices.Contains(c.Args, "--leader-elect") || *d.Spec.Replicas != 3 {
		t.Errorf("args %q, replicas %d", c.Args, *d.Spec.Replicas)
	}
	archive := c.Env[slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "OPKIT_ARCHIVE" })]
	if ref := archive.ValueFrom.SecretKeyRef; ref == nil || ref.Name != "opkit-db" || ref.Key != "dsn" {
		t.Errorf("OPKIT_ARCHIVE %+v", archive)
	}
	if slices.ContainsFunc(d.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == "archive" }) {
		t.Errorf("a SQLite volume beside a PostgreSQL archive")
	}
	aa := d.Spec.Template.Spec.Affinity.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution
	if len(aa) != 1 || aa[0].PodAffinityTerm.TopologyKey != "kubernetes.io/hostname" {
		t.Errorf("anti-affinity %+v", aa)
	}
	pdb := &policyv1.PodDisruptionBudget{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(objs["PodDisruptionBudget/opkit"].Object, pdb); err != nil {
		t.Fatal(err)
	}
	if pdb.Spec.MaxUnavailable.IntValue() != 1 {
		t.Errorf("PodDisruptionBudget %+v", pdb.Spec)
	}
	if objs["Role/opkit"] == nil {
		t.Errorf("no Role for the Lease")
	}
	if ports := objs["Service/opkit"].Object["spec"].(map[string]any)["ports"].([]any); len(ports) != 1 {
		t.Errorf("Service ports %v; want metrics alone: deliveries have their own Service", ports)
	}
}

// TestWebhookDeliveriesHaveAServiceOfTheLeaderAlone: with a source, the
// hooks Service selects no Pods, its EndpointSlice is made empty (the
// acting replica writes itself there), the engine is told to and given
// its Pod's address, and may get and change that one slice only.
func TestWebhookDeliveriesHaveAServiceOfTheLeaderAlone(t *testing.T) {
	objs := objects(t, manifests.Options{Replicas: 2, ArchiveSecret: "opkit-db", AllowHostExec: true}, "deploy-notifier")
	svc := &corev1.Service{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(objs["Service/opkit-hooks"].Object, svc); err != nil {
		t.Fatal(err)
	}
	if svc.Spec.Selector != nil || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Name != "hooks" || svc.Spec.Ports[0].Port != 7382 {
		t.Errorf("hooks Service %+v; want port hooks 7382 and no selector", svc.Spec)
	}
	slice := &discoveryv1.EndpointSlice{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(objs["EndpointSlice/opkit-hooks"].Object, slice); err != nil {
		t.Fatal(err)
	}
	if slice.Labels[discoveryv1.LabelServiceName] != "opkit-hooks" || len(slice.Endpoints) != 0 || len(slice.Ports) != 0 {
		t.Errorf("hooks EndpointSlice %+v; want it empty, of the Service opkit-hooks", slice)
	}
	if _, ok := objs["EndpointSlice/opkit-hooks"].Object["endpoints"]; ok {
		t.Errorf("the EndpointSlice sets endpoints: applying the manifests again would take them from the engine")
	}
	c := deployment(t, objs, "opkit").Spec.Template.Spec.Containers[0]
	if !strings.Contains(strings.Join(c.Args, " "), "--hooks-endpointslice opkit-hooks") {
		t.Errorf("args %q; want --hooks-endpointslice opkit-hooks", c.Args)
	}
	if i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "POD_IP" }); i < 0 || c.Env[i].ValueFrom.FieldRef.FieldPath != "status.podIP" {
		t.Errorf("env %+v; want POD_IP from status.podIP", c.Env)
	}
	role := &rbacv1.Role{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(objs["Role/opkit"].Object, role); err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(role.Rules, func(r rbacv1.PolicyRule) bool { return slices.Contains(r.Resources, "endpointslices") })
	// The deploy notifier's handlers name an image: its runners' Service
	// is routed to the leader alone too.
	if i < 0 || !slices.Equal(role.Rules[i].ResourceNames, []string{"opkit-hooks", "opkit-runners"}) || !slices.Equal(role.Rules[i].Verbs, []string{"get", "update", "patch"}) {
		t.Errorf("the Role's rules %+v; want get, update and patch of the EndpointSlices opkit-hooks and opkit-runners alone", role.Rules)
	}

	printer := objects(t, manifests.Options{}, "printer")
	if printer["Service/opkit-hooks"] != nil || printer["EndpointSlice/opkit-hooks"] != nil {
		t.Errorf("a hooks Service without a source")
	}
}

func TestConsoleIsServedOnlyWithAuthentication(t *testing.T) {
	d := deployment(t, objects(t, manifests.Options{Console: manifests.Console{Auth: manifests.ConsoleAuthNone}}, "printer"), "opkit")
	if slices.Contains(d.Spec.Template.Spec.Containers[0].Args, "--console") {
		t.Errorf("console served without auth: %q", d.Spec.Template.Spec.Containers[0].Args)
	}
	objs := objects(t, manifests.Options{Console: manifests.Console{Auth: manifests.ConsoleAuthToken, TokenSecret: "console", URL: "https://opkit.example.com"}}, "printer")
	c := deployment(t, objs, "opkit").Spec.Template.Spec.Containers[0]
	if want := []string{"--console", ":7380", "--console-auth", "token", "--console-url", "https://opkit.example.com"}; !strings.Contains(strings.Join(c.Args, " "), strings.Join(want, " ")) {
		t.Errorf("args %q, want %q", c.Args, want)
	}
	if i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "OPKIT_CONSOLE_TOKEN" }); i < 0 || c.Env[i].ValueFrom.SecretKeyRef.Name != "console" {
		t.Errorf("env %+v; want the token from the Secret console", c.Env)
	}
}

func TestDefinitionsFromFilesAreMountedFromAConfigMap(t *testing.T) {
	objs := objects(t, manifests.Options{Operators: manifests.FromFiles, AllowHostExec: true}, "printer", "handlers")
	if objs["Operator/printer"] != nil || objs["CustomResourceDefinition/operators.opkit.dev"] != nil {
		t.Errorf("Operators or their CRD with definitions from files: %v", keys(objs))
	}
	cm := objs["ConfigMap/opkit-operators"]
	data, _, _ := unstructured.NestedStringMap(cm.Object, "data")
	var op map[string]any
	if err := yaml.Unmarshal([]byte(data["greetings.yaml"]), &op); err != nil || op["kind"] != "Operator" {
		t.Errorf("greetings.yaml %q: %v", data["greetings.yaml"], err)
	}
	args := deployment(t, objs, "opkit").Spec.Template.Spec.Containers[0].Args
	if want := "-f /etc/opkit/operators/greetings.yaml -f /etc/opkit/operators/printer.yaml"; !strings.HasSuffix(strings.Join(args, " "), want) {
		t.Errorf("args %q, want them to end with %q", args, want)
	}
}

func TestOptionsThatCannotWorkAreRefusedNamingTheFlag(t *testing.T) {
	defs := compileExamples(t, "printer")
	for _, tc := range []struct {
		opts manifests.Options
		want string
	}{
		{manifests.Options{Replicas: 2}, "--archive-secret"},
		{manifests.Options{Console: manifests.Console{Auth: manifests.ConsoleAuthToken}}, "--console-token-secret"},
		{manifests.Options{Console: manifests.Console{Auth: "open"}}, "--console-auth \"open\""},
		{manifests.Options{Console: manifests.Console{URL: "https://x"}}, "--console-url"},
		{manifests.Options{Operators: "git"}, "--operators"},
		{manifests.Options{Namespace: "Opkit"}, "--namespace"},
		{manifests.Options{MetricsPort: 7382}, "ports are both 7382"},
		{manifests.Options{RunsAPIPort: 7384}, "the runners and runs-api ports are both 7384"},
	} {
		_, err := manifests.New(defs, tc.opts)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("options %+v: %v; want an error naming %s", tc.opts, err, tc.want)
		}
	}
}

func TestManifestsSayWhyEachRuleIsThere(t *testing.T) {
	m, err := manifests.New(compileExamples(t, "team-watch"), manifests.Options{AllowHostExec: true})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := m.WriteManifests(&b); err != nil {
		t.Fatal(err)
	}
	text := b.String()
	for _, want := range []string{
		"# operator team-watch: watches apps/v1 Deployment\n- apiGroups:\n  - apps\n  resources:\n  - deployments\n",
		"kind: Role\nmetadata:\n  labels:\n    app.kubernetes.io/instance: opkit\n    app.kubernetes.io/name: opkit\n  name: opkit:opkit\n  namespace: team-a\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the manifests lack\n%s", want)
		}
	}
}

func TestAdmissionHandlersHaveAWebhookServiceOfTheLeaderAloneAndTheirCertificatesSecret(t *testing.T) {
	objs := objects(t, manifests.Options{AllowHostExec: true}, "website/admission")
	svc := &corev1.Service{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(objs["Service/opkit-webhook"].Object, svc); err != nil {
		t.Fatal(err)
	}
	if svc.Spec.Selector != nil || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Name != "webhook" || svc.Spec.Ports[0].Port != 443 || svc.Spec.Ports[0].TargetPort.IntValue() != 7383 {
		t.Errorf("webhook Service %+v; want port webhook 443 to 7383 and no selector", svc.Spec)
	}
	if _, ok := objs["EndpointSlice/opkit-webhook"].Object["endpoints"]; ok {
		t.Errorf("the webhook EndpointSlice sets endpoints: applying the manifests again would take them from the engine")
	}
	if s := objs["Secret/opkit-webhook-certs"]; s == nil || s.Object["data"] != nil {
		t.Errorf("the certificates' Secret %v; want it, empty", s)
	}
	c := deployment(t, objs, "opkit").Spec.Template.Spec.Containers[0]
	if want := "--webhook-addr :7383 --webhook-service opkit-webhook:443 --webhook-endpointslice opkit-webhook --webhook-secret opkit-webhook-certs"; !strings.Contains(strings.Join(c.Args, " "), want) {
		t.Errorf("args %q; want %s", c.Args, want)
	}
	if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "webhook" && p.ContainerPort == 7383 }) {
		t.Errorf("ports %+v; want webhook 7383", c.Ports)
	}
	role := &rbacv1.Role{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(objs["Role/opkit"].Object, role); err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(role.Rules, func(r rbacv1.PolicyRule) bool { return slices.Contains(r.Resources, "secrets") })
	if i < 0 || !slices.Equal(role.Rules[i].ResourceNames, []string{"opkit-webhook-certs"}) || !slices.Equal(role.Rules[i].Verbs, []string{"get", "update"}) {
		t.Errorf("the Role's rules %+v; want get and update of the Secret opkit-webhook-certs alone", role.Rules)
	}
	cr := &rbacv1.ClusterRole{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(objs["ClusterRole/opkit:opkit"].Object, cr); err != nil {
		t.Fatal(err)
	}
	for _, res := range []string{"validatingwebhookconfigurations", "mutatingwebhookconfigurations"} {
		i := slices.IndexFunc(cr.Rules, func(r rbacv1.PolicyRule) bool { return slices.Contains(r.Resources, res) })
		if i < 0 || !slices.Equal(cr.Rules[i].ResourceNames, []string{"opkit.dev.website"}) || !slices.Equal(cr.Rules[i].Verbs, []string{"create", "patch", "delete"}) {
			t.Errorf("the ClusterRole's rules %+v; want create, patch and delete of the %s opkit.dev.website alone", cr.Rules, res)
		}
	}
	if printer := objects(t, manifests.Options{}, "printer"); printer["Service/opkit-webhook"] != nil || printer["Secret/opkit-webhook-certs"] != nil {
		t.Errorf("a webhook Service without an admission handler")
	}
}

func TestAConversionHasTheWebhookServiceToo(t *testing.T) {
	objs := objects(t, manifests.Options{AllowHostExec: true}, "../docs/examples/website-v2")
	if objs["Service/opkit-webhook"] == nil || objs["Secret/opkit-webhook-certs"] == nil {
		t.Fatalf("no webhook Service or Secret for an operator that declares conversion")
	}
	c := deployment(t, objs, "opkit").Spec.Template.Spec.Containers[0]
	if want := "--webhook-addr :7383 --webhook-service opkit-webhook:443"; !strings.Contains(strings.Join(c.Args, " "), want) {
		t.Errorf("args %q; want %s", c.Args, want)
	}
}

// TestRunsAPIIsServedByEveryReplicaBehindAnAPIServiceTheEngineCompletes:
// with RunsAPI, the engine is told where to serve and which Service the
// APIService names; that Service selects every replica; the APIService
// and the certificates' Secret are made without what the engine fills
// (a caBundle, certificates); the engine is bound to the roles every
// aggregated API server needs; and people get a viewer role that the
// built-in view, edit and admin aggregate. Without RunsAPI (the
// default), none of it.
func TestRunsAPIIsServedByEveryReplicaBehindAnAPIServiceTheEngineCompletes(t *testing.T) {
	objs := objects(t, manifests.Options{Replicas: 2, ArchiveSecret: "opkit-db", RunsAPI: true}, "printer")
	d := deployment(t, objs, "opkit")
	c := d.Spec.Template.Spec.Containers[0]
	if want := "--runs-api-addr :7385 --runs-api-service opkit-runs"; !strings.Contains(strings.Join(c.Args, " "), want) {
		t.Errorf("args %q; want %s", c.Args, want)
	}
	if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "runs-api" && p.ContainerPort == 7385 }) {
		t.Errorf("ports %+v; want runs-api 7385", c.Ports)
	}
	svc := &corev1.Service{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(objs["Service/opkit-runs"].Object, svc); err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(svc.Spec.Selector, d.Spec.Template.Labels) || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 443 || svc.Spec.Ports[0].TargetPort.String() != "runs-api" {
		t.Errorf("runs Service %+v; want port 443 to runs-api, selecting every replica (%v)", svc.Spec, d.Spec.Template.Labels)
	}
	api := objs["APIService/v1alpha1.runs.opkit.dev"]
	if api == nil {
		t.Fatalf("no APIService among %v", keys(objs))
	}
	spec, _, _ := unstructured.NestedMap(api.Object, "spec")
	if spec["group"] != "runs.opkit.dev" || spec["version"] != "v1alpha1" || spec["caBundle"] != nil || spec["insecureSkipTLSVerify"] != nil {
		t.Errorf("APIService spec %v; want group runs.opkit.dev, version v1alpha1, no caBundle (the engine's) and TLS verified", spec)
	}
	if ref, _, _ := unstructured.NestedMap(spec, "service"); ref["namespace"] != "opkit" || ref["name"] != "opkit-runs" || ref["port"] != int64(443) {
		t.Errorf("APIService service %v; want opkit/opkit-runs:443", ref)
	}
	if s := objs["Secret/opkit-runs-tls"]; s == nil || s.Object["data"] != nil {
		t.Errorf("the runs API's certificates' Secret %v; want it, empty", s)
	}
	crb := &rbacv1.ClusterRoleBinding{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(objs["ClusterRoleBinding/opkit:opkit:auth-delegator"].Object, crb); err != nil {
		t.Fatal(err)
	}
	if crb.RoleRef.Name != "system:auth-delegator" || len(crb.Subjects) != 1 || crb.Subjects[0].Name != "opkit" || crb.Subjects[0].Namespace != "opkit" {
		t.Errorf("auth-delegator binding %+v", crb)
	}
	rb := &rbacv1.RoleBinding{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(objs["RoleBinding/opkit:opkit:auth-reader"].Object, rb); err != nil {
		t.Fatal(err)
	}
	if rb.Namespace != "kube-system" || rb.RoleRef.Kind != "Role" || rb.RoleRef.Name != "extension-apiserver-authentication-reader" || rb.Subjects[0].Name != "opkit" {
		t.Errorf("auth-reader binding %+v; want the Role extension-apiserver-authentication-reader in kube-system", rb)
	}
	viewer := &rbacv1.ClusterRole{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(objs["ClusterRole/opkit-runs-viewer"].Object, viewer); err != nil {
		t.Fatal(err)
	}
	want := []rbacv1.PolicyRule{{APIGroups: []string{"runs.opkit.dev"}, Resources: []string{"runs", "runs/log", "deliveries"}, Verbs: []string{"get", "list", "watch"}}}
	if !slices.EqualFunc(viewer.Rules, want, func(a, b rbacv1.PolicyRule) bool {
		return slices.Equal(a.APIGroups, b.APIGroups) && slices.Equal(a.Resources, b.Resources) && slices.Equal(a.Verbs, b.Verbs) && len(a.ResourceNames) == 0
	}) {
		t.Errorf("opkit-runs-viewer rules %+v; want %+v", viewer.Rules, want)
	}
	for _, role := range []string{"view", "edit", "admin"} {
		if viewer.Labels["rbac.authorization.k8s.io/aggregate-to-"+role] != "true" {
			t.Errorf("opkit-runs-viewer labels %v; want it aggregated to %s", viewer.Labels, role)
		}
	}

	printer := objects(t, manifests.Options{}, "printer")
	for _, k := range []string{"APIService/v1alpha1.runs.opkit.dev", "Service/opkit-runs", "Secret/opkit-runs-tls", "ClusterRole/opkit-runs-viewer", "ClusterRoleBinding/opkit:opkit:auth-delegator", "RoleBinding/opkit:opkit:auth-reader"} {
		if printer[k] != nil {
			t.Errorf("%s without RunsAPI: it is off by default", k)
		}
	}
	if args := deployment(t, printer, "opkit").Spec.Template.Spec.Containers[0].Args; slices.Contains(args, "--runs-api-addr") {
		t.Errorf("args %q without RunsAPI", args)
	}
}

// The SQLite archive is on a claim of its own by default, which outlives
// the engine's Pods (one writer at a time: Recreate); --archive-size 0
// keeps it on an emptyDir, and a PostgreSQL archive needs neither.
func TestTheSQLiteArchiveIsOnAClaimThatOutlivesThePod(t *testing.T) {
	archiveVolume := func(d *appsv1.Deployment) *corev1.Volume {
		for i, v := range d.Spec.Template.Spec.Volumes {
			if v.Name == "archive" {
				return &d.Spec.Template.Spec.Volumes[i]
			}
		}
		return nil
	}
	objs := objects(t, manifests.Options{ArchiveStorageClass: "fast"}, "printer")
	u := objs["PersistentVolumeClaim/opkit-archive"]
	if u == nil {
		t.Fatalf("no PersistentVolumeClaim opkit-archive among %v", keys(objs))
	}
	claim := &corev1.PersistentVolumeClaim{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, claim); err != nil {
		t.Fatal(err)
	}
	if size := claim.Spec.Resources.Requests[corev1.ResourceStorage]; size.String() != manifests.DefaultArchiveSize ||
		!slices.Equal(claim.Spec.AccessModes, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}) ||
		claim.Spec.StorageClassName == nil || *claim.Spec.StorageClassName != "fast" || claim.Namespace != "opkit" {
		t.Errorf("the claim is %+v; want %s, ReadWriteOnce, class fast, in opkit", claim.Spec, manifests.DefaultArchiveSize)
	}
	d := deployment(t, objs, "opkit")
	if v := archiveVolume(d); v == nil || v.PersistentVolumeClaim == nil || v.PersistentVolumeClaim.ClaimName != "opkit-archive" {
		t.Errorf("the archive's volume is %+v; want the claim opkit-archive", v)
	}
	if psc := d.Spec.Template.Spec.SecurityContext; psc.FSGroup == nil || *psc.FSGroup != 65532 || d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("fsGroup %v, strategy %s; want the engine's group to own the claim, and one writer at a time", psc.FSGroup, d.Spec.Strategy.Type)
	}

	objs = objects(t, manifests.Options{ArchiveSize: "0"}, "printer")
	if objs["PersistentVolumeClaim/opkit-archive"] != nil {
		t.Error("--archive-size 0 still makes a claim")
	}
	if v := archiveVolume(deployment(t, objs, "opkit")); v == nil || v.EmptyDir == nil {
		t.Errorf("--archive-size 0: the archive's volume is %+v; want an emptyDir", v)
	}
	objs = objects(t, manifests.Options{ArchiveSecret: "pg"}, "printer")
	if objs["PersistentVolumeClaim/opkit-archive"] != nil || archiveVolume(deployment(t, objs, "opkit")) != nil {
		t.Error("a PostgreSQL archive still has a claim or an archive volume")
	}
}

// With an OTLP endpoint the engine's container gets the OTEL_*
// environment that turns its tracing on (tracing.FromEnv reads it so),
// the sampler only with a ratio; without one, no OTEL_* variable at all.
// What cannot work is refused naming the flag.
func TestTracingGivesTheEngineItsOTELEnvironment(t *testing.T) {
	otel := func(opts manifests.Options) map[string]string {
		t.Helper()
		c := deployment(t, objects(t, opts, "printer"), "opkit").Spec.Template.Spec.Containers[0]
		env := map[string]string{}
		for _, e := range c.Env {
			if strings.HasPrefix(e.Name, "OTEL_") {
				env[e.Name] = e.Value
			}
		}
		return env
	}
	if env := otel(manifests.Options{}); len(env) > 0 {
		t.Errorf("env %v by default; want no OTEL_* variable: tracing is off", env)
	}
	for _, tc := range []struct {
		tracing manifests.Tracing
		want    map[string]string
	}{
		{manifests.Tracing{Endpoint: "http://otel-collector.observability:4317"}, map[string]string{
			"OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel-collector.observability:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_SERVICE_NAME": "opkit",
		}},
		{manifests.Tracing{Endpoint: "https://otlp.example.com", Protocol: manifests.TracingHTTP, SampleRatio: "0.25"}, map[string]string{
			"OTEL_EXPORTER_OTLP_ENDPOINT": "https://otlp.example.com", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_SERVICE_NAME": "opkit",
			"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.25",
		}},
		{manifests.Tracing{Endpoint: "http://collector:4317", SampleRatio: "0"}, map[string]string{
			"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_SERVICE_NAME": "opkit",
			"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0",
		}},
	} {
		env := otel(manifests.Options{Tracing: tc.tracing})
		if !maps.Equal(env, tc.want) {
			t.Errorf("%+v: env %v, want %v", tc.tracing, env, tc.want)
		}
		if c, err := tracing.FromEnv(func(k string) string { return env[k] }); err != nil || !c.On || c.Protocol != env["OTEL_EXPORTER_OTLP_PROTOCOL"] {
			t.Errorf("%+v: the engine reads its env as %+v, %v; want tracing on over %s", tc.tracing, c, err, env["OTEL_EXPORTER_OTLP_PROTOCOL"])
		}
	}

	defs := compileExamples(t, "printer")
	for _, tc := range []struct {
		tracing manifests.Tracing
		want    string
	}{
		{manifests.Tracing{Endpoint: "http://collector:4318", Protocol: "http/json"}, `--otel-protocol "http/json": want grpc or http/protobuf`},
		{manifests.Tracing{Endpoint: "http://collector:4317", Protocol: "GRPC"}, `--otel-protocol "GRPC"`},
		{manifests.Tracing{Endpoint: "collector:4317"}, `--otel-endpoint "collector:4317": want the OTLP endpoint's URL, http:// or https://`},
		{manifests.Tracing{Endpoint: "grpc://collector:4317"}, `--otel-endpoint "grpc://collector:4317"`},
		{manifests.Tracing{Endpoint: "http://"}, `--otel-endpoint "http://"`},
		{manifests.Tracing{Endpoint: "http://collector:4317", SampleRatio: "1.5"}, `--otel-sample-ratio "1.5": want a decimal number from 0 to 1`},
		{manifests.Tracing{Endpoint: "http://collector:4317", SampleRatio: "-0.1"}, `--otel-sample-ratio "-0.1"`},
		{manifests.Tracing{Endpoint: "http://collector:4317", SampleRatio: "half"}, `--otel-sample-ratio "half"`},
		{manifests.Tracing{Endpoint: "http://collector:4317", SampleRatio: "1e-2"}, `--otel-sample-ratio "1e-2"`},
		{manifests.Tracing{Endpoint: "http://collector:4317", SampleRatio: "NaN"}, `--otel-sample-ratio "NaN"`},
		{manifests.Tracing{SampleRatio: "0.5"}, "--otel-sample-ratio: no spans are exported: give --otel-endpoint"},
	} {
		_, err := manifests.New(defs, manifests.Options{Tracing: tc.tracing})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("tracing %+v: %v; want an error saying %s", tc.tracing, err, tc.want)
		}
	}
	for _, ratio := range []string{"0", "1", "1.0", ".5", "0.001"} {
		if _, err := manifests.New(defs, manifests.Options{Tracing: manifests.Tracing{Endpoint: "http://collector:4317", SampleRatio: ratio}}); err != nil {
			t.Errorf("sample ratio %s: %v", ratio, err)
		}
	}
}
