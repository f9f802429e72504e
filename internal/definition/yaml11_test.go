package definition

import (
	"strings"
	"testing"
)

func TestABareOnIsWarnedOfAtItsLineAsKubectlReadsItAsTrue(t *testing.T) {
	handlers := func(on string) string {
		return base + "  handlers:\n  - name: a\n    " + on + ": [create]\n    exec: {command: [/bin/true]}\n" +
			"  - {name: b, " + on + ": [update], exec: {command: [/bin/true]}}\n"
	}
	d, err := compileFile(t, "app.yaml", handlers("on"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`app.yaml:17: spec.handlers[0].on: kubectl and other YAML 1.1 tools read a bare on as true: write "on":`,
		`app.yaml:19: spec.handlers[1].on: kubectl and other YAML 1.1 tools read a bare on as true: write "on":`,
	}
	if got := d.Warnings.Error(); got != strings.Join(want, "\n") {
		t.Errorf("warnings:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
	if len(d.Handlers) != 2 || d.Handlers[0].On[0] != "create" {
		t.Errorf("the handlers of a bare on did not load as opkit reads them: %+v", d.Handlers)
	}
	for _, on := range []string{`"on"`, `'on'`, `!!str on`} {
		d, err := compileFile(t, "app.yaml", handlers(on))
		if err != nil || len(d.Warnings) != 0 {
			t.Errorf("%s: %v, warnings %v; want none", on, err, d.Warnings)
		}
	}
}

func TestEveryKeyThatYAML11ReadsAsABooleanIsWarnedOf(t *testing.T) {
	src := strings.Replace(base, "          replicas: {type: integer}\n",
		"          replicas: {type: integer}\n          y: {type: integer}\n          \"n\": {type: integer}\n          Off: {type: boolean}\n          true: {type: boolean}\n", 1)
	d, err := compileFile(t, "app.yaml", src)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Join([]string{
		`app.yaml:15: spec.resource.versions[0].schema.properties.y: kubectl and other YAML 1.1 tools read a bare y as true: write "y":`,
		`app.yaml:17: spec.resource.versions[0].schema.properties.Off: kubectl and other YAML 1.1 tools read a bare Off as false: write "Off":`,
	}, "\n")
	if got := d.Warnings.Error(); got != want {
		t.Errorf("warnings:\n%s\nwant:\n%s", got, want)
	}
}

func TestAHandlerOfKubectlsBareOnSaysToQuoteIt(t *testing.T) {
	// What a YAML 1.1 tool writes back of a bare on, as yq v3 does.
	_, err := compileFile(t, "app.yaml", base+"  handlers:\n  - name: a\n    \"true\": [create]\n    exec: {command: [/bin/true]}\n")
	if err == nil || !strings.Contains(err.Error(), `app.yaml:17: spec.handlers[0].true: a handler has no field true: write "on": quoted: YAML 1.1 tools (kubectl) read a bare on as true`) {
		t.Errorf("error %v; want one at the true key saying to write \"on\": quoted", err)
	}
}
