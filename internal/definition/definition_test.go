package definition

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

func compileFile(t *testing.T, name, content string) (*Definition, error) {
	t.Helper()
	srcs, err := Load(name, []byte(content))
	if err != nil {
		return nil, err
	}
	if len(srcs) != 1 {
		t.Fatalf("%s: %d operators, want 1", name, len(srcs))
	}
	return Compile(srcs[0])
}

// compilePrinter compiles testdata/printer.yaml.
func compilePrinter(t *testing.T) *Definition {
	t.Helper()
	srcs, err := LoadFile("testdata/printer.yaml")
	if err != nil {
		t.Fatal(err)
	}
	d, err := Compile(srcs[0])
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestPrinterCompiles(t *testing.T) {
	d := compilePrinter(t)
	if want := (schema.GroupVersionKind{Group: "demo.example.com", Version: "v1", Kind: "Printer"}); d.GVK != want || d.Plural != "printers" {
		t.Errorf("GVK %v plural %q", d.GVK, d.Plural)
	}
	if len(d.Children) != 1 || d.Children[0].GVK.Kind != "Pod" || len(d.Children[0].Slots) != 2 {
		t.Fatalf("children: %+v", d.Children)
	}
	if len(d.Status) != 1 || d.Status[0].Name != "phase" || d.Status[0].Slot.Expressions()[0].Children[0] != "pod" {
		t.Errorf("status: %+v", d.Status)
	}
}

const base = `apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: app}
spec:
  resource:
    group: demo.example.com
    kind: App
    versions:
    - name: v1
      schema:
        type: object
        properties:
          image: {type: string}
          replicas: {type: integer}
`

func TestDependentChildrenAreOrdered(t *testing.T) {
	d, err := compileFile(t, "app.yaml", base+`  children:
  - id: deployment
    template:
      apiVersion: apps/v1
      kind: Deployment
      metadata:
        name: ${self.metadata.name}
        annotations: {config-hash: "${children.config.metadata.resourceVersion}"}
  - id: config
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${self.metadata.name}-config"}
      data: {replicas: "${self.spec.replicas}"}
`)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, c := range d.Children {
		ids = append(ids, c.ID)
	}
	if strings.Join(ids, ",") != "config,deployment" || strings.Join(d.Children[1].DependsOn, ",") != "config" {
		t.Errorf("order %v, deployment depends on %v; want config first", ids, d.Children[1].DependsOn)
	}
}

func TestBadDefinitionsNameTheFieldAndLine(t *testing.T) {
	child := func(id, extra string) string {
		return "  - id: " + id + "\n    template:\n      apiVersion: v1\n      kind: ConfigMap\n      metadata: {name: \"${self.metadata.name}-" + id + "\"}\n" + extra
	}
	for _, tc := range []struct {
		name    string
		yaml    string
		line    int
		field   string
		message string
	}{
		{"broken YAML", base + "  children:\n  - id: a\n   template: {}\n", 16, "", "invalid YAML"},
		{"a tab", base + "  children:\n\t- id: a\n", 16, "", "invalid YAML near this line"},
		{"a tab that starts the file", "\t" + base, 1, "", "invalid YAML near this line: a tab: YAML indents with spaces only"},
		{"unknown field", base + "  childs: []\n", 15, "spec.childs", "unknown field"},
		{"wrong type", base + "  children:\n  - id: a\n    recreate: sometimes\n    template: {}\n", 17, "spec.children[0].recreate", "expected a boolean, got a string"},
		{"CEL syntax error", base + "  children:\n" + child("a", "      data: {x: \"${self.spec.image +}\"}\n"), 21, "spec.children[0].template.data.x", "Syntax error"},
		{"missing field", base + "  children:\n" + child("a", "      data: {x: \"${self.spec.imag}\"}\n"), 21, "spec.children[0].template.data.x", "undefined field 'imag'"},
		{"missing child", base + "  status:\n    ready: ${children.nosuch.status}\n", 16, "spec.status.ready", `no child with id "nosuch"`},
		{"cycle", base + "  children:\n" +
			child("a", "      data: {x: \"${children.b.metadata.name}\"}\n") +
			child("b", "      data: {x: \"${children.c.metadata.name}\"}\n") +
			child("c", "      data: {x: \"${children.a.metadata.name}\"}\n"), 15, "spec.children", "cycle: a -> b -> c -> a"},
		{"duplicate child id", base + "  children:\n" + child("a", "") + child("a", ""), 0, "spec.children", "Duplicate"},
		{"bad group", strings.Replace(base, "demo.example.com", "nodot", 1), 6, "spec.resource.group", "not an API group"},
		{"two storage versions", strings.Replace(base, "    - name: v1\n", "    - name: v2\n      storage: true\n    - name: v1\n      storage: true\n", 1), 12, "spec.resource.versions[1].storage", "exactly one"},
		{"list in a string", base + "  children:\n" + child("a", "      data: {x: \"n=${[1, 2]}\"}\n"), 21, "spec.children[0].template.data.x", "cannot be part of a longer string"},
		{"reserved status", base + "  status:\n    conditions: ${self.spec.image}\n", 16, "spec.status.conditions", "written by opkit"},
		{"not an Operator", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n", 2, "kind", "opkit reads Operators"},
		{"expression kind", base + "  children:\n  - id: a\n    template:\n      apiVersion: v1\n      kind: ${self.spec.image}\n      metadata: {name: x}\n", 19, "spec.children[0].template.kind", "cannot be an expression"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := compileFile(t, "bad.yaml", tc.yaml)
			if err == nil {
				t.Fatal("compiled")
			}
			es, ok := errors.AsType[Errors](err)
			if !ok {
				t.Fatalf("error %T %v, want Errors", err, err)
			}
			e := es[0]
			if tc.name == "duplicate child id" {
				// Two ids collide: the second child is named.
				if !strings.Contains(err.Error(), `spec.children[1].id: duplicate child id "a"`) {
					t.Errorf("error %q", err)
				}
				return
			}
			if e.File != "bad.yaml" || (tc.line != 0 && e.Line != tc.line) || e.Field != tc.field || !strings.Contains(e.Message, tc.message) {
				t.Errorf("got %s (line %d, field %q)\nwant line %d, field %q, message containing %q", err, e.Line, e.Field, tc.line, tc.field, tc.message)
			}
		})
	}
}

func TestSplitTemplate(t *testing.T) {
	for in, want := range map[string][]string{
		"plain":                  {"L:plain"},
		"${a}":                   {"E:a"},
		"x-${a}-y":               {"L:x-", "E:a", "L:-y"},
		"${ {'k': 'v}'}['k'] }":  {"E:{'k': 'v}'}['k']"},
		"$${not} ${a}":           {"L:${not} ", "E:a"},
		"${a}${b}":               {"E:a", "E:b"},
		`${"}"}`:                 {`E:"}"`},
		"echo $(VAR) and ${x}":   {"L:echo $(VAR) and ", "E:x"},
		"a ${'it\\'s'} b":        {"L:a ", `E:'it\'s'`, "L: b"},
		"$$$${x}":                {"L:$$${x}"},
		"cost: $5, ${price} now": {"L:cost: $5, ", "E:price", "L: now"},
	} {
		parts, err := splitTemplate(in)
		if err != nil {
			t.Errorf("%q: %v", in, err)
			continue
		}
		var got []string
		for _, p := range parts {
			if p.expr != nil {
				got = append(got, "E:"+p.expr.Source)
			} else {
				got = append(got, "L:"+p.literal)
			}
		}
		if strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
	for _, bad := range []string{"${a", "x ${ {'a': 1} ", "${}"} {
		if _, err := splitTemplate(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestPlural(t *testing.T) {
	for in, want := range map[string]string{"printer": "printers", "class": "classes", "policy": "policies", "gateway": "gateways", "box": "boxes", "match": "matches"} {
		if got := plural(in); got != want {
			t.Errorf("plural(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestLoadFileReadsSeveralDocuments(t *testing.T) {
	data, err := os.ReadFile("testdata/printer.yaml")
	if err != nil {
		t.Fatal(err)
	}
	two := string(data) + "---\n# an empty document is skipped\n---\n" + strings.Replace(string(data), "name: printer", "name: printer-two", 1)
	path := filepath.Join(t.TempDir(), "two.yaml")
	if err := os.WriteFile(path, []byte(two), 0o600); err != nil {
		t.Fatal(err)
	}
	srcs, err := LoadFile(path)
	if err != nil || len(srcs) != 2 || srcs[1].Operator.Name != "printer-two" {
		t.Fatalf("LoadFile: %v, %d sources", err, len(srcs))
	}
	if _, err := LoadFile(filepath.Join(t.TempDir(), "missing.yaml")); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("missing file: %v", err)
	}
}

// manyMistakes has twelve mistakes of different kinds, each on its own line.
const manyMistakes = `apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: backup}
spec:
  resource:
    group: demo.example.com
    kind: Backup
    versions:
    - name: v1
      schema:
        type: object
        properties:
          retain: {type: integer}
        x-kubernetes-validations:
        - {rule: "self.retian <= 100", message: "keep at most 100"}
      printerColumns:
      - {name: Retain, jsonPath: spec.retain, type: integer}
  children:
  - id: conf
    recreate: sometimes
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${self.metadata.name}-conf"}
      data: {retain: "${self.spec.retian}"}
  status:
    kept: "${self.spec.retain +}"
  handlers:
  - name: Backup_Now
    on: [create, explode]
    exec: {command: [./backup.py, true, 3]}
  - name: prune
    on: [schedule]
    schedule: {every: "${self.spec.every}"}
    retry: {maxAttempts: 0, factor: 0.5}
    exec: {command: [./prune.py]}
  - name: notify
    on: [delete]
    timeout: 48h
    http: {url: "ftp://example.com"}
`

func TestEveryMistakeOfAFileIsReportedAtOnceWithItsLine(t *testing.T) {
	_, err := compileFile(t, "backup.yaml", manyMistakes)
	if err == nil {
		t.Fatal("compiled")
	}
	for _, want := range []string{
		"backup.yaml:17: spec.resource.versions[0].printerColumns[0].jsonPath:",
		"backup.yaml:20: spec.children[0].recreate: expected a boolean, got a string",
		"backup.yaml:25: spec.children[0].template.data.retain: ${self.spec.retian}",
		"backup.yaml:27: spec.status.kept: ${self.spec.retain +}",
		"backup.yaml:29: spec.handlers[0].name:",
		"backup.yaml:30: spec.handlers[0].on[1]: unknown trigger \"explode\"",
		"backup.yaml:31: spec.handlers[0].exec.command[1]: expected a string, got a boolean",
		"backup.yaml:31: spec.handlers[0].exec.command[2]: expected a string, got an integer",
		"backup.yaml:34: spec.handlers[1].schedule.every:",
		"backup.yaml:35: spec.handlers[1].retry.maxAttempts: 0: should be greater than or equal to 1",
		"backup.yaml:35: spec.handlers[1].retry.factor: 0.5 is outside 1 to 10",
		"backup.yaml:39: spec.handlers[2].timeout: 48h0m0s is longer than the 24h limit",
		"backup.yaml:40: spec.handlers[2].http.url: \"ftp://example.com\" is not an http or https URL",
		"backup.yaml:15: spec.resource.versions[0].schema.x-kubernetes-validations[0].rule: \"self.retian <= 100\" does not compile: ERROR: <input>:1:5: undefined field 'retian'",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("errors lack %q", want)
		}
	}
	if t.Failed() {
		t.Logf("all errors:\n%v", err)
	}
}

func TestAKindThatShadowsABuiltInOneIsWarned(t *testing.T) {
	d, err := compileFile(t, "app.yaml", strings.Replace(base, "kind: App", "kind: Deployment", 1))
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Warnings) != 1 || !strings.Contains(d.Warnings[0].Error(), "app.yaml:7: spec.resource.kind: kind Deployment in group demo.example.com shadows the built-in apps/v1 Deployment") {
		t.Errorf("warnings %v; want one naming the line and the built-in kind", d.Warnings)
	}
	if d, err := compileFile(t, "app.yaml", base); err != nil || len(d.Warnings) != 0 {
		t.Errorf("a kind of its own: warnings %v (%v)", d.Warnings, err)
	}
}
