package manifests

import (
	"cmp"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Where the engine reads its definitions from (Options.Operators).
const (
	// FromCluster: the definitions are applied as Operator objects, which
	// the engine runs (opkit run without -f); an Operator added or changed
	// later runs without a restart, within the rules granted.
	FromCluster = "cluster"
	// FromFiles: the definitions are a ConfigMap mounted into the engine's
	// Pod (opkit run -f); changing one restarts the Pod.
	FromFiles = "files"
)

// Console authentication (Options.Console.Auth).
const (
	// ConsoleAuthNone serves no console: without authentication it may
	// listen on loopback only, which no one outside the Pod reaches.
	ConsoleAuthNone = "none"
	// ConsoleAuthToken serves it to whoever has the token of a Secret.
	ConsoleAuthToken = "token"
	// ConsoleAuthKubernetes serves it to Kubernetes users, each checked by
	// TokenReview and SubjectAccessReview.
	ConsoleAuthKubernetes = "kubernetes"
)

// OTLP protocols of the engine's traces (Options.Tracing.Protocol).
const (
	// TracingGRPC is OTLP over gRPC, which a collector serves on 4317.
	TracingGRPC = "grpc"
	// TracingHTTP is OTLP over HTTP with protobuf bodies, on 4318; the
	// exporter appends /v1/traces to the endpoint.
	TracingHTTP = "http/protobuf"
)

// TracingService is the engine's OTEL_SERVICE_NAME with Options.Tracing.
const TracingService = "opkit"

// Defaults of Options.
const (
	DefaultName      = "opkit"
	DefaultNamespace = "opkit"
	// DefaultImageRepository is the engine's image without its tag; the tag
	// defaults to the version of the opkit that generates.
	DefaultImageRepository = "ghcr.io/opkit-dev/opkit"
	DefaultMetricsPort     = 7381
	DefaultHooksPort       = 7382
	DefaultConsolePort     = 7380
	DefaultWebhookPort     = 7383
	DefaultRunnersPort     = 7384
	DefaultRunsAPIPort     = 7385
	// LeaseName is the Lease of leader election (opkit run's
	// --leader-elect-lease default).
	LeaseName = "opkit-engine"
	// HooksName is the Service that webhook deliveries are sent to, and
	// its EndpointSlice, which the acting replica writes (opkit run
	// --hooks-endpointslice).
	HooksName = "opkit-hooks"
	// WebhookName is the Service the API server sends admission calls to,
	// and its EndpointSlice, which the acting replica writes (opkit run
	// --webhook-service, --webhook-endpointslice).
	WebhookName = "opkit-webhook"
	// RunnersName is the Service runners reach the runner API through,
	// and its EndpointSlice, which the acting replica writes (opkit run
	// --runners-service, --runners-endpointslice): the runner API's
	// certificate names RunnersName.NAMESPACE.svc.
	RunnersName = "opkit-runners"
	// WebhookSecret is the Secret of the webhook's CA and serving
	// certificate (opkit run --webhook-secret's default): made empty by
	// the manifests, filled by the engine.
	WebhookSecret = "opkit-webhook-certs"
	// RunsAPIName is the APIService of the runs API (opkit run
	// --runs-api-addr), <version>.<group>: one per cluster.
	RunsAPIName = "v1alpha1.runs.opkit.dev"
	// RunsViewerRole is the ClusterRole that reads the runs API: get,
	// list and watch of runs, runs/log and deliveries. A RoleBinding to
	// it grants a namespace's runs; the built-in view, edit and admin
	// roles aggregate it.
	RunsViewerRole = "opkit-runs-viewer"
	// ArchiveKey is the key of Options.ArchiveSecret that holds the DSN.
	ArchiveKey = "dsn"
	// TokenKey is the key of Options.Console.TokenSecret.
	TokenKey = "token"
	// OperatorsDir is where the definitions are mounted with FromFiles.
	OperatorsDir = "/etc/opkit/operators"
	// SQLitePath is the archive without ArchiveSecret: a SQLite file on
	// the PersistentVolumeClaim <Name>-archive (an emptyDir, lost with
	// the Pod, with ArchiveSize 0).
	SQLitePath = "/var/lib/opkit/runs.db"
	// DefaultArchiveSize is Options.ArchiveSize's default: some 200,000
	// runs of a few KiB of input, result and log each (docs/production.md,
	// The archive).
	DefaultArchiveSize = "1Gi"
	// UID is the user and group the engine runs as (the image's nonroot).
	UID = 65532
)

// Options says how the engine is installed. The zero value is one
// replica named opkit in namespace opkit, running the definitions applied
// as Operator objects, with a SQLite archive on a PersistentVolumeClaim of
// 1Gi (kept across upgrades and rescheduling), no console, no traces
// exported, and its metrics and health on port 7381.
type Options struct {
	// Name names the engine's objects: its ServiceAccount, Deployment,
	// Service, PodDisruptionBudget and Role; its ClusterRole is
	// <Namespace>:<Name>. Defaults to opkit.
	Name string
	// Namespace is the engine's. Defaults to opkit.
	Namespace string
	// CreateNamespace adds the Namespace object (the manifests only: a
	// Helm chart leaves it to helm install --create-namespace).
	CreateNamespace bool
	// Image is the engine's image. Defaults to DefaultImage(Version).
	Image string
	// Version is the version of the opkit that generates, whose image the
	// engine runs by default when it is a release (see ImageTag).
	Version string
	// Replicas of the engine. Defaults to 1. More than one needs
	// ArchiveSecret (a PostgreSQL archive they share) and turns
	// LeaderElection on.
	Replicas int32
	// LeaderElection runs the engine with --leader-elect: one replica, the
	// holder of the Lease LeaseName, acts. Defaults to Replicas > 1.
	LeaderElection bool
	// ArchiveSecret names a Secret in Namespace whose key dsn holds the
	// archive's PostgreSQL URL, given to the engine as $OPKIT_ARCHIVE.
	// Defaults to none: a SQLite file on the PersistentVolumeClaim
	// <Name>-archive.
	ArchiveSecret string
	// ArchiveSize is the size of that claim, a quantity (512Mi, 5Gi).
	// Defaults to DefaultArchiveSize; "0" puts the SQLite file on an
	// emptyDir instead, lost with the Pod (a cluster without storage).
	ArchiveSize string
	// ArchiveStorageClass is the claim's storage class. Defaults to
	// none: the cluster's default class.
	ArchiveStorageClass string
	// Operators is FromCluster (the default) or FromFiles.
	Operators string
	// AdmissionFinalizers runs the engine with --admission-finalizers,
	// which needs rights on MutatingAdmissionPolicies.
	AdmissionFinalizers bool
	// MigrateStorage runs the engine with --migrate-storage (it migrates
	// an operator's CRD whose objects are stored at an older version),
	// which needs list and update of the custom resources and update of
	// their CRD's status.
	MigrateStorage bool
	// RunEvents runs the engine with --run-events: a HandlerStarted and a
	// HandlerSucceeded Event for every handler run, besides the
	// failures'. It needs no other right.
	RunEvents bool
	// Console serves the web console beside the engine, only with
	// authentication.
	Console Console
	// Hooks serves webhook deliveries: the hooks port, and a Service of
	// their own (HooksName) whose EndpointSlice the acting replica
	// writes. Defaults to whether a definition has sources.
	Hooks bool
	// Webhook serves admission handlers: the webhook port, a Service of
	// its own (WebhookName) whose EndpointSlice the acting replica
	// writes, and the certificates' Secret (WebhookSecret). Defaults to
	// whether a definition has admission handlers.
	Webhook bool
	// RunsAPI serves the run archive as the aggregated API
	// runs.opkit.dev/v1alpha1 (kubectl get runs, docs/runs-api.md): the
	// runs-api port, a Service <Name>-runs in front of every replica
	// (each serves reads from the archive), the APIService RunsAPIName
	// (the engine fills its caBundle), the Secret of its certificates
	// (<Name>-runs-tls, made empty, filled by the engine), the
	// engine's bindings to system:auth-delegator and, in kube-system,
	// to extension-apiserver-authentication-reader, and the ClusterRole
	// RunsViewerRole. Defaults to false: an APIService is the whole
	// cluster's, and while no replica answers, discovery of its group
	// fails for every client and namespaces being deleted wait
	// (docs/runs-api.md says more).
	RunsAPI bool
	// AllowHostExec lets an exec handler without exec.image through, with
	// a warning: it runs in the engine's container, where the stock image
	// has no interpreter and the handler shares the engine's credentials.
	// Defaults to false: such a handler is refused, naming it.
	AllowHostExec bool
	// DevNode makes the engine's and the runners' Pods tolerate the dev
	// node's taint (opkit.dev/dev-node), to rehearse an install on the
	// local control plane (opkit cluster start), whose dev node runs them
	// as processes of the host. A cluster has no such node: there the
	// toleration changes nothing. Defaults to false.
	DevNode bool
	// Ports of the engine's listeners. Each defaults to its Default*Port.
	// RunnersPort serves the runner API, with an exec handler in an image;
	// RunsAPIPort the runs API, with RunsAPI.
	MetricsPort, HooksPort, ConsolePort, WebhookPort, RunnersPort, RunsAPIPort int32
	// Tracing exports the engine's spans with OTLP. Defaults to none.
	Tracing Tracing
	// Resources of the engine's container. Defaults to a request of 100m
	// CPU and 192Mi of memory and a limit of 512Mi (docs/production.md,
	// Sizing).
	Resources *corev1.ResourceRequirements
}

// Console is how the console is served.
type Console struct {
	// Auth is ConsoleAuthNone (the default: no console),
	// ConsoleAuthToken or ConsoleAuthKubernetes.
	Auth string
	// TokenSecret names a Secret in the engine's namespace whose key token
	// is the console's token; required with ConsoleAuthToken.
	TokenSecret string
	// URL is the console's public base URL, linked from Events; optional.
	URL string
}

// Tracing is where the engine exports its spans (runs, reconciles,
// deliveries), as the standard OTEL_* environment of its container says
// (docs/observability.md).
type Tracing struct {
	// Endpoint is the OTLP endpoint's URL, http:// or https://
	// (OTEL_EXPORTER_OTLP_ENDPOINT): with http/protobuf its base, the
	// exporter appending /v1/traces. Empty (the default): no spans are
	// exported, and no OTEL_* variable is set.
	Endpoint string
	// Protocol is TracingGRPC (the default: a collector in the cluster
	// usually listens on 4317) or TracingHTTP
	// (OTEL_EXPORTER_OTLP_PROTOCOL).
	Protocol string
	// SampleRatio is the share of traces sampled, a decimal number in
	// [0,1] (0.25): the sampler parentbased_traceidratio, which follows
	// an incoming trace's decision. Empty (the default): the SDK's own,
	// parentbased_always_on.
	SampleRatio string
}

// on reports whether spans are exported.
func (t Tracing) on() bool { return t.Endpoint != "" }

// sampleRatio is a sample ratio's form: a decimal number, no sign, no
// exponent (the chart checks the same).
var sampleRatio = regexp.MustCompile(`^([0-9]+(\.[0-9]*)?|\.[0-9]+)$`)

// validate says what is wrong with defaulted tracing, naming the flags.
func (t Tracing) validate() []error {
	var errs []error
	if t.Endpoint != "" {
		if u, err := url.Parse(t.Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("--otel-endpoint %q: want the OTLP endpoint's URL, http:// or https:// (http://otel-collector.observability:4317)", t.Endpoint))
		}
	}
	if t.Protocol != TracingGRPC && t.Protocol != TracingHTTP {
		errs = append(errs, fmt.Errorf("--otel-protocol %q: want %s or %s", t.Protocol, TracingGRPC, TracingHTTP))
	}
	if t.SampleRatio != "" {
		if r, err := strconv.ParseFloat(t.SampleRatio, 64); !sampleRatio.MatchString(t.SampleRatio) || err != nil || r > 1 {
			errs = append(errs, fmt.Errorf("--otel-sample-ratio %q: want a decimal number from 0 to 1 (0.25: a quarter of the traces)", t.SampleRatio))
		}
		if !t.on() {
			errs = append(errs, errors.New("--otel-sample-ratio: no spans are exported: give --otel-endpoint"))
		}
	}
	return errs
}

// served reports whether the console is served.
func (c Console) served() bool { return c.Auth == ConsoleAuthToken || c.Auth == ConsoleAuthKubernetes }

// DefaultResources are Options.Resources' default.
func DefaultResources() corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("192Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi")},
	}
}

// withDefaults returns the options with their defaults.
func (o Options) withDefaults() Options {
	o.Name = cmp.Or(o.Name, DefaultName)
	o.Namespace = cmp.Or(o.Namespace, DefaultNamespace)
	if o.Image == "" {
		o.Image = DefaultImage(o.Version)
	}
	o.Replicas = cmp.Or(o.Replicas, 1)
	if o.Replicas > 1 {
		o.LeaderElection = true
	}
	o.Operators = cmp.Or(o.Operators, FromCluster)
	o.Console.Auth = cmp.Or(o.Console.Auth, ConsoleAuthNone)
	o.MetricsPort = cmp.Or(o.MetricsPort, DefaultMetricsPort)
	o.HooksPort = cmp.Or(o.HooksPort, DefaultHooksPort)
	o.ConsolePort = cmp.Or(o.ConsolePort, DefaultConsolePort)
	o.WebhookPort = cmp.Or(o.WebhookPort, DefaultWebhookPort)
	o.RunnersPort = cmp.Or(o.RunnersPort, DefaultRunnersPort)
	o.RunsAPIPort = cmp.Or(o.RunsAPIPort, DefaultRunsAPIPort)
	o.Tracing.Protocol = cmp.Or(o.Tracing.Protocol, TracingGRPC)
	if o.Resources == nil {
		r := DefaultResources()
		o.Resources = &r
	}
	if o.ArchiveSize == "" && o.ArchiveSecret == "" {
		o.ArchiveSize = DefaultArchiveSize
	}
	return o
}

// archiveClaim reports whether the SQLite archive is on a claim, and its
// size.
func (o Options) archiveClaim() (resource.Quantity, bool) {
	if o.ArchiveSecret != "" {
		return resource.Quantity{}, false
	}
	q, err := resource.ParseQuantity(o.ArchiveSize)
	return q, err == nil && o.ArchiveSize != "0"
}

// validate says what is wrong with defaulted options, naming the flag of
// opkit generate.
func (o Options) validate() error {
	var errs []error
	for _, n := range []struct{ flag, value string }{{"--name", o.Name}, {"--namespace", o.Namespace}} {
		if msgs := validation.IsDNS1123Label(n.value); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("%s %q: %v", n.flag, n.value, msgs))
		}
	}
	if o.Replicas < 1 {
		errs = append(errs, fmt.Errorf("--replicas %d: at least 1", o.Replicas))
	}
	if o.Replicas > 1 && o.ArchiveSecret == "" {
		errs = append(errs, fmt.Errorf("--replicas %d: replicas share one PostgreSQL archive: name the Secret holding its URL (key %s) with --archive-secret", o.Replicas, ArchiveKey))
	}
	if o.ArchiveSecret != "" && (o.ArchiveSize != "" || o.ArchiveStorageClass != "") {
		errs = append(errs, errors.New("--archive-size and --archive-storage-class are the SQLite archive's claim: with --archive-secret the archive is PostgreSQL's"))
	}
	if q, err := resource.ParseQuantity(o.ArchiveSize); o.ArchiveSecret == "" && o.ArchiveSize != "0" && (err != nil || q.Sign() <= 0) {
		errs = append(errs, fmt.Errorf("--archive-size %q: want a size such as 1Gi or 500Mi (0: an emptyDir, lost with the Pod)", o.ArchiveSize))
	}
	if o.ArchiveStorageClass != "" {
		if msgs := validation.IsDNS1123Subdomain(o.ArchiveStorageClass); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("--archive-storage-class %q: %v", o.ArchiveStorageClass, msgs))
		}
	}
	if o.Operators != FromCluster && o.Operators != FromFiles {
		errs = append(errs, fmt.Errorf("--operators %q: want %s or %s", o.Operators, FromCluster, FromFiles))
	}
	switch o.Console.Auth {
	case ConsoleAuthNone, ConsoleAuthKubernetes:
		if o.Console.TokenSecret != "" {
			errs = append(errs, errors.New("--console-token-secret is for --console-auth token"))
		}
	case ConsoleAuthToken:
		if o.Console.TokenSecret == "" {
			errs = append(errs, fmt.Errorf("--console-auth token: name the Secret holding the token (key %s) with --console-token-secret", TokenKey))
		}
	default:
		errs = append(errs, fmt.Errorf("--console-auth %q: want none (no console), token or kubernetes; the console is never served without authentication", o.Console.Auth))
	}
	if o.Console.URL != "" && !o.Console.served() {
		errs = append(errs, errors.New("--console-url: no console is served: choose --console-auth token or kubernetes"))
	}
	errs = append(errs, o.Tracing.validate()...)
	ports := map[int32]string{}
	for _, p := range []struct {
		name string
		port int32
	}{{"metrics", o.MetricsPort}, {"hooks", o.HooksPort}, {"console", o.ConsolePort}, {"webhook", o.WebhookPort}, {"runners", o.RunnersPort}, {"runs-api", o.RunsAPIPort}} {
		if p.port < 1 || p.port > 65535 {
			errs = append(errs, fmt.Errorf("the %s port %d is not a port", p.name, p.port))
		}
		if other, ok := ports[p.port]; ok {
			errs = append(errs, fmt.Errorf("the %s and %s ports are both %d", other, p.name, p.port))
		}
		ports[p.port] = p.name
	}
	return errors.Join(errs...)
}
