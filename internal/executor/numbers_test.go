package executor

import (
	"strings"
	"testing"
)

// A result's numbers are read as the API server reads them: an integer
// value that fits 64 bits exactly, however it is written; any other as a
// float64; one no float64 holds refused, naming the first such field in
// key order, quoted.
func TestAResultsNumbersAreReadExactly(t *testing.T) {
	for _, c := range []struct {
		in   string
		want any
	}{
		{"9007199254740993", int64(9007199254740993)},
		{"9007199254740993.0", int64(9007199254740993)},
		{"9.007199254740993e15", int64(9007199254740993)},
		{"90071992547409930e-1", int64(9007199254740993)},
		{"-9223372036854775808", int64(-9223372036854775808)},
		{"1e3", int64(1000)},
		{"-0", int64(0)},
		{"-1e-400", int64(0)},
		{"0.5", 0.5},
		{"1.5e-3", 0.0015},
		{"9223372036854775808", 9223372036854775808.0},
	} {
		res, err := ParseResult([]byte(`{"status": {"n": ` + c.in + `}}`))
		if err != nil {
			t.Errorf("%s: %v", c.in, err)
			continue
		}
		if got := res.Status["n"]; got != c.want {
			t.Errorf("%s read as %v (%T), want %v (%T)", c.in, got, got, c.want, c.want)
		}
	}
	_, err := ParseResult([]byte(`{"status": {"z": 1e400, "a\n\u001b[31m": 1e999, "m": [1, 2e500]}}`))
	if err == nil || !strings.Contains(err.Error(), `"status.a\n\x1b[31m": the number 1e999 is out of range`) {
		t.Errorf("numbers out of range: %v, want the first in key order named, quoted", err)
	}
}
