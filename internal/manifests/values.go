package manifests

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"

	"go.yaml.in/yaml/v3"

	"github.com/opkit-dev/opkit/internal/definition"
)

// The values of the Helm chart deploy/helm/opkit: with them it renders
// the objects Objects returns, but the Namespace (helm install
// --create-namespace makes it) and the Operator CRD, which is in the
// chart's crds/ (Helm installs it before the rest); the release's name
// and namespace are Options.Name and Options.Namespace.
type values struct {
	Image               string        `json:"image" yaml:"image"`
	Replicas            int32         `json:"replicas" yaml:"replicas"`
	LeaderElection      bool          `json:"leaderElection" yaml:"leaderElection"`
	AdmissionFinalizers bool          `json:"admissionFinalizers" yaml:"admissionFinalizers"`
	MigrateStorage      bool          `json:"migrateStorage" yaml:"migrateStorage"`
	RunEvents           bool          `json:"runEvents" yaml:"runEvents"`
	DevNode             bool          `json:"devNode" yaml:"devNode"`
	Archive             archiveValues `json:"archive" yaml:"archive"`
	Console             consoleValues `json:"console" yaml:"console"`
	Hooks               hooksValues   `json:"hooks" yaml:"hooks"`
	Webhook             hooksValues   `json:"webhook" yaml:"webhook"`
	RunsAPI             hooksValues   `json:"runsApi" yaml:"runsApi"`
	Tracing             tracingValues `json:"tracing" yaml:"tracing"`
	Ports               portValues    `json:"ports" yaml:"ports"`
	Resources           any           `json:"resources" yaml:"resources"`
	Operators           operatorsVal  `json:"operators" yaml:"operators"`
	Runners             runnersValues `json:"runners" yaml:"runners"`
	Rules               rulesValues   `json:"rules" yaml:"rules"`
}

// runnersValues are the runners of the operators whose exec handlers
// name an image, by operator.
type runnersValues struct {
	Operators map[string]runnerValues `json:"operators" yaml:"operators"`
}

type runnerValues struct {
	// Images are those its exec handlers name: a runner Deployment each.
	Images []string    `json:"images" yaml:"images"`
	Files  filesValues `json:"files" yaml:"files"`
}

// filesValues are the operator's directory, as its ConfigMap holds it.
type filesValues struct {
	Data map[string]string `json:"data" yaml:"data"`
	// BinaryData is base64, as in a ConfigMap.
	BinaryData map[string]string `json:"binaryData" yaml:"binaryData"`
	Items      []itemValues      `json:"items" yaml:"items"`
}

type itemValues struct {
	Key  string `json:"key" yaml:"key"`
	Path string `json:"path" yaml:"path"`
	Mode *int32 `json:"mode,omitempty" yaml:"mode,omitempty"`
}

type archiveValues struct {
	SecretName       string `json:"secretName" yaml:"secretName"`
	Size             string `json:"size" yaml:"size"`
	StorageClassName string `json:"storageClassName" yaml:"storageClassName"`
}

type consoleValues struct {
	Auth        string `json:"auth" yaml:"auth"`
	TokenSecret string `json:"tokenSecret" yaml:"tokenSecret"`
	URL         string `json:"url" yaml:"url"`
}

type tracingValues struct {
	Endpoint    string `json:"endpoint" yaml:"endpoint"`
	Protocol    string `json:"protocol" yaml:"protocol"`
	SampleRatio string `json:"sampleRatio" yaml:"sampleRatio"`
}

type hooksValues struct {
	Enabled bool `json:"enabled" yaml:"enabled"`
}

type portValues struct {
	Metrics int32 `json:"metrics" yaml:"metrics"`
	Hooks   int32 `json:"hooks" yaml:"hooks"`
	Console int32 `json:"console" yaml:"console"`
	Webhook int32 `json:"webhook" yaml:"webhook"`
	Runners int32 `json:"runners" yaml:"runners"`
	RunsAPI int32 `json:"runsApi" yaml:"runsApi"`
}

type operatorsVal struct {
	From string `json:"from" yaml:"from"`
	// Definitions are the Operator objects, by name.
	Definitions map[string]any `json:"definitions" yaml:"definitions"`
}

type rulesValues struct {
	Cluster    []any            `json:"cluster" yaml:"cluster"`
	Namespaces map[string][]any `json:"namespaces" yaml:"namespaces"`
	Engine     []any            `json:"engine" yaml:"engine"`
}

func (m *Manifests) values() (*values, error) {
	o := m.Options
	v := &values{
		Image: o.Image, Replicas: o.Replicas, LeaderElection: o.LeaderElection, AdmissionFinalizers: o.AdmissionFinalizers, MigrateStorage: o.MigrateStorage, RunEvents: o.RunEvents, DevNode: o.DevNode,
		Archive:   archiveValues{SecretName: o.ArchiveSecret, Size: o.ArchiveSize, StorageClassName: o.ArchiveStorageClass},
		Console:   consoleValues{Auth: o.Console.Auth, TokenSecret: o.Console.TokenSecret, URL: o.Console.URL},
		Hooks:     hooksValues{Enabled: o.Hooks},
		Webhook:   hooksValues{Enabled: o.Webhook},
		RunsAPI:   hooksValues{Enabled: o.RunsAPI},
		Tracing:   tracingValues{Endpoint: o.Tracing.Endpoint, Protocol: o.Tracing.Protocol, SampleRatio: o.Tracing.SampleRatio},
		Ports:     portValues{Metrics: o.MetricsPort, Hooks: o.HooksPort, Console: o.ConsolePort, Webhook: o.WebhookPort, Runners: o.RunnersPort, RunsAPI: o.RunsAPIPort},
		Operators: operatorsVal{From: o.Operators, Definitions: map[string]any{}},
		Runners:   runnersValues{Operators: map[string]runnerValues{}},
		Rules:     rulesValues{Namespaces: map[string][]any{}},
	}
	var err error
	if v.Resources, err = jsonValue(o.Resources); err != nil {
		return nil, err
	}
	for _, op := range m.operators() {
		u, err := toUnstructured(op)
		if err != nil {
			return nil, err
		}
		v.Operators.Definitions[op.Name] = u.Object
	}
	for _, r := range m.runners {
		f := filesValues{Data: r.files.Data, BinaryData: map[string]string{}, Items: []itemValues{}}
		for k, b := range r.files.BinaryData {
			f.BinaryData[k] = base64.StdEncoding.EncodeToString(b)
		}
		for _, it := range r.files.Items {
			f.Items = append(f.Items, itemValues{Key: it.Key, Path: it.Path, Mode: it.Mode})
		}
		v.Runners.Operators[r.name] = runnerValues{Images: r.images, Files: f}
	}
	list := func(rules []Rule) ([]any, error) {
		out := []any{}
		for _, r := range rules {
			x, err := jsonValue(r.PolicyRule)
			if err != nil {
				return nil, err
			}
			out = append(out, x)
		}
		return out, nil
	}
	if v.Rules.Cluster, err = list(m.Rules.Cluster); err != nil {
		return nil, err
	}
	if v.Rules.Engine, err = list(m.Rules.Engine); err != nil {
		return nil, err
	}
	for ns, rules := range m.Rules.Namespaces {
		if v.Rules.Namespaces[ns], err = list(rules); err != nil {
			return nil, err
		}
	}
	return v, nil
}

// Values returns the chart's values, as Helm reads them from a file.
func (m *Manifests) Values() (map[string]any, error) {
	v, err := m.values()
	if err != nil {
		return nil, err
	}
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var out map[string]any
	return out, json.Unmarshal(data, &out)
}

// WriteValues writes the chart's values as a YAML file, each rule under a
// comment saying why it is there.
func (m *Manifests) WriteValues(w io.Writer) error {
	v, err := m.values()
	if err != nil {
		return err
	}
	var doc yaml.Node
	if err := doc.Encode(v); err != nil {
		return err
	}
	rules := definition.MappingValue(&doc, "rules")
	commentRules(definition.MappingValue(rules, "cluster"), m.Rules.Cluster)
	commentRules(definition.MappingValue(rules, "engine"), m.Rules.Engine)
	for ns, rs := range m.Rules.Namespaces {
		commentRules(definition.MappingValue(definition.MappingValue(rules, "namespaces"), ns), rs)
	}
	for key, comment := range map[string]string{
		"rules":     "The engine's RBAC rules: a ClusterRole (cluster), a Role in each namespace\nthat a definition names (namespaces), and a Role in the release's namespace\n(engine). The chart refuses to render without them, and refuses a \"*\".",
		"operators": fmt.Sprintf("The definitions: applied as Operator objects (from: %s) or mounted as\nfiles in a ConfigMap (from: %s).", FromCluster, FromFiles),
		"archive":   fmt.Sprintf("secretName: a Secret in the release's namespace whose key %s is the archive's\nPostgreSQL URL; empty: SQLite on the PersistentVolumeClaim RELEASE-archive of\nsize and storageClassName (empty: the cluster's default), kept across\nupgrades; size \"0\": an emptyDir, lost with the Pod.", ArchiveKey),
		"console":   "auth none serves no console; token (a Secret's key token) or kubernetes serve it.",
		"runsApi":   "The runs API, runs.opkit.dev (kubectl get runs, docs/runs-api.md): an\nAPIService, the whole cluster's; the rules must grant it (opkit generate\nvalues --runs-api writes them).",
		"tracing":   "The engine's spans (runs, reconciles, deliveries), exported with OTLP to\nendpoint (empty: none) over protocol grpc or http/protobuf; sampleRatio in\n[0,1] (empty: every trace, or as its parent decided) (docs/observability.md).",
		"runners":   "The runners of the operators whose exec handlers name exec.image, by operator:\nthe images (a runner Deployment each) and the operator's directory, as its\nConfigMap OPERATOR-files holds it (docs/production.md).",
	} {
		for i := 0; i+1 < len(doc.Content); i += 2 {
			if doc.Content[i].Value == key {
				doc.Content[i].HeadComment = comment
			}
		}
	}
	var b bytes.Buffer
	b.WriteString(m.header("values"))
	b.WriteString("# For the chart deploy/helm/opkit: helm install " + m.Options.Name + " deploy/helm/opkit -n " + m.Options.Namespace + " --create-namespace -f THIS_FILE\n")
	if err := encode(&b, &doc); err != nil {
		return err
	}
	_, err = w.Write(b.Bytes())
	return err
}
