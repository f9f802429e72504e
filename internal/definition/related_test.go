package definition

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

const relatedApp = base + `  related:
  - id: app
    apiVersion: v1
    kind: ConfigMap
    name: "${self.spec.image}-config"
  - id: pods
    apiVersion: v1
    kind: ConfigMap
    namespace: "${self.metadata.namespace}-other"
    selector: {app: "${self.metadata.name}"}
  children:
  - id: copy
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${self.metadata.name}-copy"}
      data:
        fromApp: "${related.app.data.key}"
        count: "${string(size(related.pods))}"
  status:
    version: "${related.app.metadata.resourceVersion}"
`

func TestRelatedObjectsAreNamedFromSelfAndReadByChildrenAndStatus(t *testing.T) {
	for _, typed := range []bool{false, true} {
		t.Run(fmt.Sprintf("typed=%v", typed), func(t *testing.T) {
			srcs, err := Load("app.yaml", []byte(relatedApp))
			if err != nil {
				t.Fatal(err)
			}
			var d *Definition
			if typed {
				d, err = CompileWithSchemas(srcs[0], configMapSchema)
			} else {
				d, err = Compile(srcs[0])
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(d.Related) != 2 || d.Related[0].List() || !d.Related[1].List() {
				t.Fatalf("related: %+v", d.Related)
			}
			self := map[string]any{"metadata": map[string]any{"name": "a", "namespace": "team"}, "spec": map[string]any{"image": "web"}}
			ns, name, sel, err := d.Related[0].Target(self, "team")
			if err != nil || ns != "team" || name != "web-config" || sel != nil {
				t.Errorf("app: %q %q %v %v; want team web-config", ns, name, sel, err)
			}
			ns, name, sel, err = d.Related[1].Target(self, "team")
			if err != nil || ns != "team-other" || name != "" || sel.String() != "app=a" {
				t.Errorf("pods: %q %q %v %v; want team-other app=a", ns, name, sel, err)
			}

			app := map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "web-config", "resourceVersion": "7"}, "data": map[string]any{"key": "v"}}
			vars := Vars{Self: self, Children: map[string]map[string]any{}, Related: map[string]any{"app": app, "pods": []any{app, app}}}
			obj, err := child(d, "copy").Render(vars)
			if err != nil {
				t.Fatal(err)
			}
			if got := fmt.Sprint(obj["data"]); got != "map[count:2 fromApp:v]" {
				t.Errorf("data = %s", got)
			}
			if v, err := d.Status[0].Evaluate(vars); err != nil || v != "7" {
				t.Errorf("status version = %v, %v; want 7", v, err)
			}
			// The named object missing: the child waits.
			delete(vars.Related, "app")
			if _, err := child(d, "copy").Render(vars); !errors.Is(err, ErrRelatedMissing) {
				t.Errorf("render without the related object: %v; want ErrRelatedMissing", err)
			}
		})
	}
}

func TestRelatedNamespacesAreLoadedSortedAndBoundWhatIsRead(t *testing.T) {
	yaml := strings.Replace(relatedApp, `    selector: {app:`, `    namespaces: [team-other, prod]`+"\n"+`    selector: {app:`, 1)
	srcs, err := Load("app.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	d, err := Compile(srcs[0])
	if err != nil {
		t.Fatal(err)
	}
	app, pods := d.Related[0], d.Related[1]
	if len(app.Namespaces) != 0 || strings.Join(pods.Namespaces, ",") != "prod,team-other" {
		t.Fatalf("namespaces: app %v, pods %v; want none and prod,team-other", app.Namespaces, pods.Namespaces)
	}
	for _, tc := range []struct {
		rel  *Related
		ns   string
		want bool
	}{
		{app, "anywhere", true},
		{pods, "prod", true},
		{pods, "team-other", true},
		{pods, "team", false},
		{pods, "", true}, // a cluster-scoped object
	} {
		if got := tc.rel.Allows(tc.ns); got != tc.want {
			t.Errorf("%s.Allows(%q) = %v, want %v", tc.rel.ID, tc.ns, got, tc.want)
		}
	}
}

func TestBadRelatedReferencesAreErrorsNamingTheField(t *testing.T) {
	for name, tc := range map[string]struct{ from, to, want string }{
		"both":                 {`    name: "${self.spec.image}-config"`, `    name: x` + "\n" + `    selector: {a: b}`, `app.yaml:16: spec.related[0]: set one of name and selector, not both`},
		"neither":              {`    name: "${self.spec.image}-config"`, ``, `spec.related[0]: set name (one object`},
		"id":                   {`  - id: app`, `  - id: App`, `app.yaml:16: spec.related[0].id: "App" is not an id`},
		"duplicate":            {`  - id: pods`, `  - id: app`, `spec.related[1].id: duplicate related id "app"`},
		"kind":                 {`    kind: ConfigMap` + "\n" + `    name:`, `    kind: ${self.spec.image}` + "\n" + `    name:`, `spec.related[0].kind: required, and it cannot be an expression`},
		"reads child":          {`"${self.spec.image}-config"`, `"${children.copy.metadata.name}"`, `spec.related[0].name: ${children.copy.metadata.name}: a related object is named from self alone`},
		"unknown id":           {`${related.app.data.key}`, `${related.ap.data.key}`, `spec.children[0].template.data.fromApp: ${related.ap.data.key} reads related.ap, but there is no related object with id "ap" (related: app, pods)`},
		"label key":            {`selector: {app:`, `selector: {"bad key!":`, `spec.related[1].selector.bad key!: "bad key!" is not a label key`},
		"cel":                  {`"${self.spec.image}-config"`, `"${self.spec.imgae}"`, `spec.related[0].name: ${self.spec.imgae}: ERROR`},
		"namespaces":           {`    selector: {app:`, `    namespaces: [team-other, Team_B]` + "\n" + `    selector: {app:`, `spec.related[1].namespaces[1]: "Team_B" is not a namespace name`},
		"namespaces twice":     {`    selector: {app:`, `    namespaces: [a, a]` + "\n" + `    selector: {app:`, `spec.related[1].namespaces[1]: namespace "a" is listed twice`},
		"namespace not listed": {`    namespace: "${self.metadata.namespace}-other"`, `    namespace: prod` + "\n" + `    namespaces: [staging]`, `spec.related[1].namespace: "prod" is not among namespaces (staging)`},
		"served (typed)":       {`    kind: ConfigMap` + "\n" + `    name:`, `    kind: Widget` + "\n" + `    name:`, `spec.related[0].kind: kind v1 Widget is not served by the cluster`},
	} {
		t.Run(name, func(t *testing.T) {
			yaml := strings.Replace(relatedApp, tc.from, tc.to, 1)
			if yaml == relatedApp {
				t.Fatalf("%q is not in the definition", tc.from)
			}
			srcs, err := Load("app.yaml", []byte(yaml))
			if err == nil {
				if strings.HasSuffix(name, "(typed)") {
					_, err = CompileWithSchemas(srcs[0], configMapSchema)
				} else {
					_, err = Compile(srcs[0])
				}
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v\nwant %q", err, tc.want)
			}
		})
	}
}

func TestTypedRelatedFieldsTheKindDoesNotHaveAreErrors(t *testing.T) {
	srcs, err := Load("app.yaml", []byte(strings.Replace(relatedApp, "related.app.metadata.resourceVersion", "related.app.spec.replicas", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := CompileWithSchemas(srcs[0], configMapSchema); err == nil || !strings.Contains(err.Error(), "spec.status.version: ${related.app.spec.replicas}: ERROR") || !strings.Contains(err.Error(), "undefined field 'spec'") {
		t.Errorf("error %v; want undefined field 'spec'", err)
	}
	if _, err := Compile(srcs[0]); err != nil {
		t.Errorf("untyped, the same compiles: %v", err)
	}
}

func TestHandlerFieldsMayNameRelatedFields(t *testing.T) {
	handlers := `  handlers:
  - name: deployed
    on: [update]
    fields: [spec.image, "related.app.data.key", "related.pods[1].metadata.name"]
    exec: {command: [/bin/true]}
`
	d, err := compileFile(t, "app.yaml", relatedApp+handlers)
	if err != nil {
		t.Fatal(err)
	}
	h := d.Handlers[0]
	if len(h.Fields) != 1 || len(h.RelatedFields) != 2 {
		t.Fatalf("fields %v, related fields %+v", h.Fields, h.RelatedFields)
	}
	related := map[string]any{
		"app":  map[string]any{"data": map[string]any{"key": "v"}},
		"pods": []any{map[string]any{"metadata": map[string]any{"name": "a"}}, map[string]any{"metadata": map[string]any{"name": "b"}}},
	}
	if v := h.RelatedFields[0].Value(related); v != "v" {
		t.Errorf("related.app.data.key = %v", v)
	}
	if v := h.RelatedFields[1].Value(related); v != "b" {
		t.Errorf("related.pods[1].metadata.name = %v", v)
	}
	if v := h.RelatedFields[1].Value(map[string]any{}); v != nil {
		t.Errorf("a missing object's field = %v; want nil", v)
	}
	// Only related fields: a spec change concerns the handler no more.
	h.Fields = nil
	if h.Touches([]string{"spec.image"}) {
		t.Error("a handler naming only related fields is touched by a spec change")
	}

	for name, tc := range map[string]struct{ field, want string }{
		"unknown id": {`"related.ap.data"`, `app.yaml:39: spec.handlers[0].fields[1]: "related.ap.data" reads related.ap, but there is no related object with id "ap" (related: app, pods)`},
		"syntax":     {`"related.app..data"`, `spec.handlers[0].fields[1]: "related.app..data" is not a related object's field`},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := compileFile(t, "app.yaml", relatedApp+strings.Replace(handlers, `"related.app.data.key"`, tc.field, 1))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v\nwant %q", err, tc.want)
			}
		})
	}
}

func TestWhenIsAConditionOfItsTrigger(t *testing.T) {
	handler := func(on, when string) string {
		return "  handlers:\n  - name: h\n    on: [" + on + "]\n" + when + "    exec: {command: [/bin/true]}\n"
	}
	d, err := compileFile(t, "app.yaml", relatedApp+handler("when", "    when: \"children.copy.data.fromApp == 'v' && size(related.pods) > 0\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	vars := Vars{Self: map[string]any{"spec": map[string]any{}}, Children: map[string]map[string]any{"copy": {"data": map[string]any{"fromApp": "v"}}}, Related: map[string]any{"pods": []any{map[string]any{}}}}
	if ok, err := d.Handlers[0].WhenHolds(vars); err != nil || !ok {
		t.Errorf("WhenHolds = %v, %v; want true", ok, err)
	}
	delete(vars.Children, "copy")
	if _, err := d.Handlers[0].WhenHolds(vars); !errors.Is(err, ErrChildMissing) {
		t.Errorf("WhenHolds without the child: %v; want ErrChildMissing", err)
	}
	for name, tc := range map[string]struct{ on, when, want string }{
		"without the trigger": {"update", "    when: \"true\"\n", "spec.handlers[0].when: when is the condition of the when trigger, which this handler does not have"},
		"without a condition": {"when", "", "spec.handlers[0].when: required by the when trigger"},
		"not a bool":          {"when", "    when: \"self.metadata.name\"\n", "spec.handlers[0].when: ${self.metadata.name} is of type string: a condition must be a bool"},
		"unknown child":       {"when", "    when: \"has(children.cpy.data)\"\n", `spec.handlers[0].when: ${has(children.cpy.data)} reads children.cpy, but there is no child with id "cpy"`},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := compileFile(t, "app.yaml", relatedApp+handler(tc.on, tc.when))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v\nwant %q", err, tc.want)
			}
		})
	}
}
