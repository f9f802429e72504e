package conversion

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utiljson "k8s.io/apimachinery/pkg/util/json"

	"github.com/opkit-dev/opkit/internal/definition"
)

// generator makes random objects that a version's schema holds, as the
// API server would pass them: every field optional, enums and patterns
// honoured, lists of 0 to 3 items, nested objects.
type generator struct {
	r *rand.Rand
	// strings gives the values of constrained strings, by field path.
	strings map[string][]string
}

func (g *generator) value(path string, s *structuralschema.Structural) any {
	switch s.Type {
	case "object":
		out := map[string]any{}
		for _, name := range slices.Sorted(maps.Keys(s.Properties)) {
			if g.r.IntN(3) == 0 {
				continue // missing
			}
			prop := s.Properties[name]
			out[name] = g.value(path+"."+name, &prop)
		}
		return out
	case "array":
		out := []any{}
		for range g.r.IntN(4) {
			out = append(out, g.value(path+"[]", s.Items))
		}
		return out
	case "integer":
		return int64(g.r.IntN(11))
	case "boolean":
		return g.r.IntN(2) == 0
	case "string":
		if vs := g.strings[path]; vs != nil {
			return vs[g.r.IntN(len(vs))]
		}
		if s.ValueValidation != nil && len(s.ValueValidation.Enum) > 0 {
			return s.ValueValidation.Enum[g.r.IntN(len(s.ValueValidation.Enum))].Object
		}
		return fmt.Sprintf("s%d", g.r.IntN(100))
	}
	return nil
}

// object makes a whole object at version v: metadata as the API server
// keeps it, the spec from the schema, an open status.
func (g *generator) object(c *Converter, version string, i int) map[string]any {
	spec := c.conv.Versions[version].Schema.Properties["spec"]
	o := map[string]any{
		"apiVersion": "demo.example.com/" + version,
		"kind":       "Website",
		"metadata": map[string]any{
			"name": fmt.Sprintf("site-%d", i), "namespace": "default",
			"uid":               string(types.UID(fmt.Sprintf("00000000-0000-0000-0000-%012d", i))),
			"resourceVersion":   fmt.Sprint(1000 + i),
			"generation":        int64(1 + g.r.IntN(5)),
			"creationTimestamp": "2026-11-26T09:00:00Z",
			"finalizers":        []any{"opkit.dev/website"},
			"managedFields":     []any{map[string]any{"manager": "kubectl", "operation": "Apply", "apiVersion": "demo.example.com/" + version}},
		},
		"spec": g.value("spec", &spec),
	}
	if g.r.IntN(2) == 0 {
		o["metadata"].(map[string]any)["labels"] = map[string]any{"team": "web"}
	}
	if g.r.IntN(2) == 0 {
		o["metadata"].(map[string]any)["annotations"] = map[string]any{"note": "kept as it is"}
	}
	if g.r.IntN(2) == 0 {
		o["status"] = map[string]any{"observedGeneration": int64(2), "readyReplicas": int64(g.r.IntN(3)), "anything": map[string]any{"x": "y"}}
	}
	return o
}

// withoutConversionAnnotations is o's metadata without the conversion's
// annotations.
func withoutConversionAnnotations(o map[string]any) map[string]any {
	m := runtime.DeepCopyJSON(o["metadata"].(map[string]any))
	if ann, ok := m["annotations"].(map[string]any); ok {
		for k := range ann {
			if len(k) > len("opkit.dev/conversion.") && k[:len("opkit.dev/conversion.")] == "opkit.dev/conversion." {
				delete(ann, k)
			}
		}
		if len(ann) == 0 {
			delete(m, "annotations")
		}
	}
	return m
}

// threeVersions is the Website's v1 and v2 and a v3 that counts memory
// in MiB (spec.resources.memoryMi) and has a colour of its own.
const threeVersions = `apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: website}
spec:
  resource:
    group: demo.example.com
    kind: Website
    versions:
    - name: v1
      schema:
        type: object
        properties:
          content: {type: string}
          size: {type: string, enum: [small, large]}
          legacy: {type: object, properties: {banner: {type: string}}}
      conversion:
        fields:
        - field: spec.size
          storageField: spec.resources.memory
          toStorage: "self == 'small' ? '512Mi' : '2Gi'"
          fromStorage: "quantity(self).isLessThan(quantity('1Gi')) ? 'small' : 'large'"
    - name: v2
      storage: true
      schema:
        type: object
        properties:
          content: {type: string}
          resources: {type: object, properties: {memory: {type: string}}}
          tls: {type: object, properties: {enabled: {type: boolean}}}
          paths: {type: array, items: {type: object, properties: {path: {type: string}}}}
    - name: v3
      schema:
        type: object
        properties:
          content: {type: string}
          resources: {type: object, properties: {memoryMi: {type: integer}}}
          tls: {type: object, properties: {enabled: {type: boolean}}}
          color: {type: string}
      conversion:
        fields:
        - field: spec.resources.memoryMi
          storageField: spec.resources.memory
          toStorage: "string(self) + 'Mi'"
          fromStorage: "quantity(self).asInteger() / 1048576"
`

// TestRoundTripsAreLosslessForGeneratedObjects: for every two versions A
// and B, A -> B -> A gives back the object, for objects with random
// values, fields only one version has, missing fields, nested objects
// and lists; each conversion keeps metadata but for its annotation and
// status as it is, and the result goes through JSON as the webhook sends
// it. v1 -> v3 goes through v2, the storage version.
func TestRoundTripsAreLosslessForGeneratedObjects(t *testing.T) {
	_, website := website(t)
	srcs, err := definition.Load("three.yaml", []byte(threeVersions))
	if err != nil {
		t.Fatal(err)
	}
	d, err := definition.Compile(srcs[0])
	if err != nil {
		t.Fatal(err)
	}
	three, err := New(d)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		c    *Converter
	}{{"website", website}, {"three versions", three}} {
		t.Run(tc.name, func(t *testing.T) {
			roundTrips(t, tc.c)
		})
	}
}

func roundTrips(t *testing.T, c *Converter) {
	g := &generator{r: rand.New(rand.NewPCG(20, 3)), strings: map[string][]string{
		"spec.resources.memory": {"128Mi", "512Mi", "1Gi", "2Gi", "8Gi"},
	}}
	through := func(o map[string]any, to string) map[string]any {
		t.Helper()
		out := convert(t, c, o, to)
		if want := withoutConversionAnnotations(o); !equality.Semantic.DeepEqual(withoutConversionAnnotations(out), want) {
			t.Fatalf("converting to %s changed metadata:\n%v\nwant\n%v", to, out["metadata"], want)
		}
		if !equality.Semantic.DeepEqual(out["status"], o["status"]) {
			t.Fatalf("converting to %s changed status: %v, want %v", to, out["status"], o["status"])
		}
		data, err := json.Marshal(out)
		if err != nil {
			t.Fatal(err)
		}
		var again map[string]any
		if err := utiljson.Unmarshal(data, &again); err != nil {
			t.Fatal(err)
		}
		return again
	}
	versions := slices.Sorted(maps.Keys(c.conv.Versions))
	for i := range 300 {
		for _, a := range versions {
			for _, b := range versions {
				if a == b {
					continue
				}
				in := g.object(c, a, i)
				back := through(through(in, b), a)
				if !equality.Semantic.DeepEqual(back, in) {
					x, _ := json.Marshal(in)
					y, _ := json.Marshal(back)
					t.Fatalf("%s -> %s -> %s lost something:\n got %s\nwant %s", a, b, a, y, x)
				}
			}
		}
	}
}

func TestReviewConvertsEveryObjectInOrderOrFailsThemAll(t *testing.T) {
	_, c := website(t)
	var objects []runtime.RawExtension
	for _, size := range []string{"small", "large"} {
		raw, _ := json.Marshal(obj(t, "apiVersion: demo.example.com/v1\nkind: Website\n"+meta+"spec: {content: hi, size: "+size+"}\n"))
		objects = append(objects, runtime.RawExtension{Raw: raw})
	}
	review := &apiextensionsv1.ConversionReview{Request: &apiextensionsv1.ConversionRequest{UID: "req-1", DesiredAPIVersion: "demo.example.com/v2", Objects: objects}}
	out := c.Review(review)
	if out.APIVersion != "apiextensions.k8s.io/v1" || out.Kind != "ConversionReview" || out.Response.UID != "req-1" || out.Response.Result.Status != "Success" {
		t.Fatalf("response %+v", out)
	}
	for i, want := range []string{"512Mi", "2Gi"} {
		var o map[string]any
		if err := json.Unmarshal(out.Response.ConvertedObjects[i].Raw, &o); err != nil {
			t.Fatal(err)
		}
		if o["apiVersion"] != "demo.example.com/v2" || o["spec"].(map[string]any)["resources"].(map[string]any)["memory"] != want ||
			o["metadata"].(map[string]any)["uid"] != "0b6e4c1a-5d1e-4b8e-9d57-3c3f1f0a2a11" || o["metadata"].(map[string]any)["resourceVersion"] != "4711" {
			t.Errorf("object %d: %v", i, o)
		}
	}
	review.Request.DesiredAPIVersion = "other.example.com/v2"
	if out := c.Review(review); out.Response.UID != "req-1" || out.Response.Result.Status != "Failure" || len(out.Response.ConvertedObjects) != 0 {
		t.Errorf("a request for another group: %+v", out.Response)
	}
	if out := c.Review(&apiextensionsv1.ConversionReview{}); out.Response.Result.Status != "Failure" {
		t.Errorf("no request: %+v", out.Response)
	}
}
