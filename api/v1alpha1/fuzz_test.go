package v1alpha1_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/fuzzcheck"
)

// The fuzz targets of the annotations that carry a person's request:
// the value of opkit.dev/paused, opkit.dev/resumed and opkit.dev/retry (a
// Request, ReadRequest), of run-now.opkit.dev/HANDLER (ReadRunNow), and
// what opkit decide and opkit rerun write (Decision.Patch, Rerun.Patch;
// the engine reads those in packages statemachine and run). Whoever may
// patch the object may write any value there: reading one never panics,
// answers within a bound, refuses what it cannot take saying what is
// wrong, and what opkit writes is read back as written.

const bound = 2 * time.Second

// requestSeeds are values of the annotations, as opkit pause, resume and
// retry and the console write them, as older CLIs wrote them, and by hand.
var requestSeeds = []string{
	`{"by":"alice","reason":"the registry is down","at":"2026-11-27T08:00:00Z"}`,
	`{"by":"system:serviceaccount:ops:console","at":"2026-11-27T08:00:00.123456789Z"}`,
	`{"by":"jane@example.com","reason":"database migration until 10:00","at":"2026-11-27T08:00:00Z"}`,
	`{"by":"alice","reason":"a \"quoted\" <reason>\nover two lines","at":"x"}`,
	`2026-11-27T08:00:00Z`,
	`true`,
	``,
	`null`,
	`{}`,
	`{"by":5}`,
	`{"by":"alice","by":"bob"}`,
	`{"by":"alice","extra":{"deep":[1,2,3]}}`,
	"{\"by\":\"\xff\xfe\",\"reason\":\"\xed\xa0\x80\"}",
	`{"by":"\u0000\ud800"}`,
	`{"by":"alice","at":1e400}`,
	`[` + strings.Repeat(`[`, 200) + strings.Repeat(`]`, 200) + `]`,
	`{"by":" "}`,
}

// FuzzReadRequest: any value of opkit.dev/paused, resumed or retry is a
// request: by someone named, or, not the JSON of one, by nobody known.
func FuzzReadRequest(f *testing.F) {
	for _, s := range requestSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, value string) {
		var r v1alpha1.Request
		fuzzcheck.Within(t, "ReadRequest", bound, func() { r = v1alpha1.ReadRequest(value) })
		var direct v1alpha1.Request
		if json.Unmarshal([]byte(value), &direct) != nil {
			if r != (v1alpha1.Request{}) {
				t.Fatalf("%q is not a request, and is read as %+v, not a request by nobody known", value, r)
			}
			return
		}
		if r != direct {
			t.Fatalf("%q is read as %+v, not as its JSON %+v", value, r, direct)
		}
		for _, s := range []string{r.By, r.Reason, r.At} {
			if !utf8.ValidString(s) {
				t.Fatalf("%q is read as %+v, with a field that is not UTF-8", value, r)
			}
		}
		// What is read is written again as is (the engine's records, the
		// CLI's messages say it).
		var again v1alpha1.Request
		fuzzcheck.Within(t, "ReadRequest", bound, func() { again = v1alpha1.ReadRequest(r.Value()) })
		if again != r {
			t.Fatalf("%q is read as %+v; written again, %q, as %+v", value, r, r.Value(), again)
		}
	})
}

// FuzzRequestValue: a pause, resume or retry as opkit pause, resume and
// retry write it (the user, --reason, now), in their merge patch, is read
// back by the engine as written.
func FuzzRequestValue(f *testing.F) {
	f.Add("alice", "the registry is down", "2026-11-27T08:00:00Z", false)
	f.Add("system:serviceaccount:ops:console", "", "2026-11-27T08:00:00.123456789Z", true)
	f.Add("jane@example.com", "a \"quoted\" <reason>\nover two lines & more", "2026-11-27T08:00:00Z", true)
	f.Add("", "by hand", "", false)
	f.Add("\xff\xfe", "\xed\xa0\x80 \x00", "\U0010FFFF", false)
	f.Fuzz(func(t *testing.T, by, reason, at string, resume bool) {
		p := v1alpha1.Pause{By: by, Reason: reason, At: at}
		var value string
		fuzzcheck.Within(t, "Value", bound, func() { value = p.Value() })
		if !utf8.ValidString(value) || !json.Valid([]byte(value)) {
			t.Fatalf("%+v is written as %q, which is not JSON", p, value)
		}
		// As opkit pause and resume write it (internal/cli/pause.go).
		annotations := map[string]any{v1alpha1.PauseAnnotation: value}
		name := v1alpha1.PauseAnnotation
		if resume {
			annotations, name = map[string]any{v1alpha1.PauseAnnotation: nil, v1alpha1.ResumedAnnotation: value}, v1alpha1.ResumedAnnotation
		}
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
		if err != nil {
			t.Fatal(err)
		}
		var sent struct {
			Metadata struct {
				Annotations map[string]*string `json:"annotations"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(patch, &sent); err != nil || sent.Metadata.Annotations[name] == nil {
			t.Fatalf("the patch %s does not set %s: %v", patch, name, err)
		}
		var got v1alpha1.Request
		fuzzcheck.Within(t, "ReadRequest", bound, func() { got = v1alpha1.ReadRequest(*sent.Metadata.Annotations[name]) })
		want := v1alpha1.Request{By: fuzzcheck.AsJSON(by), Reason: fuzzcheck.AsJSON(reason), At: fuzzcheck.AsJSON(at)}
		if got != want {
			t.Fatalf("%+v is written as %q and read back as %+v", p, value, got)
		}
	})
}

// FuzzReadRunNow: any value of run-now.opkit.dev/HANDLER is a run asked
// for now, with its id and who asked, or refused saying what is wrong.
func FuzzReadRunNow(f *testing.F) {
	for _, s := range []string{
		`{"id":"01jd5v3q8m2k4x7zab","by":"jane","reason":"the registry is back","at":"2026-11-25T08:00:00Z"}`,
		`{"id":"01jd5v3q8m2k4x7zab","by":"system:serviceaccount:ops:ci","at":"2026-11-25T08:00:00Z"}`,
		`{"id":"01JD5V3Q8M2K4X7ZAB","by":"jane","at":"x"}`,
		`{"id":"","by":"jane"}`,
		`{"id":"abc","by":""}`,
		`{"id":"abc","by":" \t"}`,
		`{"id":"` + strings.Repeat("a", 41) + `","by":"jane"}`,
		`{"id":"` + strings.Repeat("A", 2000) + `","by":"jane"}`,
		`{"id":"a/b","by":"jane"}`,
		`{"id":"` + strings.Repeat("\xff", 300) + `","by":"jane"}`,
		`{"id":5}`,
		`2026-11-25T08:00:00Z`,
		``,
		`null`,
		`{"id":"abc","by":"jane","id":"def"}`,
		"{\"id\":\"abc\",\"by\":\"\xff\"}",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, value string) {
		var r v1alpha1.RunNow
		var err error
		fuzzcheck.Within(t, "ReadRunNow", bound, func() { r, err = v1alpha1.ReadRunNow(value) })
		if err != nil {
			msg := err.Error()
			if r != (v1alpha1.RunNow{}) {
				t.Fatalf("%q is refused (%v) and read as %+v", value, err, r)
			}
			if !utf8.ValidString(msg) || len(msg) > 1024 {
				t.Fatalf("the refusal of %q is not UTF-8, or too long (%d bytes): %.300q", value, len(msg), msg)
			}
			if !strings.HasPrefix(msg, "it is not the JSON of a request") && !strings.HasPrefix(msg, "its id ") && !strings.HasPrefix(msg, "it names nobody (by)") {
				t.Fatalf("the refusal of %q, %q, does not say what is wrong", value, msg)
			}
			return
		}
		if r.ID == "" || len(r.ID) > 40 || strings.Trim(r.ID, "abcdefghijklmnopqrstuvwxyz0123456789") != "" || strings.TrimSpace(r.By) == "" {
			t.Fatalf("%q is taken as %+v: its id is not 1 to 40 lower-case letters and digits, or it names nobody", value, r)
		}
		if key := v1alpha1.RunNowKey("calendar", "tick", r); key != "calendar/schedule/tick/manual/"+r.ID {
			t.Fatalf("the key of %+v is %q", r, key)
		}
		again, err := v1alpha1.ReadRunNow(r.Value())
		if err != nil || again != r {
			t.Fatalf("%q is taken as %+v; written again, %q, as %+v, %v", value, r, r.Value(), again, err)
		}
	})
}

// FuzzDecisionPatch: a decision as opkit decide and the console write it
// (the state and visit seen, the choice, --reason, the user, now) is read
// back by the engine as written: the annotation in the merge patch, read
// as statemachine reads it (no unknown field).
func FuzzDecisionPatch(f *testing.F) {
	f.Add("AwaitingApproval", int64(3), "Approved", "looks good", "alice", "2026-11-27T08:00:00Z", "12345")
	f.Add("Review", int64(1), "Rejected", "the \"tests\" fail <here>\nsee CI", "system:serviceaccount:ops:console", "2026-11-27T08:00:00Z", "")
	f.Add("", int64(0), "", "", "", "", "0")
	f.Add("a", int64(-9223372036854775808), "b", "\xff\xfe\x00", "\xed\xa0\x80", "\U0010FFFF", "\"rv\"")
	f.Fuzz(func(t *testing.T, state string, seq int64, choose, reason, by, at, resourceVersion string) {
		d := v1alpha1.Decision{State: state, Seq: seq, Choose: choose, Reason: reason, By: by, At: at}
		var patch []byte
		fuzzcheck.Within(t, "Decision.Patch", bound, func() { patch = d.Patch(resourceVersion) })
		value, rv := annotationOf(t, patch, v1alpha1.DecisionAnnotation)
		if rv != fuzzcheck.AsJSON(resourceVersion) {
			t.Fatalf("the patch %s is over resourceVersion %q, not %q", patch, rv, resourceVersion)
		}
		var got v1alpha1.Decision
		dec := json.NewDecoder(strings.NewReader(value))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&got); err != nil {
			t.Fatalf("the decision %q that %+v is written as is not read: %v", value, d, err)
		}
		want := v1alpha1.Decision{State: fuzzcheck.AsJSON(state), Seq: seq, Choose: fuzzcheck.AsJSON(choose), Reason: fuzzcheck.AsJSON(reason), By: fuzzcheck.AsJSON(by), At: fuzzcheck.AsJSON(at)}
		if got != want {
			t.Fatalf("%+v is written as %q and read back as %+v", d, value, got)
		}
	})
}

// FuzzRerunPatch: a re-run request as opkit rerun and the console write
// it is read back by the engine (package run) as written.
func FuzzRerunPatch(f *testing.F) {
	f.Add("01jd5v3q8m2k4x7zab", "01jd5v3q8m2k4x7zaa", true, "the notifier was down", "alice", "2026-11-27T08:00:00Z", "12345")
	f.Add("01jd5v3q8m2k4x7zab", "01jd5v3q8m2k4x7zaa", false, "", "system:serviceaccount:ops:console", "2026-11-27T08:00:00Z", "")
	f.Add("", "", false, "\xff \"x\" \n", "\xed\xa0\x80", "", "\x00")
	f.Fuzz(func(t *testing.T, request, run string, sameInput bool, reason, by, at, resourceVersion string) {
		r := v1alpha1.Rerun{Request: request, Run: run, SameInput: sameInput, Reason: reason, By: by, At: at}
		var patch []byte
		fuzzcheck.Within(t, "Rerun.Patch", bound, func() { patch = r.Patch(resourceVersion) })
		value, rv := annotationOf(t, patch, v1alpha1.RerunAnnotation)
		if rv != fuzzcheck.AsJSON(resourceVersion) {
			t.Fatalf("the patch %s is over resourceVersion %q, not %q", patch, rv, resourceVersion)
		}
		var got v1alpha1.Rerun
		if err := json.Unmarshal([]byte(value), &got); err != nil {
			t.Fatalf("the re-run request %q that %+v is written as is not read: %v", value, r, err)
		}
		want := v1alpha1.Rerun{Request: fuzzcheck.AsJSON(request), Run: fuzzcheck.AsJSON(run), SameInput: sameInput, Reason: fuzzcheck.AsJSON(reason), By: fuzzcheck.AsJSON(by), At: fuzzcheck.AsJSON(at)}
		if got != want {
			t.Fatalf("%+v is written as %q and read back as %+v", r, value, got)
		}
	})
}

// annotationOf is the value a merge patch sets name to, and the
// resourceVersion it is guarded by; it fails t when the patch is not
// JSON, or sets anything else.
func annotationOf(t *testing.T, patch []byte, name string) (value, resourceVersion string) {
	t.Helper()
	if !utf8.Valid(patch) {
		t.Fatalf("the patch %q is not UTF-8", patch)
	}
	var p map[string]map[string]any
	if err := json.Unmarshal(patch, &p); err != nil || len(p) != 1 || len(p["metadata"]) != 2 {
		t.Fatalf("the patch %s is not a merge patch of the metadata's resourceVersion and annotations: %v", patch, err)
	}
	rv, ok := p["metadata"]["resourceVersion"].(string)
	annotations, _ := p["metadata"]["annotations"].(map[string]any)
	v, ok2 := annotations[name].(string)
	if !ok || !ok2 || len(annotations) != 1 {
		t.Fatalf("the patch %s does not set %s alone, over a resourceVersion", patch, name)
	}
	return v, rv
}
