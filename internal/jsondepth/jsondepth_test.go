package jsondepth_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/opkit-dev/opkit/internal/jsondepth"
)

func nested(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }

func TestCheckCountsBracketsOutsideStrings(t *testing.T) {
	for _, tc := range []struct {
		name  string
		data  string
		limit int
		at    int // -1: within the limit
	}{
		{"a scalar", `"x"`, 0, -1},
		{"an object at the limit", `{"a":{"b":1}}`, 2, -1},
		{"an object past it", `{"a":{"b":{}}}`, 2, 10},
		{"arrays at the limit", nested(100), 100, -1},
		{"arrays past it", nested(101), 100, 100},
		{"brackets in a string", `{"a":"[[[[{{{{"}`, 1, -1},
		{"an escaped quote in a string", `{"a":"\"[[["}`, 1, -1},
		{"an escaped backslash ends before the quote", `{"a":"\\","b":[[]]}`, 2, 15},
		{"siblings do not add up", `[[1],[2],[3]]`, 2, -1},
		{"the 20 KB bomb", nested(10_000), jsondepth.Max, jsondepth.Max},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := jsondepth.Check([]byte(tc.data), tc.limit)
			var de *jsondepth.Error
			switch {
			case tc.at < 0 && err != nil:
				t.Errorf("Check(%.40q, %d) = %v, want nil", tc.data, tc.limit, err)
			case tc.at >= 0 && !errors.As(err, &de):
				t.Errorf("Check(%.40q, %d) = %v, want an *Error", tc.data, tc.limit, err)
			case tc.at >= 0 && (de.Offset != tc.at || de.Limit != tc.limit):
				t.Errorf("Check(%.40q, %d) = %+v, want the limit and offset %d", tc.data, tc.limit, de, tc.at)
			}
		})
	}
}

func TestCheckErrorSaysTheLimitAndWhere(t *testing.T) {
	err := jsondepth.Check([]byte(nested(200)), jsondepth.Max)
	if want := "nested deeper than 100 objects and arrays (at byte 100)"; err == nil || err.Error() != want {
		t.Errorf("got %v, want %q", err, want)
	}
}

func TestValueAgreesWithCheckOnDecodedJSON(t *testing.T) {
	for _, data := range []string{`1`, `{}`, `{"a":[1,{"b":[]}]}`, nested(5), nested(6), `{"a":{"b":{"c":{"d":{}}}}}`} {
		var v any
		if err := json.Unmarshal([]byte(data), &v); err != nil {
			t.Fatal(err)
		}
		for limit := range 7 {
			if got, want := jsondepth.Value(v, limit), jsondepth.Check([]byte(data), limit) == nil; got != want {
				t.Errorf("Value(%s, %d) = %v; Check says %v", data, limit, got, want)
			}
		}
	}
}
