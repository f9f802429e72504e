package packed

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"

	utiljson "k8s.io/apimachinery/pkg/util/json"
	kjson "sigs.k8s.io/json"
)

// failure is how FromJSON is to fail.
type failure int

const (
	succeeds failure = iota
	// invalid is any error but ErrDuplicateKey.
	invalid
	duplicateKey
)

type fromJSONCase struct {
	name string
	json string
	// want is the value the packed form gives back; nil for the map path's
	// value without metadata.
	want             map[string]any
	skipped          string
	apiVersion, kind string
	fails            failure
}

var fromJSONCases = []fromJSONCase{
	{name: "empty object", json: `{}`, want: map[string]any{}},
	{name: "whitespace around", json: " \t\r\n{ \"a\" : [ 1 , 2 ] }\n ", want: map[string]any{"a": []any{int64(1), int64(2)}}},
	{name: "empty array and object values", json: `{"a":[],"b":{},"c":[{}],"d":[[]]}`,
		want: map[string]any{"a": []any{}, "b": map[string]any{}, "c": []any{map[string]any{}}, "d": []any{[]any{}}}},
	{name: "null and booleans", json: `{"n":null,"t":true,"f":false,"l":[null,true,false]}`,
		want: map[string]any{"n": nil, "t": true, "f": false, "l": []any{nil, true, false}}},
	{name: "nested", json: `{"spec":{"template":{"spec":{"containers":[{"name":"c","ports":[{"containerPort":80}]}]}}}}`},

	// Numbers: int64 when there is no '.' and it fits, float64 otherwise.
	{name: "integers", json: `{"z":0,"n":-0,"a":1,"b":-1,"max":9223372036854775807,"min":-9223372036854775808,"e18":123456789012345678,"e19":1234567890123456789}`,
		want: map[string]any{"z": int64(0), "n": int64(0), "a": int64(1), "b": int64(-1), "max": int64(math.MaxInt64), "min": int64(math.MinInt64),
			"e18": int64(123456789012345678), "e19": int64(1234567890123456789)}},
	{name: "integers past int64 are floats", json: `{"a":9223372036854775808,"b":-9223372036854775809,"c":12345678901234567890,"d":100000000000000000000000000000}`,
		want: map[string]any{"a": 9223372036854775808.0, "b": -9223372036854775809.0, "c": 12345678901234567890.0, "d": 1e29}},
	{name: "fractions and exponents are floats", json: `{"a":1.0,"b":-0.0,"c":1e2,"d":1E2,"e":1e+2,"f":1e-2,"g":-1.5e3,"h":0.1,"i":5e-324,"j":1e-400,"k":1.7976931348623157e308,"l":0e0}`,
		want: map[string]any{"a": 1.0, "b": math.Copysign(0, -1), "c": 100.0, "d": 100.0, "e": 100.0, "f": 0.01, "g": -1500.0, "h": 0.1,
			"i": 5e-324, "j": 0.0, "k": math.MaxFloat64, "l": 0.0}},
	{name: "a float past float64", json: `{"a":1e400}`, fails: invalid},
	{name: "an integer past float64", json: `{"a":` + strings.Repeat("9", 400) + `}`, fails: invalid},
	{name: "a negative float past float64", json: `{"a":-1.5e309}`, fails: invalid},

	// Strings.
	{name: "escapes", json: `{"s":"\"\\\/\b\f\n\r\t","u":"\u00e9\u4e16\u0000\u001f","p":"\ud83d\ude00","k\u0065y":"v"}`,
		want: map[string]any{"s": "\"\\/\b\f\n\r\t", "u": "é世\x00\x1f", "p": "😀", "key": "v"}},
	{name: "invalid surrogates", json: `{"a":"\ud83d","b":"\ude00","c":"\ud83dx","d":"\ud83d\u0041","e":"\ud83d\ud83d\ude00","f":"\ude00\ud83d"}`,
		want: map[string]any{"a": "\uFFFD", "b": "\uFFFD", "c": "\uFFFDx", "d": "\uFFFDA", "e": "\uFFFD😀", "f": "\uFFFD\uFFFD"}},
	{name: "invalid UTF-8", json: "{\"a\":\"x\xffy\",\"b\":\"\xed\xa0\x80\",\"c\":\"\xe4\xb8\",\"\xfe\":\"\\n\xc0\"}",
		want: map[string]any{"a": "x\uFFFDy", "b": "\uFFFD\uFFFD\uFFFD", "c": "\uFFFD\uFFFD", "\uFFFD": "\n\uFFFD"}},
	{name: "UTF-8", json: `{"héllo":"wörld ✓ 😀","\ufffd":"\ufffd"}`, want: map[string]any{"héllo": "wörld ✓ 😀", "\uFFFD": "\uFFFD"}},
	{name: "common strings, escaped or not", json: `{"spec":"Ready","st\u0061tus":"\u0052eady","\u0074ype":{"type":"type"}}`,
		want: map[string]any{"spec": "Ready", "status": "Ready", "type": map[string]any{"type": "type"}}},
	{name: "keys are case-sensitive", json: `{"Kind":"a","kind":"b","KIND":"c"}`, want: map[string]any{"Kind": "a", "kind": "b", "KIND": "c"}, kind: "b"},
	{name: "long strings and many entries", json: `{"s":"` + strings.Repeat("x", 300) + `","e":"` + strings.Repeat(`\n`, 200) + `","l":[` + strings.Repeat(`1,`, 199) + `1]}`},

	// The skipped entry.
	{name: "skip present", json: `{"metadata": {"name":"x", "labels":{"a":"b"}} ,"spec":{}}`,
		want: map[string]any{"spec": map[string]any{}}, skipped: `{"name":"x", "labels":{"a":"b"}}`},
	{name: "skip absent", json: `{"spec":{"a":1}}`, want: map[string]any{"spec": map[string]any{"a": int64(1)}}},
	{name: "skip not an object", json: `{"metadata":"\u0041","a":1}`, want: map[string]any{"a": int64(1)}, skipped: `"\u0041"`},
	{name: "skip escaped", json: `{"m\u0065tadata":[1,2.5,null],"a":1}`, want: map[string]any{"a": int64(1)}, skipped: `[1,2.5,null]`},
	{name: "skip only", json: `{"metadata":null}`, want: map[string]any{}, skipped: `null`},
	{name: "skip nested is kept", json: `{"spec":{"metadata":{"name":"x"}},"metadata":{}}`,
		want: map[string]any{"spec": map[string]any{"metadata": map[string]any{"name": "x"}}}, skipped: `{}`},
	{name: "skip last", json: `{"a":1,"metadata":{"x":[{"y":true}]}}`, want: map[string]any{"a": int64(1)}, skipped: `{"x":[{"y":true}]}`},
	{name: "skip holding a duplicate key", json: `{"metadata":{"a":1,"a":2}}`, want: map[string]any{}, skipped: `{"a":1,"a":2}`},
	{name: "skip holding invalid UTF-8", json: "{\"metadata\":\"\xff\"}", want: map[string]any{}, skipped: "\"\xff\""},

	// apiVersion and kind.
	{name: "apiVersion and kind", json: `{"apiVersion":"apps/v1","kind":"Deployment"}`, apiVersion: "apps/v1", kind: "Deployment"},
	{name: "apiVersion and kind escaped", json: `{"\u0061piVersion":"v\u0031","kind":"Config\u004dap"}`, apiVersion: "v1", kind: "ConfigMap"},
	{name: "kind a common string", json: `{"kind":"status"}`, kind: "status"},
	{name: "apiVersion and kind not strings", json: `{"apiVersion":1,"kind":{"kind":"x"}}`},
	{name: "apiVersion and kind nested", json: `{"spec":{"apiVersion":"v1","kind":"Pod"}}`},
	{name: "apiVersion and kind empty", json: `{"apiVersion":"","kind":""}`},

	// Duplicate keys.
	{name: "duplicate key", json: `{"a":1,"a":2}`, fails: duplicateKey},
	{name: "duplicate key escaped", json: `{"a":1,"\u0061":2}`, fails: duplicateKey},
	{name: "duplicate common key", json: `{"kind":"a","spec":{},"kind":"b"}`, fails: duplicateKey},
	{name: "duplicate key after invalid UTF-8", json: "{\"\xff\":1,\"\xfe\":2}", fails: duplicateKey},
	{name: "duplicate key nested", json: `{"spec":{"x":[{"b":1,"c":2,"b":3}]}}`, fails: duplicateKey},
	{name: "duplicate key among many", json: `{` + manyKeys(40) + `,"k7":0}`, fails: duplicateKey},
	{name: "duplicate empty key", json: `{"":{},"":null}`, fails: duplicateKey},
	{name: "duplicate empty key among many", json: `{"spec":{` + manyKeys(40) + `,"":1,"":2}}`, fails: duplicateKey},
	{name: "many keys without duplicates", json: `{` + manyKeys(40) + `,"spec":{` + manyKeys(200) + `}}`},
	{name: "duplicate skip", json: `{"metadata":{},"metadata":{}}`, fails: duplicateKey},
	{name: "same key in sibling objects", json: `{"a":{"x":1},"b":{"x":1},"x":[{"x":1},{"x":2}]}`},
	{name: "duplicate key then invalid", json: `{"a":1,"a":2,}`, fails: invalid},

	// Invalid.
	{name: "empty", json: ``, fails: invalid},
	{name: "whitespace", json: ` `, fails: invalid},
	{name: "an array", json: `[]`, fails: invalid},
	{name: "null", json: `null`, fails: invalid},
	{name: "a string", json: `"a"`, fails: invalid},
	{name: "a number", json: `1`, fails: invalid},
	{name: "truncated", json: `{"a":1`, fails: invalid},
	{name: "truncated in a key", json: `{"a`, fails: invalid},
	{name: "truncated after a key", json: `{"a"`, fails: invalid},
	{name: "truncated after a colon", json: `{"a":`, fails: invalid},
	{name: "truncated in a string", json: `{"a":"b`, fails: invalid},
	{name: "truncated in an escape", json: `{"a":"\u00`, fails: invalid},
	{name: "truncated in a list", json: `{"a":[1,`, fails: invalid},
	{name: "truncated in a literal", json: `{"a":tru`, fails: invalid},
	{name: "truncated in skip", json: `{"metadata":{"a":[`, fails: invalid},
	{name: "trailing garbage", json: `{}x`, fails: invalid},
	{name: "two objects", json: `{}{}`, fails: invalid},
	{name: "trailing comma in object", json: `{"a":1,}`, fails: invalid},
	{name: "trailing comma in list", json: `{"a":[1,]}`, fails: invalid},
	{name: "missing comma", json: `{"a":1 "b":2}`, fails: invalid},
	{name: "missing colon", json: `{"a" 1}`, fails: invalid},
	{name: "key not a string", json: `{a:1}`, fails: invalid},
	{name: "key a number", json: `{1:1}`, fails: invalid},
	{name: "single quotes", json: `{'a':1}`, fails: invalid},
	{name: "mismatched close", json: `{"a":[1}`, fails: invalid},
	{name: "bad literal", json: `{"a":nul}`, fails: invalid},
	{name: "literal too long", json: `{"a":truee}`, fails: invalid},
	{name: "capital literal", json: `{"a":True}`, fails: invalid},
	{name: "leading zero", json: `{"a":01}`, fails: invalid},
	{name: "leading plus", json: `{"a":+1}`, fails: invalid},
	{name: "bare minus", json: `{"a":-}`, fails: invalid},
	{name: "leading dot", json: `{"a":.5}`, fails: invalid},
	{name: "trailing dot", json: `{"a":1.}`, fails: invalid},
	{name: "empty exponent", json: `{"a":1e}`, fails: invalid},
	{name: "signed empty exponent", json: `{"a":1e+}`, fails: invalid},
	{name: "hex", json: `{"a":0x10}`, fails: invalid},
	{name: "NaN", json: `{"a":NaN}`, fails: invalid},
	{name: "bad escape", json: `{"a":"\x"}`, fails: invalid},
	{name: "single quote escape", json: `{"a":"\'"}`, fails: invalid},
	{name: "bad unicode escape", json: `{"a":"\u12g4"}`, fails: invalid},
	{name: "control character", json: "{\"a\":\"\n\"}", fails: invalid},
	{name: "control character in a key", json: "{\"\t\":1}", fails: invalid},
	{name: "bad escape in skip", json: `{"metadata":"\q"}`, fails: invalid},
	{name: "float past float64 in skip", json: `{"metadata":{"a":[1e999]}}`, fails: invalid},
	{name: "bad number in skip", json: `{"metadata":-a}`, fails: invalid},
	{name: "comment", json: `{"a":1 /* x */}`, fails: invalid},
	{name: "byte order mark", json: "\xef\xbb\xbf{}", fails: invalid},
	{name: "other whitespace", json: "{\"a\":\v1}", fails: invalid},
	{name: "NUL after the object", json: "{}\x00", fails: invalid},
	{name: "nested at the limit", json: nested(maxPackedDepth)},
	{name: "nested past the limit", json: nested(maxPackedDepth + 1), fails: invalid},
	{name: "objects nested at the limit", json: strings.Repeat(`{"a":`, maxPackedDepth-1) + `{}` + strings.Repeat(`}`, maxPackedDepth-1)},
	{name: "objects nested past the limit", json: strings.Repeat(`{"a":`, maxPackedDepth) + `{}` + strings.Repeat(`}`, maxPackedDepth), fails: invalid},
	{name: "nested past the limit in skip", json: `{"metadata":` + nested(maxPackedDepth) + `}`, fails: invalid},
	{name: "nested at the limit in skip", json: `{"metadata":` + nested(maxPackedDepth-1) + `}`, want: map[string]any{}, skipped: nested(maxPackedDepth - 1)},
}

// manyKeys gives n entries "k0":0 to "k<n-1>":0.
func manyKeys(n int) string {
	var s strings.Builder
	for i := range n {
		if i > 0 {
			s.WriteByte(',')
		}
		s.WriteString(`"k` + string(rune('0'+i/100)) + string(rune('0'+i/10%10)) + string(rune('0'+i%10)) + `":0`)
	}
	return strings.Replace(s.String(), `"k007"`, `"k7"`, 1)
}

// nested gives an object n objects and arrays deep in all.
func nested(n int) string {
	return `{"a":` + strings.Repeat(`[`, n-2) + `{}` + strings.Repeat(`]`, n-2) + `}`
}

// decodeMap decodes data as the engine did before FromJSON.
func decodeMap(data []byte) (map[string]any, error) {
	var v any
	if err := utiljson.Unmarshal(data, &v); err != nil {
		return nil, err
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, errors.New("not an object")
	}
	return m, nil
}

// hasDuplicateKey says whether an object in data, valid JSON, holds a key
// twice.
func hasDuplicateKey(t testing.TB, data []byte) bool {
	var v any
	strict, err := kjson.UnmarshalStrict(data, &v, kjson.DisallowDuplicateFields)
	if err != nil {
		t.Fatalf("strict decoding %q: %v", data, err)
	}
	return len(strict) > 0
}

// checkFromJSON checks FromJSON of data against the map path, and gives
// FromJSON's error.
func checkFromJSON(t testing.TB, data []byte) (got any, skipped []byte, apiVersion, kind string, err error) {
	t.Helper()
	prefix := []byte("prefix")
	packed, skipped, apiVersion, kind, err := FromJSON(prefix, data, "metadata")
	m, mapErr := decodeMap(data)
	switch {
	case mapErr != nil:
		if err == nil {
			t.Fatalf("FromJSON(%q) took what the map path refuses: %v", data, mapErr)
		}
		if errors.Is(err, ErrDuplicateKey) {
			t.Fatalf("FromJSON(%q): %v, for what the map path refuses: %v", data, err, mapErr)
		}
	case errors.Is(err, ErrDuplicateKey):
		if !hasDuplicateKey(t, data) {
			t.Fatalf("FromJSON(%q): %v, without a duplicate key", data, err)
		}
	case err != nil:
		t.Fatalf("FromJSON(%q): %v, where the map path gives %#v", data, err, m)
	}
	if err != nil {
		if string(packed) != "prefix" || skipped != nil || apiVersion != "" || kind != "" {
			t.Fatalf("FromJSON(%q) failed, yet gave %q, %q, %q, %q", data, packed, skipped, apiVersion, kind)
		}
		return nil, nil, "", "", err
	}

	if !bytes.HasPrefix(packed, prefix) {
		t.Fatalf("FromJSON(%q) did not append: %q", data, packed)
	}
	if got, err = Unpack(string(packed[len(prefix):])); err != nil {
		t.Fatalf("FromJSON(%q) packed what Unpack refuses: %v", data, err)
	}
	meta, hasMeta := m["metadata"]
	delete(m, "metadata")
	if !reflect.DeepEqual(got, m) {
		t.Fatalf("FromJSON(%q) came back as %#v, the map path gives %#v", data, got, m)
	}
	if wantAV, _ := m["apiVersion"].(string); apiVersion != wantAV {
		t.Fatalf("FromJSON(%q) gave apiVersion %q, want %q", data, apiVersion, wantAV)
	}
	if wantKind, _ := m["kind"].(string); kind != wantKind {
		t.Fatalf("FromJSON(%q) gave kind %q, want %q", data, kind, wantKind)
	}

	if !hasMeta {
		if skipped != nil {
			t.Fatalf("FromJSON(%q) skipped %q, with no metadata", data, skipped)
		}
		return got, skipped, apiVersion, kind, nil
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		t.Fatalf("decoding %q to raw values: %v", data, err)
	}
	if !bytes.Equal(skipped, raw["metadata"]) {
		t.Fatalf("FromJSON(%q) skipped %q, want %q", data, skipped, raw["metadata"])
	}
	if off := cap(data) - cap(skipped); &data[off] != &skipped[0] {
		t.Fatalf("FromJSON(%q) skipped a copy", data)
	}
	var skippedValue any
	if err := utiljson.Unmarshal(skipped, &skippedValue); err != nil || !reflect.DeepEqual(skippedValue, meta) {
		t.Fatalf("FromJSON(%q) skipped %q, which decodes to %#v (%v), want %#v", data, skipped, skippedValue, err, meta)
	}
	return got, skipped, apiVersion, kind, nil
}

func TestFromJSONPacksAsTheMapPathDecodes(t *testing.T) {
	for _, c := range fromJSONCases {
		t.Run(c.name, func(t *testing.T) {
			got, skipped, apiVersion, kind, err := checkFromJSON(t, []byte(c.json))
			switch {
			case c.fails == invalid && (err == nil || errors.Is(err, ErrDuplicateKey)):
				t.Fatalf("got error %v, want another", err)
			case c.fails == duplicateKey && !errors.Is(err, ErrDuplicateKey):
				t.Fatalf("got error %v, want ErrDuplicateKey", err)
			case c.fails == succeeds && err != nil:
				t.Fatalf("got error %v", err)
			case c.fails != succeeds:
				return
			}
			if c.want != nil && !reflect.DeepEqual(got, c.want) {
				t.Errorf("came back as %#v, want %#v", got, c.want)
			}
			if f, ok := c.want["b"].(float64); ok && f == 0 && math.Signbit(f) != math.Signbit(got.(map[string]any)["b"].(float64)) {
				t.Errorf("-0.0 lost its sign")
			}
			if string(skipped) != c.skipped {
				t.Errorf("skipped %q, want %q", skipped, c.skipped)
			}
			if apiVersion != c.apiVersion || kind != c.kind {
				t.Errorf("apiVersion, kind are %q, %q, want %q, %q", apiVersion, kind, c.apiVersion, c.kind)
			}
		})
	}
}

func TestFromJSONSkipsTheGivenKeyOnlyAtTheTop(t *testing.T) {
	data := []byte(`{"apiVersion":"v1","kind":"K","spec":{"kind":"inner"},"status":{"x":1}}`)
	for _, c := range []struct {
		skip, skipped, apiVersion, kind string
		want                            map[string]any
	}{
		{"status", `{"x":1}`, "v1", "K", map[string]any{"apiVersion": "v1", "kind": "K", "spec": map[string]any{"kind": "inner"}}},
		{"kind", `"K"`, "v1", "K", map[string]any{"apiVersion": "v1", "spec": map[string]any{"kind": "inner"}, "status": map[string]any{"x": int64(1)}}},
		{"apiVersion", `"v1"`, "v1", "K", map[string]any{"kind": "K", "spec": map[string]any{"kind": "inner"}, "status": map[string]any{"x": int64(1)}}},
		{"x", ``, "v1", "K", map[string]any{"apiVersion": "v1", "kind": "K", "spec": map[string]any{"kind": "inner"}, "status": map[string]any{"x": int64(1)}}},
	} {
		packed, skipped, apiVersion, kind, err := FromJSON(nil, data, c.skip)
		if err != nil {
			t.Fatalf("skipping %s: %v", c.skip, err)
		}
		got, err := Unpack(string(packed))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, c.want) || string(skipped) != c.skipped || apiVersion != c.apiVersion || kind != c.kind {
			t.Errorf("skipping %s gave %#v, %q, %q, %q; want %#v, %q, %q, %q",
				c.skip, got, skipped, apiVersion, kind, c.want, c.skipped, c.apiVersion, c.kind)
		}
	}
}

// Strings, maps and lists whose lengths take more than a byte pack as
// appendString and Append pack them, byte for byte.
func TestFromJSONPacksLongValuesAsAppend(t *testing.T) {
	long := strings.Repeat("x", 200)
	list := "[" + strings.Repeat("true,", 299) + "true]"
	for _, doc := range []string{
		`{"s":"` + long + `"}`,
		`{"s":"` + strings.Repeat(`\u00e9`, 100) + `"}`,
		`{"s":"` + strings.Repeat("\xff", 50) + `"}`,
		`{"s":` + list + `}`,
		`{"s":[` + list + `,` + list + `]}`,
		`{"s":{"a":` + list + `}}`,
		`{"s":"\u0052eady"}`,
	} {
		packsAsAppend(t, doc, "metadata")
	}
}

// packsAsAppend checks that FromJSON packs doc (without skip, absent from
// it) to the very bytes Append packs its decoded map to.
func packsAsAppend(t *testing.T, doc, skip string) {
	t.Helper()
	m, err := decodeMap([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	want, err := Append(nil, m)
	if err != nil {
		t.Fatal(err)
	}
	got, _, _, _, err := FromJSON(nil, []byte(doc), skip)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("FromJSON(%.40q...) packed\n%q, Append\n%q", doc, got, want)
	}
}

// Every common string, as a key or a value, escaped or not, packs to its
// two bytes, and no other string does.
func TestFromJSONPacksCommonStringsAsAppend(t *testing.T) {
	others := []string{"", "a", "Kind", "kinds", "kin", "apiversion", "metadata ", "spec_", "lastTransitionTim", "lastTransitionTimes", strings.Repeat("x", 18)}
	for _, s := range append(others, commonStrings[:]...) {
		for _, doc := range []string{`{"` + s + `":"` + s + `"}`, `{"` + escapeAll(s) + `":"` + escapeAll(s) + `"}`} {
			packsAsAppend(t, doc, "-")
		}
	}
}

// escapeAll escapes every byte of the ASCII s as \u00XX.
func escapeAll(s string) string {
	var b strings.Builder
	for _, c := range []byte(s) {
		b.WriteString(`\u00` + strconv.FormatUint(uint64(c)>>4, 16) + strconv.FormatUint(uint64(c)&15, 16))
	}
	return b.String()
}

// Into a buffer large enough, FromJSON allocates only the apiVersion and
// kind it returns.
func TestFromJSONAllocatesOnlyAPIVersionAndKind(t *testing.T) {
	buf := make([]byte, 0, 4096)
	for _, c := range []struct {
		json   string
		allocs float64
	}{
		{customResourceJSON, 2},
		{deploymentJSON, 2},
		{`{"a":[1,-1,1234567890123456789,-9223372036854775808,9223372036854775808,1.5,1e300,-0.0],"b":"\u00e9\n\ud83d\ude00 ` + "\xff" + `","c":{"d":null,"e":true}}`, 0},
		{`{` + manyKeys(20) + `}`, 1},
	} {
		data := []byte(c.json)
		allocs := testing.AllocsPerRun(100, func() {
			if _, _, _, _, err := FromJSON(buf[:0], data, "metadata"); err != nil {
				t.Fatal(err)
			}
		})
		if allocs > c.allocs {
			t.Errorf("FromJSON(%.40q...) allocated %v times, want at most %v", c.json, allocs, c.allocs)
		}
	}
}

var (
	configMapJSON = `{
  "apiVersion": "v1",
  "kind": "ConfigMap",
  "metadata": {
    "name": "settings",
    "namespace": "default",
    "uid": "1f7c3c52-9b0e-4a8e-9d43-6f0c2b7c1a11",
    "resourceVersion": "48213",
    "creationTimestamp": "2025-03-01T10:00:00Z",
    "labels": {"app.kubernetes.io/name": "web", "tier": "frontend"},
    "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\"}\n"}
  },
  "data": {
    "config.yaml": "server:\n  port: 8080\n  host: \"0.0.0.0\"\n",
    "empty": "",
    "unicode": "h\u00e9llo \u4e16\u754c"
  },
  "binaryData": {"blob": "AAECAwQ="}
}`
	customResourceJSON = `{"apiVersion":"bench.opkit.dev/v1alpha1","kind":"Printer","metadata":{"name":"printer-0042","namespace":"bench",` +
		`"uid":"0b7d5f1e-2c8a-4c55-a0e4-3f1d2b9c8e77","resourceVersion":"1234567","generation":7,"creationTimestamp":"2025-03-01T10:00:00Z",` +
		`"labels":{"app.kubernetes.io/managed-by":"opkit","team":"printing"},"annotations":{"opkit.dev/trigger":"spec"},` +
		`"finalizers":["opkit.dev/cleanup"],"ownerReferences":[{"apiVersion":"v1","kind":"Namespace","name":"bench","uid":"5d5c1b7e-0000-4000-8000-000000000001","controller":true}]},` +
		`"spec":{"text":"Hello, world! \u00e9 <b>bold</b>","copies":3,"ratio":0.75,"duplex":true,"paper":{"size":"A4","weightGsm":80},` +
		`"queue":["alpha","beta","gamma"],"schedule":{"cron":"*/5 * * * *","timezone":"Europe/Paris","suspend":false},"notes":null,` +
		`"limits":{"cpu":"500m","memory":"256Mi"}},` +
		`"status":{"observedGeneration":7,"phase":"Printing","printed":128,"lastPrintTime":"2025-03-01T10:05:00Z","progress":0.5,` +
		`"conditions":[{"type":"Ready","status":"True","reason":"Reconciled","message":"all copies queued","lastTransitionTime":"2025-03-01T10:05:00Z","observedGeneration":7},` +
		`{"type":"Degraded","status":"False","reason":"AsExpected","message":"","lastTransitionTime":"2025-03-01T10:00:00Z","observedGeneration":7},` +
		`{"type":"Stalled","status":"Unknown","reason":"Pending","message":"waiting for the \"printer\" to warm up","lastTransitionTime":"2025-03-01T10:00:00Z","observedGeneration":6}]}}`
	deploymentJSON = `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","namespace":"default","generation":2,
"labels":{"app":"web"},"managedFields":[{"manager":"kubectl","operation":"Update","apiVersion":"apps/v1","time":"2025-03-01T10:00:00Z",
"fieldsType":"FieldsV1","fieldsV1":{"f:spec":{"f:replicas":{},"f:template":{"f:spec":{"f:containers":{"k:{\"name\":\"web\"}":{".":{},"f:image":{}}}}}}}}]},
"spec":{"replicas":3,"revisionHistoryLimit":10,"progressDeadlineSeconds":600,"selector":{"matchLabels":{"app":"web"}},
"strategy":{"type":"RollingUpdate","rollingUpdate":{"maxSurge":"25%","maxUnavailable":"25%"}},
"template":{"metadata":{"labels":{"app":"web"},"creationTimestamp":null},"spec":{"terminationGracePeriodSeconds":30,
"containers":[{"name":"web","image":"nginx:1.27","args":["--port","8080"],"ports":[{"containerPort":8080,"protocol":"TCP","name":"http"}],
"env":[{"name":"MODE","value":"production"},{"name":"RATIO","value":"0.5"}],
"resources":{"requests":{"cpu":"100m","memory":"128Mi"},"limits":{"cpu":"1","memory":"512Mi"}},
"readinessProbe":{"httpGet":{"path":"/healthz","port":8080},"periodSeconds":10,"failureThreshold":3},
"securityContext":{"runAsNonRoot":true,"runAsUser":1000,"readOnlyRootFilesystem":true},
"volumeMounts":[{"name":"config","mountPath":"/etc/web"}]}],
"volumes":[{"name":"config","configMap":{"name":"settings","defaultMode":420}}]}}},
"status":{"observedGeneration":2,"replicas":3,"updatedReplicas":3,"readyReplicas":3,"availableReplicas":3,
"conditions":[{"type":"Available","status":"True","lastUpdateTime":"2025-03-01T10:01:00Z","lastTransitionTime":"2025-03-01T10:01:00Z","reason":"MinimumReplicasAvailable","message":"Deployment has minimum availability."},
{"type":"Progressing","status":"True","lastUpdateTime":"2025-03-01T10:01:00Z","lastTransitionTime":"2025-03-01T10:00:00Z","reason":"NewReplicaSetAvailable","message":"ReplicaSet \"web-5d8f9c7b6\" has successfully progressed."}]}}`
)

func TestFromJSONPacksKubernetesObjectsAsTheMapPath(t *testing.T) {
	for _, c := range []struct{ name, json, apiVersion, kind string }{
		{"ConfigMap", configMapJSON, "v1", "ConfigMap"},
		{"custom resource", customResourceJSON, "bench.opkit.dev/v1alpha1", "Printer"},
		{"Deployment", deploymentJSON, "apps/v1", "Deployment"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, skipped, apiVersion, kind, err := checkFromJSON(t, []byte(c.json))
			if err != nil {
				t.Fatal(err)
			}
			if len(got.(map[string]any)) == 0 || len(skipped) == 0 || skipped[0] != '{' || skipped[len(skipped)-1] != '}' {
				t.Errorf("gave %#v, skipped %q", got, skipped)
			}
			if apiVersion != c.apiVersion || kind != c.kind {
				t.Errorf("apiVersion, kind are %q, %q, want %q, %q", apiVersion, kind, c.apiVersion, c.kind)
			}
		})
	}
}

// For any input FromJSON gives what the map path gives, ErrDuplicateKey
// for a key twice, or an error where the map path has one; never a panic.
func FuzzFromJSON(f *testing.F) {
	for _, c := range fromJSONCases {
		if len(c.json) < 1000 {
			f.Add([]byte(c.json))
		}
	}
	f.Add([]byte(configMapJSON))
	f.Add([]byte(customResourceJSON))
	f.Add([]byte(deploymentJSON))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _, _, _, _ = checkFromJSON(t, data)
	})
}

func BenchmarkFromJSON(b *testing.B) {
	data := []byte(customResourceJSON)
	buf := make([]byte, 0, 2048)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if buf, _, _, _, err = FromJSON(buf[:0], data, "metadata"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkUnmarshalThenPack(b *testing.B) {
	data := []byte(customResourceJSON)
	buf := make([]byte, 0, 2048)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		var m map[string]any
		if err := utiljson.Unmarshal(data, &m); err != nil {
			b.Fatal(err)
		}
		var err error
		if buf, err = AppendMapWithout(buf[:0], m, "metadata"); err != nil {
			b.Fatal(err)
		}
	}
}
