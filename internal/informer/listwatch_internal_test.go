package informer

import (
	"bufio"
	"errors"
	"io"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// decodeCompact must make, from an object's JSON, the compactObject that
// the cache's transform makes of the unstructured object the same JSON
// decodes to: the reads through the cache give back the same objects
// either way.
func TestDecodeCompactIsTheTransformOfTheDecodedObject(t *testing.T) {
	objects := append([]string{
		// A key given twice takes the way through unstructured.
		`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"twice","namespace":"a"},"data":{"k":"1","k":"2"}}`,
		// Labels that are not strings: the same.
		`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"odd","namespace":"a","labels":{"n":1}},"data":{}}`,
		// A bookmark.
		`{"kind":"Printer","apiVersion":"bench.opkit.dev/v1","metadata":{"resourceVersion":"914","annotations":{"k8s.io/initial-events-end":"true"},"creationTimestamp":null}}`,
	}, cachedObjects...)
	for _, raw := range objects {
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON([]byte(raw)); err != nil {
			t.Fatal(err)
		}
		stored, err := Transform(u)
		if err != nil {
			t.Fatal(err)
		}
		want := stored.(*compactObject)
		got, err := decodeCompact([]byte(raw), metav1.TypeMeta{APIVersion: "v9", Kind: "Unused"})
		if err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		if got.TypeMeta != want.TypeMeta {
			t.Errorf("%s: type %v, want %v", want.Name, got.TypeMeta, want.TypeMeta)
		}
		if !equality.Semantic.DeepEqual(got.ObjectMeta, want.ObjectMeta) {
			t.Errorf("%s: metadata\n%+v\nwant\n%+v", want.Name, got.ObjectMeta, want.ObjectMeta)
		}
		if g, w := got.DeepCopyObject(), want.DeepCopyObject(); !equality.Semantic.DeepEqual(g, w) {
			t.Errorf("%s: read back as\n%v\nwant\n%v", want.Name, g, w)
		}
	}
}

// The items of a built-in kind's list have no kind: they take the list's.
func TestDecodeCompactGivesListItemsTheirKind(t *testing.T) {
	item := `{"metadata":{"name":"c","namespace":"a","resourceVersion":"7"},"data":{"text":"hi"}}`
	c, err := decodeCompact([]byte(item), metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"})
	if err != nil {
		t.Fatal(err)
	}
	u := c.DeepCopyObject().(*unstructured.Unstructured)
	if u.GetAPIVersion() != "v1" || u.GetKind() != "ConfigMap" || u.GetName() != "c" || u.Object["data"].(map[string]any)["text"] != "hi" {
		t.Errorf("read back as %v, want a v1 ConfigMap c with its data", u.Object)
	}
}

// Broken JSON is an error, never a half-made object.
func TestDecodeCompactRefusesBrokenJSON(t *testing.T) {
	for _, raw := range []string{``, `{`, `[]`, `{"metadata":{"name":"x"}`, `{"metadata":{"name":"x"}} x`} {
		if c, err := decodeCompact([]byte(raw), metav1.TypeMeta{}); err == nil {
			t.Errorf("%q decoded to %+v, want an error", raw, c)
		} else if strings.Contains(err.Error(), "panic") {
			t.Errorf("%q: %v", raw, err)
		}
	}
}

// A watch's lines decode to the events the reflector expects: objects as
// compactObjects, an ERROR as its Status; what is not an event is an
// error naming why.
func TestWatchLinesDecodeToEvents(t *testing.T) {
	cm := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"a","resourceVersion":"9"},"data":{"k":"v"}}`
	itemType := metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}
	for _, tc := range []struct {
		line    string
		typ     string
		name    string // the object's, or the Status's reason
		wantErr string
	}{
		{line: `{"type":"ADDED","object":` + cm + "}\n", typ: "ADDED", name: "c"},
		{line: `{"type":"MODIFIED","object":` + cm + `}`, typ: "MODIFIED", name: "c"},
		{line: ` { "object": ` + cm + `, "type": "DELETED" } `, typ: "DELETED", name: "c"},
		// An envelope with more after the object is decoded, not cut.
		{line: `{"type":"ADDED","object":` + cm + `,"extra":{"a":1}}`, typ: "ADDED", name: "c"},
		{line: `{"type":"BOOKMARK","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"12","annotations":{"k8s.io/initial-events-end":"true"}}}}`, typ: "BOOKMARK"},
		{line: `{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","message":"too old resource version","reason":"Expired","code":410}}`, typ: "ERROR", name: "Expired"},
		{line: `{"type":"ADDED","object":{"metadata":`, wantErr: "not one JSON object per line"},
		{line: `{"type":"ADDED","object":[1]}`, wantErr: "decoding a ADDED event"},
		{line: `{"type":"SOMETHING","object":{}}`, wantErr: `unknown type "SOMETHING"`},
	} {
		ev, err := decodeEvent([]byte(tc.line), itemType)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: %v, want an error with %q", tc.line, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.line, err)
			continue
		}
		if string(ev.Type) != tc.typ {
			t.Errorf("%s: type %s, want %s", tc.line, ev.Type, tc.typ)
		}
		switch o := ev.Object.(type) {
		case *compactObject:
			if o.Name != tc.name {
				t.Errorf("%s: object %q, want %q", tc.line, o.Name, tc.name)
			}
			if tc.typ == "BOOKMARK" && (o.ResourceVersion != "12" || o.Annotations[metav1.InitialEventsAnnotationKey] != "true") {
				t.Errorf("bookmark %+v: want resourceVersion 12 and the end of the initial events", o.ObjectMeta)
			}
		case *metav1.Status:
			if string(o.Reason) != tc.name || o.Code != 410 {
				t.Errorf("%s: status %+v, want %s 410", tc.line, o, tc.name)
			}
		default:
			t.Errorf("%s: a %T", tc.line, o)
		}
	}
}

// Lines longer than the reader's buffer are read whole; a stream cut in
// the middle of a line is an unexpected end.
func TestWatchLinesAreReadWhole(t *testing.T) {
	long := `{"type":"ADDED","object":{"metadata":{"name":"x"},"data":{"k":"` + strings.Repeat("v", 200_000) + `"}}}`
	r := bufio.NewReaderSize(strings.NewReader(long+"\n\n"+`{"type":"ADDED"`), 4096)
	line, err := readLine(r, nil)
	if err != nil || string(line) != long+"\n" {
		t.Fatalf("read %d bytes (%v), want the %d of the first line", len(line), err, len(long)+1)
	}
	if line, err = readLine(r, line[:0]); err != nil || string(line) != "\n" {
		t.Fatalf("read %q (%v), want the empty line", line, err)
	}
	if _, err = readLine(r, line[:0]); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("a cut line: %v, want io.ErrUnexpectedEOF", err)
	}
}
