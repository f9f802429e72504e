package helm_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"helm.sh/helm/v4/pkg/chart/common"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/deploy/helm"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/manifests"
)

const chartDir = "opkit"

// runnersFixture is the operator whose exec handlers name images, in
// internal/manifests' test data.
const runnersFixture = "internal/manifests/testdata/runners"

func TestMain(m *testing.M) {
	// Helm's lint renders in lint mode, where fail logs instead of
	// failing; those lines are not this test's output.
	slog.SetDefault(slog.New(slog.DiscardHandler))
	os.Exit(m.Run())
}

// setups are definitions and options as opkit generate takes them, from
// the smallest to one with every option.
var setups = []struct {
	name  string
	files []string
	opts  manifests.Options
}{
	{"printer", []string{"printer"}, manifests.Options{}},
	{"handlers from files", []string{"handlers", "printer"}, manifests.Options{Name: "greeter", Namespace: "ops", Operators: manifests.FromFiles, AllowHostExec: true}},
	{"deploy notifier, three replicas, console with a token", []string{"deploy-notifier"}, manifests.Options{
		Replicas: 3, ArchiveSecret: "opkit-archive", AdmissionFinalizers: true, MigrateStorage: true, RunEvents: true, AllowHostExec: true,
		Console: manifests.Console{Auth: manifests.ConsoleAuthToken, TokenSecret: "opkit-console", URL: "https://opkit.example.com"},
	}},
	{"every example, console with kubernetes auth", []string{"calendar", "handlers", "printer", "rollouts", "team-watch", "website"}, manifests.Options{
		LeaderElection: true, Image: "registry.example.com/opkit:v1", Console: manifests.Console{Auth: manifests.ConsoleAuthKubernetes},
		MetricsPort: 9000, HooksPort: 9001, ConsolePort: 9002, Hooks: true, AllowHostExec: true,
	}},
	{"admission handlers, two replicas", []string{"website/admission"}, manifests.Options{Replicas: 2, ArchiveSecret: "opkit-archive", WebhookPort: 9443, AllowHostExec: true}},
	// Exec handlers in two images, with scripts in subdirectories, an
	// executable, a binary file and a Secret left out.
	{"runners", []string{runnersFixture}, manifests.Options{Version: "v1.4.0"}},
	{"runners on the dev node, two replicas", []string{runnersFixture}, manifests.Options{
		Version: "v1.4.0", DevNode: true, Replicas: 2, ArchiveSecret: "opkit-archive", Hooks: true,
	}},
	{"runners beside the printer, another release and port", []string{runnersFixture, "printer"}, manifests.Options{
		Name: "ops", Namespace: "tools", RunnersPort: 9444, Image: "registry.example.com/opkit:v1.4.0",
	}},
	{"runs API, one replica", []string{"printer"}, manifests.Options{RunsAPI: true}},
	{"runs API, three replicas, another release and port", []string{"deploy-notifier", "website/admission"}, manifests.Options{
		Name: "ops", Namespace: "tools", Replicas: 3, ArchiveSecret: "opkit-archive", RunsAPI: true, RunsAPIPort: 9445, AllowHostExec: true,
	}},
	{"tracing over http/protobuf, a quarter sampled", []string{"printer"}, manifests.Options{
		Tracing: manifests.Tracing{Endpoint: "http://otel-collector.observability:4318", Protocol: manifests.TracingHTTP, SampleRatio: "0.25"},
	}},
	{"tracing over grpc, the SDK's sampler, three replicas", []string{"deploy-notifier"}, manifests.Options{
		Replicas: 3, ArchiveSecret: "opkit-archive", AllowHostExec: true, Tracing: manifests.Tracing{Endpoint: "https://otlp.example.com:4317"},
	}},
	{"no definitions", nil, manifests.Options{}},
}

func compile(t *testing.T, examples []string) []*definition.Definition {
	t.Helper()
	var files []string
	for _, ex := range examples {
		if ex == runnersFixture {
			files = append(files, filepath.Join("..", "..", ex, "operator.yaml"))
			continue
		}
		files = append(files, filepath.Join("..", "..", "examples", ex, "operator.yaml"))
	}
	defs, err := definition.CompileFiles(files...)
	if err != nil {
		t.Fatal(err)
	}
	return defs
}

// generated returns the manifests and the values file opkit generate
// writes, read as Helm reads a values file.
func generated(t *testing.T, examples []string, opts manifests.Options) (*manifests.Manifests, common.Values) {
	t.Helper()
	m, err := manifests.New(compile(t, examples), opts)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := m.WriteValues(&b); err != nil {
		t.Fatal(err)
	}
	vals, err := common.ReadValues(b.Bytes())
	if err != nil {
		t.Fatalf("the values opkit generate values writes do not read: %v\n%s", err, b.String())
	}
	return m, vals
}

func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	c, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// render renders the chart as helm template does, and returns its
// objects, parsed.
func render(t *testing.T, c *chart.Chart, vals map[string]any, name, namespace string) ([]map[string]any, error) {
	t.Helper()
	files, err := helm.Templates(c, vals, name, namespace)
	if err != nil {
		return nil, err
	}
	var objs []map[string]any
	for file, text := range files {
		docs, err := parseDocs(text)
		if err != nil {
			t.Fatalf("%s does not parse: %v\n%s", file, err, text)
		}
		objs = append(objs, docs...)
	}
	return objs, nil
}

func parseDocs(text string) ([]map[string]any, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(text)))
	var out []map[string]any
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		var obj map[string]any
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			return nil, err
		}
		if obj != nil {
			out = append(out, obj)
		}
	}
}

func key(obj map[string]any) string {
	md, _ := obj["metadata"].(map[string]any)
	return strings.Join([]string{obj["kind"].(string), str(md["namespace"]), str(md["name"])}, " ")
}

func str(v any) string { s, _ := v.(string); return s }

// jsonObject is obj as a YAML parser gives it: numbers as float64.
func jsonObject(t *testing.T, obj any) map[string]any {
	t.Helper()
	data, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestChartPassesHelmLintWithGeneratedValues(t *testing.T) {
	for _, s := range setups {
		t.Run(s.name, func(t *testing.T) {
			m, vals := generated(t, s.files, s.opts)
			result := lint.RunAll(chartDir, vals, m.Options.Namespace)
			for _, msg := range result.Messages {
				if msg.Severity >= support.WarningSev {
					t.Errorf("helm lint: %s", msg)
				}
			}
		})
	}
}

func TestChartRendersWhatGenerateManifestsGives(t *testing.T) {
	c := loadChart(t)
	for _, s := range setups {
		t.Run(s.name, func(t *testing.T) {
			m, vals := generated(t, s.files, s.opts)
			got, err := render(t, c, vals, m.Options.Name, m.Options.Namespace)
			if err != nil {
				t.Fatalf("rendering with the generated values: %v", err)
			}
			objs, err := m.Objects()
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]map[string]any{}
			for _, u := range objs {
				// The Namespace is helm install --create-namespace's; the
				// Operator CRD is in the chart's crds/.
				if u.GetKind() == "Namespace" || u.GetKind() == "CustomResourceDefinition" {
					continue
				}
				want[key(u.Object)] = jsonObject(t, u.Object)
			}
			gotByKey := map[string]map[string]any{}
			for _, obj := range got {
				k := key(obj)
				if _, dup := gotByKey[k]; dup {
					t.Errorf("the chart renders %s twice", k)
				}
				gotByKey[k] = obj
			}
			if diff := cmp.Diff(want, gotByKey); diff != "" {
				t.Errorf("the chart (+) differs from opkit generate manifests (-):\n%s", diff)
			}
		})
	}
}

func TestChartRefusesToRenderWithoutRules(t *testing.T) {
	c := loadChart(t)
	_, err := render(t, c, map[string]any{}, "opkit", "opkit")
	if err == nil || !strings.Contains(err.Error(), "no RBAC rules given") {
		t.Fatalf("rendered with the chart's defaults (no rules): %v; want a refusal naming the rules", err)
	}
	// helm lint renders in lint mode, where fail only logs: it passes the
	// chart's defaults, as it should a chart that needs values.
}

func TestChartRefusesAWildcardRule(t *testing.T) {
	c := loadChart(t)
	for _, field := range []string{"apiGroups", "resources", "verbs"} {
		_, vals := generated(t, []string{"printer"}, manifests.Options{})
		rule := map[string]any{"apiGroups": []any{""}, "resources": []any{"secrets"}, "verbs": []any{"get"}}
		rule[field] = []any{"*"}
		rules := vals["rules"].(map[string]any)
		rules["engine"] = append(rules["engine"].([]any), rule)
		if _, err := render(t, c, vals, "opkit", "opkit"); err == nil || !strings.Contains(err.Error(), `a rule has `+field+` "*"`) {
			t.Errorf("rendered with a rule of %s \"*\": %v; want a refusal", field, err)
		}
	}
}

func TestChartRefusesReplicasWithoutASharedArchive(t *testing.T) {
	c := loadChart(t)
	_, vals := generated(t, []string{"printer"}, manifests.Options{})
	vals["replicas"] = 2
	if _, err := render(t, c, vals, "opkit", "opkit"); err == nil || !strings.Contains(err.Error(), "archive.secretName") {
		t.Errorf("rendered two replicas without an archive Secret: %v; want a refusal", err)
	}
}

func TestChartRefusesTheRunsAPIWithoutItsRules(t *testing.T) {
	c := loadChart(t)
	_, vals := generated(t, []string{"printer"}, manifests.Options{})
	vals["runsApi"] = map[string]any{"enabled": true}
	if _, err := render(t, c, vals, "opkit", "opkit"); err == nil || !strings.Contains(err.Error(), "opkit generate values --runs-api") {
		t.Errorf("rendered the runs API with rules that do not grant it: %v; want a refusal naming opkit generate values --runs-api", err)
	}
	_, vals = generated(t, []string{"printer"}, manifests.Options{RunsAPI: true})
	if _, err := render(t, c, vals, "opkit", "opkit"); err != nil {
		t.Errorf("the values of opkit generate values --runs-api: %v", err)
	}
}

func TestChartCRDIsTheOperatorCRD(t *testing.T) {
	c := loadChart(t)
	crds := c.CRDObjects()
	if len(crds) != 1 {
		t.Fatalf("crds/ holds %d files; want the Operator CRD", len(crds))
	}
	var got map[string]any
	if err := yaml.Unmarshal(crds[0].File.Data, &got); err != nil {
		t.Fatal(err)
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(v1alpha1.CustomResourceDefinition())
	if err != nil {
		t.Fatal(err)
	}
	delete(u, "status")
	delete(u["metadata"].(map[string]any), "creationTimestamp")
	if diff := cmp.Diff(jsonObject(t, u), got); diff != "" {
		t.Errorf("%s (+) is not api/v1alpha1's Operator CRD (-); write it again:\n%s", crds[0].Filename, diff)
	}
}

func TestChartLabelsItsOperatorsAndRunsOnlyThose(t *testing.T) {
	c := loadChart(t)
	_, vals := generated(t, []string{"printer"}, manifests.Options{})
	ops, _ := vals["operators"].(map[string]any)
	if ops == nil || ops["from"] != "cluster" {
		t.Fatalf("the generated values' operators %v; want them from the cluster", ops)
	}
	ops["labels"] = map[string]any{"team": "payments", "tier": "one"}
	objs, err := render(t, c, vals, "opkit", "payments")
	if err != nil {
		t.Fatal(err)
	}
	var args []string
	operators := 0
	for _, obj := range objs {
		switch obj["kind"] {
		case "Deployment":
			spec, _, _ := unstructured.NestedSlice(obj, "spec", "template", "spec", "containers")
			for _, a := range spec[0].(map[string]any)["args"].([]any) {
				args = append(args, str(a))
			}
		case "Operator":
			operators++
			labels, _, _ := unstructured.NestedStringMap(obj, "metadata", "labels")
			if labels["team"] != "payments" || labels["tier"] != "one" {
				t.Errorf("Operator %s has labels %v; want team=payments and tier=one", key(obj), labels)
			}
		}
	}
	if operators == 0 {
		t.Fatal("the chart renders no Operator")
	}
	if i := slices.Index(args, "--selector"); i < 0 || i+1 >= len(args) || args[i+1] != "team=payments,tier=one" {
		t.Errorf("the engine's args %q; want --selector team=payments,tier=one", args)
	}
	ops["from"] = "files"
	if _, err := render(t, c, vals, "opkit", "payments"); err == nil || !strings.Contains(err.Error(), "operators.labels: only with operators.from cluster") {
		t.Errorf("rendered operators.labels with operators from files: %v; want a refusal", err)
	}
}

// engineEnv is the OTEL_* environment of the engine's container among
// objs.
func engineEnv(t *testing.T, objs []map[string]any) map[string]string {
	t.Helper()
	for _, obj := range objs {
		if obj["kind"] != "Deployment" || key(obj) != "Deployment opkit opkit" {
			continue
		}
		containers, _, _ := unstructured.NestedSlice(obj, "spec", "template", "spec", "containers")
		env := map[string]string{}
		for _, e := range containers[0].(map[string]any)["env"].([]any) {
			if name := str(e.(map[string]any)["name"]); strings.HasPrefix(name, "OTEL_") {
				env[name] = str(e.(map[string]any)["value"])
			}
		}
		return env
	}
	t.Fatal("the chart renders no Deployment opkit")
	return nil
}

// Tracing is off by default (no OTEL_* variable); tracing.sampleRatio
// given as a number, as a hand-written values file may, renders as the
// string the engine reads; values that cannot work are refused, naming
// the value.
func TestChartTracing(t *testing.T) {
	c := loadChart(t)
	_, vals := generated(t, []string{"printer"}, manifests.Options{})
	objs, err := render(t, c, vals, "opkit", "opkit")
	if err != nil {
		t.Fatal(err)
	}
	if env := engineEnv(t, objs); len(env) > 0 {
		t.Errorf("env %v with the default values; want no OTEL_* variable", env)
	}
	for _, ratio := range []any{0.25, 0, 1, "0.5"} {
		vals["tracing"] = map[string]any{"endpoint": "http://otel-collector.observability:4317", "protocol": "grpc", "sampleRatio": ratio}
		objs, err := render(t, c, vals, "opkit", "opkit")
		if err != nil {
			t.Fatalf("sampleRatio %v: %v", ratio, err)
		}
		want := map[string]string{
			"OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel-collector.observability:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_SERVICE_NAME": "opkit",
			"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": fmt.Sprint(ratio),
		}
		if diff := cmp.Diff(want, engineEnv(t, objs)); diff != "" {
			t.Errorf("sampleRatio %v: the engine's OTEL_* env (+) is not (-):\n%s", ratio, diff)
		}
	}
	for _, tc := range []struct {
		tracing map[string]any
		want    string
	}{
		{map[string]any{"endpoint": "http://collector:4318", "protocol": "http/json", "sampleRatio": ""}, `tracing.protocol "http/json": want grpc or http/protobuf`},
		{map[string]any{"endpoint": "collector:4317", "protocol": "grpc", "sampleRatio": ""}, `tracing.endpoint "collector:4317"`},
		{map[string]any{"endpoint": "http://collector:4317", "protocol": "grpc", "sampleRatio": "1.5"}, `tracing.sampleRatio "1.5": want a decimal number from 0 to 1`},
		{map[string]any{"endpoint": "http://collector:4317", "protocol": "grpc", "sampleRatio": -0.5}, `tracing.sampleRatio "-0.5"`},
		{map[string]any{"endpoint": "http://collector:4317", "protocol": "grpc", "sampleRatio": "1e-2"}, `tracing.sampleRatio "1e-2"`},
		{map[string]any{"endpoint": "", "protocol": "grpc", "sampleRatio": "0.5"}, "tracing.sampleRatio: no spans are exported: set tracing.endpoint"},
	} {
		vals["tracing"] = tc.tracing
		if _, err := render(t, c, vals, "opkit", "opkit"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("tracing %v: %v; want a refusal saying %s", tc.tracing, err, tc.want)
		}
	}
}
