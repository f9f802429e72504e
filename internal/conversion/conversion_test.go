package conversion

import (
	"encoding/json"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/yaml"

	"github.com/opkit-dev/opkit/internal/definition"
)

// website compiles docs/examples/website-v2/operator.yaml: v1 (spec.size) and v2
// (spec.resources.memory, spec.tls, spec.paths), v2 stored.
func website(t *testing.T) (*definition.Definition, *Converter) {
	t.Helper()
	defs, err := definition.CompileFiles("../../docs/examples/website-v2/operator.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(defs[0])
	if err != nil {
		t.Fatal(err)
	}
	return defs[0], c
}

// obj reads a YAML object, with whole numbers as int64.
func obj(t *testing.T, y string) map[string]any {
	t.Helper()
	data, err := yaml.YAMLToJSON([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := utiljson.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

const meta = `metadata:
  name: hello
  namespace: default
  uid: 0b6e4c1a-5d1e-4b8e-9d57-3c3f1f0a2a11
  resourceVersion: "4711"
  generation: 3
  labels: {team: web}
`

func convert(t *testing.T, c *Converter, o map[string]any, to string) map[string]any {
	t.Helper()
	out, err := c.Convert(o, to)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func keptOf(t *testing.T, o map[string]any, version string) map[string]any {
	t.Helper()
	ann, _ := o["metadata"].(map[string]any)["annotations"].(map[string]any)
	raw, ok := ann["opkit.dev/conversion."+version].(string)
	if !ok {
		return nil
	}
	var k map[string]any
	if err := json.Unmarshal([]byte(raw), &k); err != nil {
		t.Fatal(err)
	}
	return k
}

func TestWebsiteConvertsBetweenSizeAndMemory(t *testing.T) {
	_, c := website(t)
	for _, tc := range []struct {
		name      string
		in        string
		to        string
		want      string // the converted object's spec
		annotated string // the version whose annotation the converted object carries, if any
		keptJSON  string
	}{
		{name: "v1 small is 512Mi", in: "apiVersion: demo.example.com/v1\nkind: Website\n" + meta + "spec: {content: hi, size: small}\n", to: "v2",
			want: "{content: hi, resources: {memory: 512Mi}}"},
		{name: "v1 large is 2Gi", in: "apiVersion: demo.example.com/v1\nkind: Website\n" + meta + "spec: {content: hi, size: large, replicas: 2}\n", to: "v2",
			want: "{content: hi, replicas: 2, resources: {memory: 2Gi}}"},
		{name: "v2 1Gi is large, and 1Gi is kept", in: "apiVersion: demo.example.com/v2\nkind: Website\n" + meta + "spec: {content: hi, resources: {memory: 1Gi}}\n", to: "v1",
			want: "{content: hi, size: large}", annotated: "v2", keptJSON: `{"values":{"/spec/resources/memory":{"value":"1Gi","as":"large"}}}`},
		{name: "v2's tls and paths are kept through v1", in: "apiVersion: demo.example.com/v2\nkind: Website\n" + meta + "spec: {content: hi, resources: {memory: 512Mi}, tls: {enabled: true, secretName: web}, paths: [{path: /, public: true}]}\n", to: "v1",
			want: "{content: hi, size: small}", annotated: "v2", keptJSON: `{"fields":{"/spec/paths":[{"path":"/","public":true}],"/spec/tls":{"enabled":true,"secretName":"web"}}}`},
		{name: "v1's legacy is kept through v2", in: "apiVersion: demo.example.com/v1\nkind: Website\n" + meta + "spec: {content: hi, legacy: {banner: old}}\n", to: "v2",
			want: "{content: hi}", annotated: "v1", keptJSON: `{"fields":{"/spec/legacy":{"banner":"old"}}}`},
		{name: "an empty resources has no place in v1", in: "apiVersion: demo.example.com/v2\nkind: Website\n" + meta + "spec: {content: hi, resources: {}}\n", to: "v1",
			want: "{content: hi}", annotated: "v2", keptJSON: `{"fields":{"/spec/resources":{}}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := obj(t, tc.in)
			out := convert(t, c, in, tc.to)
			if got, want := out["spec"], obj(t, "spec: "+tc.want)["spec"]; !equality.Semantic.DeepEqual(got, want) {
				t.Errorf("spec %v, want %v", got, want)
			}
			if out["apiVersion"] != "demo.example.com/"+tc.to || out["kind"] != "Website" {
				t.Errorf("apiVersion %v kind %v", out["apiVersion"], out["kind"])
			}
			// metadata is the object's, but for the annotation.
			m := out["metadata"].(map[string]any)
			var k map[string]any
			if tc.annotated != "" {
				k = keptOf(t, out, tc.annotated)
				var want map[string]any
				_ = json.Unmarshal([]byte(tc.keptJSON), &want)
				if !equality.Semantic.DeepEqual(k, want) {
					t.Errorf("kept %v, want %s", k, tc.keptJSON)
				}
				delete(m["annotations"].(map[string]any), "opkit.dev/conversion."+tc.annotated)
				if len(m["annotations"].(map[string]any)) == 0 {
					delete(m, "annotations")
				}
			}
			if !equality.Semantic.DeepEqual(m, in["metadata"]) {
				t.Errorf("metadata %v, want %v", m, in["metadata"])
			}
			// And back: exactly the object converted.
			if tc.annotated != "" {
				m["annotations"] = map[string]any{"opkit.dev/conversion." + tc.annotated: mustJSON(k)}
			}
			from := strings.TrimPrefix(in["apiVersion"].(string), "demo.example.com/")
			if back := convert(t, c, out, from); !equality.Semantic.DeepEqual(back, in) {
				t.Errorf("back to %s:\n%v\nwant\n%v", from, back, in)
			}
		})
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestAChangeThroughTheOtherVersionWinsOverWhatWasKept(t *testing.T) {
	_, c := website(t)
	in := obj(t, "apiVersion: demo.example.com/v2\nkind: Website\n"+meta+"spec: {content: hi, resources: {memory: 1Gi}, tls: {enabled: true}}\n")
	v1 := convert(t, c, in, "v1")
	v1["spec"].(map[string]any)["size"] = "small" // a user's edit through v1
	v2 := convert(t, c, v1, "v2")
	want := obj(t, "spec: {content: hi, resources: {memory: 512Mi}, tls: {enabled: true}}")["spec"]
	if !equality.Semantic.DeepEqual(v2["spec"], want) {
		t.Errorf("spec %v, want %v: size small through v1 is 512Mi, and tls is restored", v2["spec"], want)
	}
	if _, ok := v2["metadata"].(map[string]any)["annotations"]; ok {
		t.Errorf("annotations %v: nothing is kept, so none", v2["metadata"])
	}
}

func TestAFailedConversionNamesTheExpressionAndTheObject(t *testing.T) {
	_, c := website(t)
	// The schema's pattern keeps such a value out; the converter does not
	// rely on it.
	in := obj(t, "apiVersion: demo.example.com/v2\nkind: Website\n"+meta+"spec: {content: hi, resources: {memory: lots}}\n")
	raw, _ := json.Marshal(in)
	_, err := c.ConvertObjects([]runtime.RawExtension{{Raw: raw}}, "demo.example.com/v1")
	if err == nil || !strings.Contains(err.Error(), "Website default/hello (demo.example.com/v2)") ||
		!strings.Contains(err.Error(), "spec.resource.versions[0].conversion.fields[0].fromStorage") {
		t.Errorf("error %v; want the object and the expression named", err)
	}
	if _, err := c.Convert(obj(t, "apiVersion: demo.example.com/v3\nkind: Website\n"+meta), "v1"); err == nil || !strings.Contains(err.Error(), "v3 is not a version of Website (v1, v2)") {
		t.Errorf("unknown version: %v", err)
	}
}

func TestAnAnnotationEditedByHandIsDroppedAndTheObjectStillConverts(t *testing.T) {
	_, c := website(t)
	in := obj(t, "apiVersion: demo.example.com/v1\nkind: Website\n"+meta+"  annotations: {opkit.dev/conversion.v2: 'not json', note: mine}\nspec: {content: hi, size: small}\n")
	out := convert(t, c, in, "v2")
	ann := out["metadata"].(map[string]any)["annotations"].(map[string]any)
	if len(ann) != 1 || ann["note"] != "mine" {
		t.Errorf("annotations %v; want the edited one dropped and the others kept", ann)
	}
	if got := out["spec"].(map[string]any)["resources"]; !equality.Semantic.DeepEqual(got, map[string]any{"memory": "512Mi"}) {
		t.Errorf("resources %v", got)
	}
}
