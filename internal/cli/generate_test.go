package cli

import (
	"bytes"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

func TestGenerateManifestsPrintsTheEngineAndItsOperators(t *testing.T) {
	var stdout, stderr bytes.Buffer
	args := []string{"generate", "manifests", "-f", "../../examples/printer/operator.yaml", "--namespace", "ops", "--image", "registry.example.com/opkit:v1"}
	if code := Main(args, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var kinds []string
	for doc := range strings.SplitSeq(stdout.String(), "\n---\n") {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatalf("a document does not parse: %v\n%s", err, doc)
		}
		kinds = append(kinds, obj["kind"].(string))
	}
	want := "Namespace CustomResourceDefinition ServiceAccount ClusterRole ClusterRoleBinding PersistentVolumeClaim Deployment Service Operator"
	if got := strings.Join(kinds, " "); got != want {
		t.Errorf("kinds %s, want %s", got, want)
	}
	for _, s := range []string{"# operator printer: keeps its children v1 Pod converged", "name: ops:opkit", "image: registry.example.com/opkit:v1"} {
		if !strings.Contains(stdout.String(), s) {
			t.Errorf("the manifests lack %q", s)
		}
	}
}

func TestGenerateManifestsWithRunsAPIAddsTheAPIServiceItsServiceAndItsRBAC(t *testing.T) {
	var stdout, stderr bytes.Buffer
	args := []string{"generate", "manifests", "-f", "../../examples/printer/operator.yaml", "--image", "registry.example.com/opkit:v1", "--runs-api"}
	if code := Main(args, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	for _, s := range []string{
		"kind: APIService", "name: v1alpha1.runs.opkit.dev", "name: opkit-runs\n", "name: opkit-runs-viewer", "name: system:auth-delegator",
		"name: extension-apiserver-authentication-reader", "- --runs-api-addr\n        - :7385\n        - --runs-api-service\n        - opkit-runs\n",
		"# runs API: keeps the caBundle of its APIService current",
	} {
		if !strings.Contains(stdout.String(), s) {
			t.Errorf("the manifests lack %q", s)
		}
	}
}

func TestGenerateWithAnOTLPEndpointGivesTheEngineTheOTELEnvironment(t *testing.T) {
	otel := []string{"--otel-endpoint", "http://otel-collector.observability:4318", "--otel-protocol", "http/protobuf", "--otel-sample-ratio", "0.25"}
	var stdout, stderr bytes.Buffer
	args := []string{"generate", "manifests", "-f", "../../examples/printer/operator.yaml", "--image", "registry.example.com/opkit:v1"}
	if code := Main(append(args, otel...), &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	want := `        - name: OTEL_EXPORTER_OTLP_ENDPOINT
          value: http://otel-collector.observability:4318
        - name: OTEL_EXPORTER_OTLP_PROTOCOL
          value: http/protobuf
        - name: OTEL_SERVICE_NAME
          value: opkit
        - name: OTEL_TRACES_SAMPLER
          value: parentbased_traceidratio
        - name: OTEL_TRACES_SAMPLER_ARG
          value: "0.25"
`
	if !strings.Contains(stdout.String(), want) {
		t.Errorf("the manifests lack the engine's OTEL_* env:\n%s", want)
	}
	stdout.Reset()
	if code := Main(args, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if strings.Contains(stdout.String(), "OTEL_") {
		t.Errorf("the manifests set OTEL_* without --otel-endpoint")
	}

	stdout.Reset()
	if code := Main(append([]string{"generate", "values", "-f", "../../examples/printer/operator.yaml"}, otel...), &stdout, &stderr); code != 0 {
		t.Fatalf("values: exit %d: %s", code, stderr.String())
	}
	var v struct {
		Tracing map[string]any `json:"tracing"`
	}
	if err := yaml.Unmarshal(stdout.Bytes(), &v); err != nil {
		t.Fatal(err)
	}
	if wantValues := map[string]any{"endpoint": "http://otel-collector.observability:4318", "protocol": "http/protobuf", "sampleRatio": "0.25"}; !maps.Equal(v.Tracing, wantValues) {
		t.Errorf("values' tracing %v, want %v", v.Tracing, wantValues)
	}

	var help bytes.Buffer
	if code := Main([]string{"generate", "values", "--help"}, &help, &stderr); code != 0 {
		t.Fatalf("--help: exit %d", code)
	}
	for _, s := range []string{"--otel-endpoint", "--otel-protocol string", `(default "grpc")`, "--otel-sample-ratio", "OTEL_TRACES_SAMPLER_ARG"} {
		if !strings.Contains(help.String(), s) {
			t.Errorf("generate values --help does not say %q", s)
		}
	}
}

func TestGenerateValuesWritesTheRules(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := Main([]string{"generate", "values", "-f", "../../examples/team-watch/operator.yaml", "--allow-host-exec"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var v struct {
		Rules struct {
			Cluster    []map[string]any            `json:"cluster"`
			Namespaces map[string][]map[string]any `json:"namespaces"`
		} `json:"rules"`
		Operators struct {
			Definitions map[string]any `json:"definitions"`
		} `json:"operators"`
	}
	if err := yaml.Unmarshal(stdout.Bytes(), &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Rules.Cluster) == 0 || len(v.Rules.Namespaces["team-a"]) != 1 || v.Operators.Definitions["team-watch"] == nil {
		t.Errorf("values %+v", v)
	}
}

func TestGenerateRefusesWhatCannotWork(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--replicas", "2"}, "--archive-secret"},
		{[]string{"--console-auth", "token"}, "--console-token-secret"},
		{[]string{"--console-auth", "open"}, "the console is never served without authentication"},
		{[]string{"--archive-size", "lots"}, `--archive-size "lots": want a size such as 1Gi`},
		{[]string{"--archive-size", "-1Gi"}, `--archive-size "-1Gi"`},
		{[]string{"--archive-secret", "pg", "--archive-size", "5Gi"}, "with --archive-secret the archive is PostgreSQL's"},
		{[]string{"--archive-storage-class", "Fast Disks"}, `--archive-storage-class "Fast Disks"`},
		{[]string{"--otel-endpoint", "http://collector:4318", "--otel-protocol", "http/json"}, `--otel-protocol "http/json": want grpc or http/protobuf`},
		{[]string{"--otel-endpoint", "http://collector:4317", "--otel-sample-ratio", "2"}, `--otel-sample-ratio "2": want a decimal number from 0 to 1`},
		{[]string{"--otel-endpoint", "collector:4317"}, `--otel-endpoint "collector:4317"`},
		{[]string{"--otel-sample-ratio", "0.5"}, "give --otel-endpoint"},
	} {
		var stdout, stderr bytes.Buffer
		args := append([]string{"generate", "manifests", "-f", "../../examples/printer/operator.yaml"}, tc.args...)
		if code := Main(args, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), tc.want) || stdout.Len() > 0 {
			t.Errorf("%v: exit %d, stderr %q, %d bytes out; want 1 and an error naming %s", tc.args, code, stderr.String(), stdout.Len(), tc.want)
		}
	}
	var stdout, stderr bytes.Buffer
	if code := Main([]string{"generate", "manifests", "-f", "nosuch.yaml"}, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), "nosuch.yaml") {
		t.Errorf("a missing file: exit %d, %q", code, stderr.String())
	}
}

func TestGenerateManifestsTagsTheImageAsItsHelpSays(t *testing.T) {
	defer func(v string) { Version = v }(Version)
	for _, c := range []struct {
		version, image string
		warned         bool
	}{
		{"v1.4.0", "ghcr.io/opkit-dev/opkit:v1.4.0", false},
		{"v0.0.0-20260126123456-abcdef123456+dirty", "ghcr.io/opkit-dev/opkit:v0.0.0-20260126123456-abcdef123456-dirty", true},
		{"(devel)", "ghcr.io/opkit-dev/opkit:devel", true},
	} {
		Version = c.version
		var help, stderr bytes.Buffer
		if code := Main([]string{"generate", "manifests", "--help"}, &help, &stderr); code != 0 {
			t.Fatalf("--help: exit %d: %s", code, stderr.String())
		}
		if !strings.Contains(help.String(), "(default "+c.image) {
			t.Errorf("opkit %s: --help does not say the image defaults to %s:\n%s", c.version, c.image, help.String())
		}
		var stdout bytes.Buffer
		stderr.Reset()
		if code := Main([]string{"generate", "manifests", "-f", "../../examples/printer/operator.yaml"}, &stdout, &stderr); code != 0 {
			t.Fatalf("exit %d: %s", code, stderr.String())
		}
		if !strings.Contains(stdout.String(), "image: "+c.image+"\n") {
			t.Errorf("opkit %s: the manifests do not run %s", c.version, c.image)
		}
		if strings.Contains(help.String()+stdout.String(), "opkit:latest") {
			t.Errorf("opkit %s: --help or the manifests name an image :latest", c.version)
		}
		if warned := strings.Contains(stderr.String(), "is a development build"); warned != c.warned {
			t.Errorf("opkit %s: warned %v, want %v: %q", c.version, warned, c.warned, stderr.String())
		}
	}
}

func TestGenerateRefusesAnExecHandlerWithoutAnImageOrWarnsWithAllowHostExec(t *testing.T) {
	var stdout, stderr bytes.Buffer
	args := []string{"generate", "manifests", "-f", "../../examples/handlers/operator.yaml"}
	if code := Main(args, &stdout, &stderr); code != 1 || stdout.Len() > 0 {
		t.Fatalf("exit %d, %d bytes out; want a refusal", code, stdout.Len())
	}
	for _, s := range []string{"operator greetings, handler greet", "operator greetings, handler audit", "operator greetings, handler goodbye", "exec.image", "--allow-host-exec"} {
		if !strings.Contains(stderr.String(), s) {
			t.Errorf("the refusal does not say %q: %s", s, stderr.String())
		}
	}
	stdout.Reset()
	stderr.Reset()
	if code := Main(append(args, "--allow-host-exec"), &stdout, &stderr); code != 0 {
		t.Fatalf("--allow-host-exec: exit %d: %s", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), "warning: exec handlers without exec.image (operator greetings, handler greet;") {
		t.Errorf("--allow-host-exec: no warning naming the handlers: %s", stderr.String())
	}
	if !strings.Contains(stdout.String(), "# WARNING: exec handlers without exec.image") {
		t.Errorf("--allow-host-exec: the manifests' header does not carry the warning")
	}
}

// yaml11Keys counts, in v as sigs.k8s.io/yaml (kubectl's and Helm's
// YAML 1.1) reads it, the keys named on and those named true.
func yaml11Keys(v any) (on, trueKeys int) {
	switch v := v.(type) {
	case map[string]any:
		for k, item := range v {
			o, tr := yaml11Keys(item)
			on, trueKeys = on+o, trueKeys+tr
			switch k {
			case "on":
				on++
			case "true":
				trueKeys++
			}
		}
	case []any:
		for _, item := range v {
			o, tr := yaml11Keys(item)
			on, trueKeys = on+o, trueKeys+tr
		}
	}
	return on, trueKeys
}

func TestGeneratedOperatorsReadAsOperatorsInYAML11(t *testing.T) {
	// Written with a bare on, which opkit reads and YAML 1.1 would not.
	file := filepath.Join(t.TempDir(), "tick.yaml")
	manifest := "apiVersion: opkit.dev/v1alpha1\nkind: Operator\nmetadata: {name: tick}\nspec:\n  handlers:\n  - name: tick\n    on: [schedule]\n    schedule: {every: 1m}\n    exec: {command: [/bin/true]}\n"
	if err := os.WriteFile(file, []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"generate", "manifests", "-f", file},
		{"generate", "values", "-f", file},
	} {
		var stdout, stderr bytes.Buffer
		if code := Main(append(args, "--allow-host-exec", "--image", "registry.example.com/opkit:v1"), &stdout, &stderr); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, stderr.String())
		}
		var on, trueKeys int
		for doc := range strings.SplitSeq(stdout.String(), "\n---\n") {
			var obj map[string]any
			if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
				t.Fatalf("%v: a document does not parse: %v\n%s", args, err, doc)
			}
			if obj["kind"] == "CustomResourceDefinition" {
				continue // the Operator CRD has a property true, to refuse it
			}
			o, tr := yaml11Keys(obj)
			on, trueKeys = on+o, trueKeys+tr
		}
		if on == 0 || trueKeys > 0 {
			t.Errorf("%v: YAML 1.1 reads %d keys on and %d keys true; want the handler's on, and no true:\n%s", args, on, trueKeys, stdout.String())
		}
	}
}
