package packed

import (
	"encoding/json"
	"math"
	"reflect"
	"testing"

	utiljson "k8s.io/apimachinery/pkg/util/json"
)

// Every value a JSON decoder gives comes back from its packed form the
// same, types included.
func FuzzPackedGivesBackTheValue(f *testing.F) {
	for _, seed := range []string{
		`{"apiVersion":"bench.opkit.dev/v1","kind":"Printer","metadata":{"name":"p","namespace":"bench","generation":3,"labels":{}},
		  "spec":{"text":"héllo <b>","copies":2,"ratio":1.5,"big":9007199254740993,"whole":4.0,"none":null,"on":false,"list":[1,"two",{"three":[]}],"empty":{}},
		  "status":{"conditions":[{"type":"Ready","status":"True","reason":"Reconciled","message":""}]}}`,
		`null`, `[]`, `{}`, `""`, `"Ready"`, `[1, -1, 0, 9223372036854775807, -9223372036854775808]`,
		`[4.0, -0.0, 1e308, 5e-324, 1.5, 18446744073709551616]`, `{"":{"":[null,true,false]}}`,
		`"\u0000\ud83d\ude00 \u2028 é"`, `{"kind":"kind","True":"False"}`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, doc string) {
		var v any
		if err := utiljson.Unmarshal([]byte(doc), &v); err != nil {
			t.Skip("not JSON")
		}
		b, err := Append(nil, v)
		if err != nil {
			t.Fatalf("packing %s: %v", doc, err)
		}
		got, err := Unpack(string(b))
		if err != nil {
			t.Fatalf("unpacking %s: %v", doc, err)
		}
		if !reflect.DeepEqual(got, v) {
			t.Fatalf("%s came back as %#v, want %#v", doc, got, v)
		}
	})
}

// Damaged packed bytes are an error, never a panic.
func FuzzUnpackRefusesDamage(f *testing.F) {
	for _, v := range []any{map[string]any{"spec": []any{int64(1), 2.5, "x", nil, true}}, "kind"} {
		b, err := Append(nil, v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:len(b)-1])
	}
	f.Add([]byte{tagMap, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Add([]byte{tagCommon, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = Unpack(string(b))
	})
}

func TestAppendMapWithoutLeavesTheEntryOut(t *testing.T) {
	m := map[string]any{"metadata": map[string]any{"name": "x"}, "spec": map[string]any{"a": int64(1)}, "kind": "K"}
	b, err := AppendMapWithout(nil, m, "metadata")
	if err != nil {
		t.Fatal(err)
	}
	got, err := Unpack(string(b))
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]any{"spec": map[string]any{"a": int64(1)}, "kind": "K"}; !reflect.DeepEqual(got, want) {
		t.Errorf("got %#v, want %#v", got, want)
	}
	if _, ok := m["metadata"]; !ok {
		t.Error("the map itself lost the entry")
	}
}

func TestPackedRefusesWhatJSONDoesNotDecodeInto(t *testing.T) {
	for _, v := range []any{1, int32(1), map[string]string{}, []string{}, struct{}{}} {
		if _, err := Append(nil, map[string]any{"x": []any{v}}); err == nil {
			t.Errorf("packing a %T: no error", v)
		}
	}
	if _, err := Unpack(string([]byte{tagList, 1, tagNil, tagNil})); err == nil {
		t.Error("bytes after the value: no error")
	}
	if v, _ := Unpack(string(append([]byte{tagFloat}, 0, 0, 0, 0, 0, 0, 0xf8, 0x7f))); !math.IsNaN(v.(float64)) {
		t.Errorf("a NaN came back as %v", v)
	}
}

// EqualWithout says what comparing the unpacked maps without the entry
// says, for maps packed from JSON in their order and from maps in theirs.
func FuzzEqualWithoutAgreesWithTheUnpackedMaps(f *testing.F) {
	f.Add(`{"spec":{"a":1,"b":[1,2]},"status":{"n":1}}`, `{"status":{"n":2},"spec":{"b":[1,2],"a":1}}`)
	f.Add(`{"spec":{"a":1},"status":{"n":1}}`, `{"spec":{"a":2},"status":{"n":1}}`)
	f.Add(`{"spec":{"a":1},"x":null}`, `{"spec":{"a":1},"y":null}`)
	f.Add(`{"spec":{"a":1}}`, `{"spec":{"a":1.0}}`)
	f.Add(`{"status":1}`, `{}`)
	f.Add(`{"spec":{"x":0.0}}`, `{"spec":{"x":-0.0}}`)
	f.Add(`{"data":{"k":"v"},"kind":"ConfigMap"}`, `{"kind":"ConfigMap","data":{"k":"v"},"extra":"x"}`)
	f.Fuzz(func(t *testing.T, x, y string) {
		var mx, my map[string]any
		if utiljson.Unmarshal([]byte(x), &mx) != nil || utiljson.Unmarshal([]byte(y), &my) != nil || mx == nil || my == nil {
			t.Skip("not two JSON objects")
		}
		px, _, _, _, err := FromJSON(nil, []byte(x), "metadata")
		if err != nil {
			t.Skip("refused by FromJSON")
		}
		delete(mx, "metadata")
		delete(my, "metadata")
		py, err := Append(nil, my)
		if err != nil {
			t.Fatal(err)
		}
		got, err := EqualWithout(string(px), string(py), "status")
		if err != nil {
			t.Fatalf("%s against %s: %v", x, y, err)
		}
		delete(mx, "status")
		delete(my, "status")
		jx, _ := json.Marshal(mx)
		jy, _ := json.Marshal(my)
		if want := string(jx) == string(jy) && reflect.DeepEqual(mx, my); got != want {
			t.Fatalf("%s against %s without status: equal %v, want %v", x, y, got, want)
		}
	})
}

// Damaged packed bytes are an error for EqualWithout, never a panic; a
// packed value that is not a map is one too.
func FuzzEqualWithoutRefusesDamage(f *testing.F) {
	b, err := Append(nil, map[string]any{"spec": []any{int64(1), 2.5, "x", nil, true, map[string]any{"k": false}}, "status": "s"})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add(b[:len(b)-1])
	f.Add([]byte{tagList, 0})
	f.Add([]byte{tagMap, 1, tagCommon, 4, tagMap, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, damaged []byte) {
		_, errDamaged := EqualWithout(string(damaged), string(b), "status")
		if _, err := Unpack(string(damaged)); err != nil && errDamaged == nil {
			t.Fatalf("%q does not unpack (%v), yet EqualWithout compared it", damaged, err)
		}
	})
}
