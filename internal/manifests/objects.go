package manifests

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/definition"
)

// Manifests are what installs an engine for some definitions.
type Manifests struct {
	// Options are those given, with their defaults.
	Options Options
	// Rules are the engine's RBAC rules.
	Rules *Rules
	// Warnings are what had to be assumed (a kind's resource name), the
	// files left out of runners, and the exec handlers let through
	// without an image (AllowHostExec).
	Warnings []string

	defs    []*definition.Definition
	runners []*runnerOperator
}

// New computes the manifests of an engine running defs as opts says. An
// error names the option at fault.
func New(defs []*definition.Definition, opts Options) (*Manifests, error) {
	opts = opts.withDefaults()
	// The hooks listener receives the webhook and cloudEvents sources'
	// deliveries; the consumed ones (githubPoll, nats, kafka) need none.
	if slices.ContainsFunc(defs, func(d *definition.Definition) bool {
		return slices.ContainsFunc(d.Sources, func(s *definition.EventSource) bool { return !s.Consumed() })
	}) {
		opts.Hooks = true
	}
	// The webhook server answers admission calls and conversions.
	if slices.ContainsFunc(defs, func(d *definition.Definition) bool { return len(d.Admission) > 0 || d.Conversion != nil }) {
		opts.Webhook = true
	}
	if err := opts.validate(); err != nil {
		return nil, err
	}
	runners, host, fileWarnings, err := runners(defs)
	if err != nil {
		return nil, err
	}
	var hostWarnings []string
	if len(host) > 0 {
		var names []string
		for _, h := range host {
			names = append(names, fmt.Sprintf("operator %s, handler %s", h.operator, h.handler))
		}
		what := fmt.Sprintf("exec handlers without exec.image (%s): in a cluster they run in the engine's container (image %s), beside the engine's credentials, and opkit's own image holds opkit alone, no shell and no interpreter",
			strings.Join(names, "; "), opts.Image)
		if !opts.AllowHostExec {
			return nil, errors.New(what + ". Give each exec.image, the image its command runs in (e.g. python:3.12-slim): it runs in a runner of that image, with the definition's directory (docs/production.md). If the engine's image (--image) holds their programs, pass --allow-host-exec")
		}
		hostWarnings = append(hostWarnings, what+" (--allow-host-exec: the engine's image must hold their programs)")
	}
	rules, warnings := ComputeRules(defs, opts)
	warnings = append(append(warnings, fileWarnings...), hostWarnings...)
	return &Manifests{Options: opts, Rules: rules, Warnings: warnings, defs: defs, runners: runners}, nil
}

// Labels on every object of the engine; the Pods' selector.
func (m *Manifests) labels() map[string]string {
	return map[string]string{"app.kubernetes.io/name": "opkit", "app.kubernetes.io/instance": m.Options.Name}
}

func (m *Manifests) meta(name string, namespaced bool) metav1.ObjectMeta {
	om := metav1.ObjectMeta{Name: name, Labels: m.labels()}
	if namespaced {
		om.Namespace = m.Options.Namespace
	}
	return om
}

// ClusterRoleName is the name of the engine's ClusterRole and
// ClusterRoleBinding, and of its Role in each other namespace:
// <namespace>:<name>, unique among engines.
func (m *Manifests) ClusterRoleName() string { return m.Options.Namespace + ":" + m.Options.Name }

// Objects returns every object, in the order to apply them: the
// Namespace (with CreateNamespace), the Operator CRD (FromCluster), the
// ServiceAccount, the ClusterRole, the Roles and their bindings, the
// definitions' ConfigMap (FromFiles), the Deployment, the Service, the
// runners' objects (with an exec handler in an image: the engine's
// certificate Secret and CA ConfigMap, then per operator its runners'
// ServiceAccount, its files' ConfigMap and a Deployment per image), the
// hooks Service and its EndpointSlice (Hooks), the webhook Service, its
// EndpointSlice and the certificates' Secret (Webhook), the runs API's
// Service, certificates' Secret and APIService (RunsAPI), the PodDisruptionBudget
// (more than one replica), and the Operators (FromCluster).
func (m *Manifests) Objects() ([]*unstructured.Unstructured, error) {
	o := m.Options
	var objs []runtime.Object
	if o.CreateNamespace {
		objs = append(objs, &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": o.Namespace}}})
	}
	if o.Operators == FromCluster {
		objs = append(objs, v1alpha1.CustomResourceDefinition())
	}
	objs = append(objs, &corev1.ServiceAccount{TypeMeta: typeMeta("v1", "ServiceAccount"), ObjectMeta: m.meta(o.Name, true)})
	objs = append(objs, m.rbac()...)
	files, err := m.operatorFiles()
	if err != nil {
		return nil, err
	}
	if o.Operators == FromFiles {
		objs = append(objs, &corev1.ConfigMap{TypeMeta: typeMeta("v1", "ConfigMap"), ObjectMeta: m.meta(o.Name+"-operators", true), Data: files})
	}
	if size, ok := o.archiveClaim(); ok {
		objs = append(objs, m.archiveClaim(size))
	}
	objs = append(objs, m.deployment(), m.service())
	objs = append(objs, m.runnerObjects()...)
	if o.Hooks {
		objs = append(objs, m.hooksService()...)
	}
	if len(m.runners) > 0 {
		objs = append(objs, m.endpointService(RunnersName, "runners", o.RunnersPort, o.RunnersPort)...)
	}
	if o.Webhook {
		objs = append(objs, m.webhookService()...)
	}
	if o.RunsAPI {
		objs = append(objs, m.runsAPI()...)
	}
	if o.Replicas > 1 {
		objs = append(objs, m.disruptionBudget())
	}
	var out []*unstructured.Unstructured
	for _, obj := range objs {
		u, err := toUnstructured(obj)
		if err != nil {
			return nil, err
		}
		out = append(out, u)
	}
	if o.Operators == FromCluster {
		for _, op := range m.operators() {
			u, err := toUnstructured(op)
			if err != nil {
				return nil, err
			}
			out = append(out, u)
		}
	}
	return out, nil
}

func typeMeta(apiVersion, kind string) metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: apiVersion, Kind: kind}
}

// RunsAPIGroup is the runs API's group.
const RunsAPIGroup = "runs.opkit.dev"

// RunsAPIService is the name of the runs API's Service, which the
// APIService names: <name>-runs.
func RunsAPIService(name string) string { return name + "-runs" }

// RunsAPISecret is the name of the Secret of the runs API's certificates,
// <name>-runs-tls: the engine's default for its Service
// (aggregate.ServerOptions.Secret).
func RunsAPISecret(name string) string { return RunsAPIService(name) + "-tls" }

// operators are the definitions as Operator objects, by name: their
// defaulted spec, name, labels and annotations.
func (m *Manifests) operators() []*v1alpha1.Operator {
	var out []*v1alpha1.Operator
	for _, d := range m.defs {
		out = append(out, &v1alpha1.Operator{
			TypeMeta: typeMeta(v1alpha1.SchemeGroupVersion.String(), v1alpha1.Kind),
			ObjectMeta: metav1.ObjectMeta{
				Name: d.Operator.Name, Labels: d.Operator.Labels, Annotations: d.Operator.Annotations,
			},
			Spec: *d.Operator.Spec.DeepCopy(),
		})
	}
	slices.SortFunc(out, func(a, b *v1alpha1.Operator) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// operatorFiles are the definitions' files in the ConfigMap of
// FromFiles, by key: <operator>.yaml.
func (m *Manifests) operatorFiles() (map[string]string, error) {
	files := map[string]string{}
	for _, op := range m.operators() {
		u, err := toUnstructured(op)
		if err != nil {
			return nil, err
		}
		data, err := yaml.Marshal(u.Object)
		if err != nil {
			return nil, err
		}
		files[op.Name+".yaml"] = string(data)
	}
	return files, nil
}

// args are the engine's command line.
func (m *Manifests) args() []string {
	o := m.Options
	port := func(p int32) string { return ":" + strconv.Itoa(int(p)) }
	args := []string{"run", "--metrics-addr", port(o.MetricsPort), "--hooks-addr", port(o.HooksPort)}
	if o.Hooks {
		args = append(args, "--hooks-endpointslice", HooksName)
	}
	if o.Webhook {
		args = append(args, "--webhook-addr", port(o.WebhookPort), "--webhook-service", WebhookName+":443",
			"--webhook-endpointslice", WebhookName, "--webhook-secret", WebhookSecret)
	}
	if len(m.runners) > 0 {
		args = append(args, "--runners-addr", port(o.RunnersPort), "--runners-service", RunnersName, "--runners-endpointslice", RunnersName)
	}
	if o.RunsAPI {
		args = append(args, "--runs-api-addr", port(o.RunsAPIPort), "--runs-api-service", RunsAPIService(o.Name))
	}
	if o.LeaderElection {
		args = append(args, "--leader-elect")
	}
	if o.AdmissionFinalizers {
		args = append(args, "--admission-finalizers")
	}
	if o.MigrateStorage {
		args = append(args, "--migrate-storage")
	}
	if o.RunEvents {
		args = append(args, "--run-events")
	}
	if o.Console.served() {
		args = append(args, "--console", port(o.ConsolePort), "--console-auth", o.Console.Auth)
		if o.Console.URL != "" {
			args = append(args, "--console-url", o.Console.URL)
		}
	}
	if o.Operators == FromFiles {
		for _, op := range m.operators() {
			args = append(args, "-f", OperatorsDir+"/"+op.Name+".yaml")
		}
	}
	return args
}

func (m *Manifests) deployment() *appsv1.Deployment {
	o := m.Options
	env := []corev1.EnvVar{{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}}}
	mounts := []corev1.VolumeMount{{Name: "tmp", MountPath: "/tmp"}}
	volumes := []corev1.Volume{{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	if o.ArchiveSecret != "" {
		env = append(env, corev1.EnvVar{Name: "OPKIT_ARCHIVE", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: o.ArchiveSecret}, Key: ArchiveKey,
		}}})
	} else {
		env = append(env, corev1.EnvVar{Name: "OPKIT_ARCHIVE", Value: SQLitePath})
		mounts = append(mounts, corev1.VolumeMount{Name: "archive", MountPath: "/var/lib/opkit"})
		source := corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}
		if _, ok := o.archiveClaim(); ok {
			source = corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: o.Name + "-archive"}}
		}
		volumes = append(volumes, corev1.Volume{Name: "archive", VolumeSource: source})
	}
	if o.Hooks || o.Webhook || len(m.runners) > 0 {
		// The acting replica writes its address to the hooks', the
		// webhook's and the runners' EndpointSlices.
		for _, f := range []struct{ name, path string }{{"POD_IP", "status.podIP"}, {"POD_NAME", "metadata.name"}, {"NODE_NAME", "spec.nodeName"}} {
			env = append(env, corev1.EnvVar{Name: f.name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: f.path}}})
		}
	}
	if o.Console.Auth == ConsoleAuthToken {
		env = append(env, corev1.EnvVar{Name: "OPKIT_CONSOLE_TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: o.Console.TokenSecret}, Key: TokenKey,
		}}})
	}
	env = append(env, o.Tracing.env()...)
	if o.Operators == FromFiles {
		mounts = append(mounts, corev1.VolumeMount{Name: "operators", MountPath: OperatorsDir, ReadOnly: true})
		volumes = append(volumes, corev1.Volume{Name: "operators", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: o.Name + "-operators"},
		}}})
	}
	ports := []corev1.ContainerPort{{Name: "metrics", ContainerPort: o.MetricsPort, Protocol: corev1.ProtocolTCP}}
	if o.Hooks {
		ports = append(ports, corev1.ContainerPort{Name: "hooks", ContainerPort: o.HooksPort, Protocol: corev1.ProtocolTCP})
	}
	if o.Webhook {
		ports = append(ports, corev1.ContainerPort{Name: "webhook", ContainerPort: o.WebhookPort, Protocol: corev1.ProtocolTCP})
	}
	if o.Console.served() {
		ports = append(ports, corev1.ContainerPort{Name: "console", ContainerPort: o.ConsolePort, Protocol: corev1.ProtocolTCP})
	}
	if len(m.runners) > 0 {
		ports = append(ports, corev1.ContainerPort{Name: "runners", ContainerPort: o.RunnersPort, Protocol: corev1.ProtocolTCP})
	}
	if o.RunsAPI {
		ports = append(ports, corev1.ContainerPort{Name: "runs-api", ContainerPort: o.RunsAPIPort, Protocol: corev1.ProtocolTCP})
	}
	probe := func(path string, period int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromString("metrics")}},
			PeriodSeconds: period, TimeoutSeconds: 5, FailureThreshold: 3,
		}
	}
	pod := corev1.PodSpec{
		ServiceAccountName:           o.Name,
		AutomountServiceAccountToken: ptr.To(true),
		EnableServiceLinks:           ptr.To(false),
		SecurityContext:              engineSecurity(),
		Containers: []corev1.Container{{
			Name: "engine", Image: o.Image, ImagePullPolicy: corev1.PullIfNotPresent,
			Args: m.args(), Env: env, Ports: ports,
			LivenessProbe:   probe("/healthz", 10),
			ReadinessProbe:  probe("/readyz", 5),
			Resources:       *o.Resources.DeepCopy(),
			SecurityContext: restrictedContainer(true),
			VolumeMounts:    mounts,
		}},
		Volumes: volumes,
	}
	pod.Tolerations = m.tolerations()
	if o.Replicas > 1 {
		pod.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
			PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{
				Weight: 100,
				PodAffinityTerm: corev1.PodAffinityTerm{
					LabelSelector: &metav1.LabelSelector{MatchLabels: m.labels()},
					TopologyKey:   "kubernetes.io/hostname",
				},
			}},
		}}
	}
	return &appsv1.Deployment{
		TypeMeta: typeMeta("apps/v1", "Deployment"), ObjectMeta: m.meta(o.Name, true),
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(o.Replicas),
			Selector: &metav1.LabelSelector{MatchLabels: m.labels()},
			// Never two engines at once without leader election; with
			// it, Recreate stops the old replicas, the leader releasing
			// its Lease, then starts the new ones.
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: m.labels()}, Spec: pod},
		},
	}
}

// env is the engine's OTEL_* environment, which tracing.Setup reads:
// none without an endpoint.
func (t Tracing) env() []corev1.EnvVar {
	if !t.on() {
		return nil
	}
	env := []corev1.EnvVar{
		{Name: "OTEL_EXPORTER_OTLP_ENDPOINT", Value: t.Endpoint},
		{Name: "OTEL_EXPORTER_OTLP_PROTOCOL", Value: t.Protocol},
		{Name: "OTEL_SERVICE_NAME", Value: TracingService},
	}
	if t.SampleRatio != "" {
		env = append(env,
			corev1.EnvVar{Name: "OTEL_TRACES_SAMPLER", Value: "parentbased_traceidratio"},
			corev1.EnvVar{Name: "OTEL_TRACES_SAMPLER_ARG", Value: t.SampleRatio})
	}
	return env
}

// archiveClaim is the PersistentVolumeClaim of the SQLite archive,
// <Name>-archive: one engine writes it at a time (the Deployment's
// Recreate strategy), and it outlives the engine's Pods.
func (m *Manifests) archiveClaim(size resource.Quantity) *corev1.PersistentVolumeClaim {
	c := &corev1.PersistentVolumeClaim{
		TypeMeta: typeMeta("v1", "PersistentVolumeClaim"), ObjectMeta: m.meta(m.Options.Name+"-archive", true),
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
		},
	}
	if sc := m.Options.ArchiveStorageClass; sc != "" {
		c.Spec.StorageClassName = &sc
	}
	return c
}

// engineSecurity is the engine's Pod's security context: restricted, and
// its volumes (the archive's claim) made writable by its group.
func engineSecurity() *corev1.PodSecurityContext {
	sc := restrictedPod()
	sc.FSGroup = ptr.To(int64(UID))
	policy := corev1.FSGroupChangeOnRootMismatch
	sc.FSGroupChangePolicy = &policy
	return sc
}

// DevNodeTaint is the taint of the local control plane's dev node
// (devnode.Taint), which Options.DevNode tolerates.
const DevNodeTaint = "opkit.dev/dev-node"

// tolerations are the Pods' tolerations: the dev node's with DevNode.
func (m *Manifests) tolerations() []corev1.Toleration {
	if !m.Options.DevNode {
		return nil
	}
	return []corev1.Toleration{{Key: DevNodeTaint, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
}

func (m *Manifests) service() *corev1.Service {
	o := m.Options
	port := func(name string, p int32) corev1.ServicePort {
		return corev1.ServicePort{Name: name, Port: p, TargetPort: intstr.FromString(name), Protocol: corev1.ProtocolTCP}
	}
	ports := []corev1.ServicePort{port("metrics", o.MetricsPort)}
	if o.Console.served() {
		ports = append(ports, port("console", o.ConsolePort))
	}
	return &corev1.Service{
		TypeMeta: typeMeta("v1", "Service"), ObjectMeta: m.meta(o.Name, true),
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, Selector: m.labels(), Ports: ports},
	}
}

// hooksService is the Service that webhook deliveries are sent to, and its
// EndpointSlice. The Service selects no Pods: the replica that acts, the
// only one that binds the hooks listener, writes its own address and port
// to the EndpointSlice (engine.HooksEndpoint), so that no delivery reaches
// a standby. The slice is made here with neither endpoints nor ports, so
// that applying the manifests again never takes them from the engine.
func (m *Manifests) hooksService() []runtime.Object {
	o := m.Options
	return m.endpointService(HooksName, "hooks", o.HooksPort, o.HooksPort)
}

// endpointService is a Service that selects no Pods, of one port, and
// its EndpointSlice, made with neither endpoints nor ports: the acting
// replica writes them (engine.HooksEndpoint; the runners' Service,
// RunnersName, is one too: runners pull runs from the acting replica
// only).
func (m *Manifests) endpointService(name, portName string, port, target int32) []runtime.Object {
	svc := &corev1.Service{
		TypeMeta: typeMeta("v1", "Service"), ObjectMeta: m.meta(name, true),
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, Ports: []corev1.ServicePort{{Name: portName, Port: port, TargetPort: intstr.FromInt32(target), Protocol: corev1.ProtocolTCP}}},
	}
	slice := &discoveryv1.EndpointSlice{TypeMeta: typeMeta("discovery.k8s.io/v1", "EndpointSlice"), ObjectMeta: m.meta(name, true), AddressType: discoveryv1.AddressTypeIPv4}
	slice.Labels[discoveryv1.LabelServiceName] = name
	slice.Labels[discoveryv1.LabelManagedBy] = "opkit.dev"
	return []runtime.Object{svc, slice}
}

// webhookService is the Service the API server sends admission calls to
// (port 443), its EndpointSlice, and the certificates' Secret. As the
// hooks Service, it selects no Pods: a standby runs no operator, and the
// acting replica writes its address and port to the slice. The slice and
// the Secret are made empty, so that applying the manifests again never
// takes their endpoints or certificates from the engine.
func (m *Manifests) webhookService() []runtime.Object {
	o := m.Options
	name := WebhookName
	svc := &corev1.Service{
		TypeMeta: typeMeta("v1", "Service"), ObjectMeta: m.meta(name, true),
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, Ports: []corev1.ServicePort{{Name: "webhook", Port: 443, TargetPort: intstr.FromInt32(o.WebhookPort), Protocol: corev1.ProtocolTCP}}},
	}
	slice := &discoveryv1.EndpointSlice{TypeMeta: typeMeta("discovery.k8s.io/v1", "EndpointSlice"), ObjectMeta: m.meta(name, true), AddressType: discoveryv1.AddressTypeIPv4}
	slice.Labels[discoveryv1.LabelServiceName] = name
	slice.Labels[discoveryv1.LabelManagedBy] = "opkit.dev"
	secret := &corev1.Secret{TypeMeta: typeMeta("v1", "Secret"), ObjectMeta: m.meta(WebhookSecret, true), Type: corev1.SecretTypeOpaque}
	return []runtime.Object{svc, slice, secret}
}

func (m *Manifests) disruptionBudget() *policyv1.PodDisruptionBudget {
	o := m.Options
	return &policyv1.PodDisruptionBudget{
		TypeMeta: typeMeta("policy/v1", "PodDisruptionBudget"), ObjectMeta: m.meta(o.Name, true),
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable:             ptr.To(intstr.FromInt32(1)),
			Selector:                   &metav1.LabelSelector{MatchLabels: m.labels()},
			UnhealthyPodEvictionPolicy: ptr.To(policyv1.AlwaysAllow),
		},
	}
}

// toUnstructured converts a typed object, leaving out what the API
// fills (status, creationTimestamp).
func toUnstructured(obj runtime.Object) (*unstructured.Unstructured, error) {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, fmt.Errorf("converting %T: %w", obj, err)
	}
	delete(u, "status")
	prune(u)
	return &unstructured.Unstructured{Object: u}, nil
}

// prune drops nulls (a creationTimestamp: null), recursively.
func prune(m map[string]any) {
	for k, v := range m {
		switch t := v.(type) {
		case nil:
			delete(m, k)
		case map[string]any:
			prune(t)
		case []any:
			for _, item := range t {
				if im, ok := item.(map[string]any); ok {
					prune(im)
				}
			}
		}
	}
}

// restrictedPod is the pod security context of every Pod opkit makes:
// the restricted Pod Security Standard, as user and group UID.
func restrictedPod() *corev1.PodSecurityContext {
	return &corev1.PodSecurityContext{
		RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To(int64(UID)), RunAsGroup: ptr.To(int64(UID)),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// restrictedContainer is the security context of every container opkit
// makes, under the restricted Pod Security Standard. readOnlyRoot: the
// engine's; a runner's image may write (an interpreter's caches).
func restrictedContainer(readOnlyRoot bool) *corev1.SecurityContext {
	c := &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false), RunAsNonRoot: ptr.To(true),
		Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	if readOnlyRoot {
		c.ReadOnlyRootFilesystem = ptr.To(true)
	}
	return c
}
