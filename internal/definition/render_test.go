package definition

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func mustCompile(t *testing.T, yaml string) *Definition {
	t.Helper()
	d, err := compileFile(t, "test.yaml", yaml)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func child(d *Definition, id string) *Child {
	for _, c := range d.Children {
		if c.ID == id {
			return c
		}
	}
	return nil
}

func TestRenderPrinterPassesHostileTextAsOneArgument(t *testing.T) {
	d := compilePrinter(t)
	for _, text := range []string{"Hello Kube!", "$(rm -rf /)", "; echo pwned", `"quoted" 'single'`, "two\nlines", "${self.metadata.name}", strings.Repeat("x", 256)} {
		self := map[string]any{"metadata": map[string]any{"name": "p1", "namespace": "ns"}, "spec": map[string]any{"text": text}}
		obj, err := d.Children[0].Render(Vars{Self: self})
		if err != nil {
			t.Fatal(err)
		}
		containers := obj["spec"].(map[string]any)["containers"].([]any)
		command := containers[0].(map[string]any)["command"].([]any)
		if !reflect.DeepEqual(command, []any{"echo", text}) {
			t.Errorf("command %q, want [echo %q]", command, text)
		}
		if name := obj["metadata"].(map[string]any)["name"]; name != "p1-print" {
			t.Errorf("name %v", name)
		}
	}
	// The template itself is untouched.
	if cmd := d.Children[0].Template["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)["command"].([]any)[1]; cmd != "${self.spec.text}" {
		t.Errorf("template changed: %v", cmd)
	}
}

func TestRenderKeepsTypesAndSplicesStrings(t *testing.T) {
	d := mustCompile(t, base+`  children:
  - id: config
    includeWhen: ["${self.spec.replicas > 0}"]
    readyWhen: ["has(self.data)"]
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${self.metadata.name}"}
      data:
        summary: "${self.spec.image} x${self.spec.replicas} ok=${self.spec.replicas > 1}"
      binaryData: {}
      replicas: ${self.spec.replicas}
      list: ${[self.spec.image, 'b']}
  status:
    configName: ${children.config.metadata.name}
    total: ${self.spec.replicas * 2}
`)
	c := child(d, "config")
	self := map[string]any{"metadata": map[string]any{"name": "app"}, "spec": map[string]any{"image": "nginx", "replicas": int64(3)}}
	vars := Vars{Self: self}
	obj, err := c.Render(vars)
	if err != nil {
		t.Fatal(err)
	}
	if got := obj["data"].(map[string]any)["summary"]; got != "nginx x3 ok=true" {
		t.Errorf("summary %q", got)
	}
	if obj["replicas"] != int64(3) || !reflect.DeepEqual(obj["list"], []any{"nginx", "b"}) {
		t.Errorf("replicas %#v list %#v", obj["replicas"], obj["list"])
	}
	if ok, err := c.Included(vars); !ok || err != nil {
		t.Errorf("Included = %v, %v", ok, err)
	}
	self["spec"].(map[string]any)["replicas"] = int64(0)
	if ok, err := c.Included(vars); ok || err != nil {
		t.Errorf("Included with 0 replicas = %v, %v", ok, err)
	}
	if ok, _ := c.Ready(map[string]any{"metadata": map[string]any{}}); ok {
		t.Error("Ready without data")
	}
	if ok, _ := c.Ready(obj); !ok {
		t.Error("not Ready with data")
	}

	var names []string
	for _, s := range d.Status {
		names = append(names, s.Name)
	}
	if strings.Join(names, ",") != "configName,total" {
		t.Fatalf("status fields %v", names)
	}
	if _, err := d.Status[0].Evaluate(vars); !errors.Is(err, ErrChildMissing) {
		t.Errorf("status before the child exists: %v, want ErrChildMissing", err)
	}
	vars.Children = map[string]map[string]any{"config": obj}
	if v, err := d.Status[0].Evaluate(vars); err != nil || v != "app" {
		t.Errorf("configName = %v, %v", v, err)
	}
	if v, err := d.Status[1].Evaluate(vars); err != nil || v != int64(0) {
		t.Errorf("total = %#v, %v", v, err)
	}
}

func TestEvalErrorNamesTheField(t *testing.T) {
	d := mustCompile(t, base+`  status:
    ratio: ${10 / self.spec.replicas}
`)
	_, err := d.Status[0].Evaluate(Vars{Self: map[string]any{"spec": map[string]any{"replicas": int64(0)}}})
	if err == nil || !strings.Contains(err.Error(), "spec.status.ratio") || !strings.Contains(err.Error(), "division by zero") {
		t.Errorf("error %v", err)
	}
}

func TestLiteralsAndEscapesWithoutExpressions(t *testing.T) {
	d := mustCompile(t, base+`  children:
  - id: script
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: fixed}
      data: {run.sh: "echo $${HOME}", plain: "as is"}
  status:
    kind: printer
    empty: ""
`)
	obj, err := d.Children[0].Render(Vars{Self: map[string]any{}})
	if err != nil {
		t.Fatal(err)
	}
	data := obj["data"].(map[string]any)
	if data["run.sh"] != "echo ${HOME}" || data["plain"] != "as is" {
		t.Errorf("data %v: want the escape turned into ${ and the plain string kept", data)
	}
	if len(d.Children[0].Slots) != 1 {
		t.Errorf("%d slots, want 1: only the escaped string needs evaluating", len(d.Children[0].Slots))
	}
	for _, f := range d.Status {
		want := map[string]any{"kind": "printer", "empty": ""}[f.Name]
		if v, err := f.Evaluate(Vars{Self: map[string]any{}}); err != nil || v != want {
			t.Errorf("status %s = %#v, %v; want %#v", f.Name, v, err, want)
		}
	}
}
