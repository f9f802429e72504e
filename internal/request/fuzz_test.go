package request

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/fuzzcheck"
)

// The fuzz targets of a person's request as the engine takes it: the
// value of its annotation, which whoever may patch the object may set to
// anything, is removed with a patch guarded by that very value
// (RemovePatch), and the answer names who asked (Who). Neither panics,
// both answer within a bound, the patch is JSON that removes the request
// read and refuses to remove a newer one, and a message never names
// nobody.

const bound = 2 * time.Second

// annotationSeeds are the annotations' values as the CLI and the console
// write them (internal/cli: pause.go, runs.go's retry, rerun.go,
// decide.go, schedule.go), as older CLIs wrote them, and by hand.
var annotationSeeds = []struct{ name, value string }{
	{v1alpha1.RetryAnnotation, `{"by":"alice","reason":"the greeting service is back","at":"2026-11-27T08:00:00.123456789Z"}`},
	{v1alpha1.RetryAnnotation, `2026-11-27T08:00:00Z`},
	{v1alpha1.PauseAnnotation, `{"by":"alice","reason":"the registry is down","at":"2026-11-27T08:00:00Z"}`},
	{v1alpha1.PauseAnnotation, `true`},
	{v1alpha1.ResumedAnnotation, `{"by":"system:serviceaccount:ops:console","at":"2026-11-27T09:00:00Z"}`},
	{v1alpha1.RerunAnnotation, `{"request":"01jd5v3q8m2k4x7zab","run":"01jd5v3q8m2k4x7zaa","sameInput":true,"reason":"the notifier was down","by":"alice","at":"2026-11-27T08:00:00Z"}`},
	{v1alpha1.DecisionAnnotation, `{"state":"AwaitingApproval","seq":3,"choose":"Approved","reason":"looks good","by":"alice","at":"2026-11-27T08:00:00Z"}`},
	{v1alpha1.RunNowAnnotation("import"), `{"id":"01jd5v3q8m2k4x7zab","by":"jane","reason":"the registry is back","at":"2026-11-25T08:00:00Z"}`},
	{v1alpha1.RetryAnnotation, "bell \x07 and \x01"},
	{v1alpha1.RetryAnnotation, "\U000e0001 a tag rune"},
	{v1alpha1.PauseAnnotation, `{"by":" ","reason":"blank"}`},
	{v1alpha1.PauseAnnotation, "\xff\xfe\xed\xa0\x80"},
	{"a~b/c~1d", ""},
	{"", "x"},
	{"example.com/a.b_c-d", "x"},
}

// FuzzRemovePatch: the guarded removal of any annotation's value is JSON
// that, applied as the API server applies a JSON patch, removes that
// annotation and nothing else, and is refused when the value changed.
func FuzzRemovePatch(f *testing.F) {
	for _, s := range annotationSeeds {
		f.Add(s.name, s.value)
	}
	f.Fuzz(func(t *testing.T, name, value string) {
		var patch []byte
		fuzzcheck.Within(t, "RemovePatch", bound, func() { patch = RemovePatch(name, value) })
		if !utf8.Valid(patch) {
			t.Fatalf("the patch %q is not UTF-8", patch)
		}
		var ops []map[string]string
		if err := json.Unmarshal(patch, &ops); err != nil {
			t.Fatalf("the patch for %q = %q is not JSON: %v", name, value, err)
		}
		if len(ops) != 2 || ops[0]["op"] != "test" || ops[1]["op"] != "remove" || ops[0]["path"] != ops[1]["path"] || ops[0]["value"] != fuzzcheck.AsJSON(value) {
			t.Fatalf("the patch for %q = %q is %v; want a test of that value, then its removal", name, value, ops)
		}
		segment, ok := strings.CutPrefix(ops[0]["path"], "/metadata/annotations/")
		if !ok || strings.NewReplacer("~1", "/", "~0", "~").Replace(segment) != fuzzcheck.AsJSON(name) {
			t.Fatalf("the patch for %q points at %q, not the annotation", name, ops[0]["path"])
		}

		// The API server's objects have annotations of qualified names
		// (prefix/name) only: an empty one, say, it never holds.
		if len(validation.IsQualifiedName(strings.ToLower(name))) > 0 {
			return
		}
		p, err := jsonpatch.DecodePatch(patch)
		if err != nil {
			t.Fatalf("the patch %s is not a JSON patch: %v", patch, err)
		}
		other := "example.com/other"
		if fuzzcheck.AsJSON(name) == other {
			other += "-2"
		}
		object := func(v string) []byte {
			b, err := json.Marshal(map[string]any{"metadata": map[string]any{"name": "world", "annotations": map[string]string{name: v, other: "kept"}}})
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
		var applied []byte
		fuzzcheck.Within(t, "applying the patch", bound, func() { applied, err = p.Apply(object(value)) })
		if err != nil {
			t.Fatalf("the patch %s does not apply to the object it was made for, %s: %v", patch, object(value), err)
		}
		var got struct {
			Metadata struct {
				Name        string            `json:"name"`
				Annotations map[string]string `json:"annotations"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(applied, &got); err != nil {
			t.Fatal(err)
		}
		if _, left := got.Metadata.Annotations[fuzzcheck.AsJSON(name)]; left || got.Metadata.Annotations[other] != "kept" || got.Metadata.Name != "world" {
			t.Fatalf("the patch %s leaves %s; want the request removed, the rest kept", patch, applied)
		}
		// A newer request, written since the value was read, stays.
		if _, err := p.Apply(object(value + "x")); err == nil {
			t.Fatalf("the patch %s removes a value other than the one it was made for", patch)
		}
	})
}

// FuzzWhoAsked: any annotation's value, read as the engine reads it for
// each kind, gives a message that names who asked, or someone.
func FuzzWhoAsked(f *testing.F) {
	for _, s := range annotationSeeds {
		f.Add(s.value)
	}
	f.Fuzz(func(t *testing.T, value string) {
		r := v1alpha1.ReadRequest(value)
		var by struct {
			By string `json:"by"`
		}
		_ = json.Unmarshal([]byte(value), &by) // a re-run's and a decision's, as run and statemachine read them
		for _, k := range Kinds {
			for _, asked := range []string{r.By, by.By} {
				var who string
				fuzzcheck.Within(t, "Who", bound, func() { who = k.Who(asked) })
				switch {
				case strings.TrimSpace(who) == "":
					t.Fatalf("%s: %q names nobody: %q", k.Name, value, who)
				case strings.TrimSpace(asked) == "" && !strings.HasPrefix(who, "someone"):
					t.Fatalf("%s: %q names nobody, and the message says %q", k.Name, value, who)
				case strings.TrimSpace(asked) != "" && who != asked:
					t.Fatalf("%s: %q names %q, and the message says %q", k.Name, value, asked, who)
				}
			}
		}
		if s := ReasonSuffix(r.Reason); (s == "") != (r.Reason == "") || !strings.HasSuffix(s, r.Reason) {
			t.Fatalf("the reason %q is said %q", r.Reason, s)
		}
	})
}
