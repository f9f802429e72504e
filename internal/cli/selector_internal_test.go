package cli

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/labels"
)

// TestOperatorSelectorIsParsedOrRefusedByName: opkit run --selector takes
// kubectl's label selectors, says what is wrong with one it cannot
// parse, and is refused with -f, where the files choose the operators.
func TestOperatorSelectorIsParsedOrRefusedByName(t *testing.T) {
	for _, tc := range []struct {
		in        string
		withFiles bool
		matches   labels.Set
		misses    labels.Set
		err       string
	}{
		{in: ""},
		{in: "team=payments", matches: labels.Set{"team": "payments"}, misses: labels.Set{"team": "search"}},
		{in: "team in (a,b),!legacy", matches: labels.Set{"team": "b"}, misses: labels.Set{"team": "a", "legacy": "yes"}},
		{in: "team=", matches: labels.Set{"team": ""}, misses: labels.Set{"team": "a"}},
		{in: "team==a==b", err: `--selector "team==a==b": `},
		{in: "Team Payments", err: `--selector "Team Payments": `},
		{in: "team=payments", withFiles: true, err: "--selector chooses among the Operators of the cluster; with -f, the files say which operators run"},
	} {
		sel, err := operatorSelector(tc.in, tc.withFiles)
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q (files %v): %v, want an error with %q", tc.in, tc.withFiles, err, tc.err)
			}
		case err != nil:
			t.Errorf("%q: %v", tc.in, err)
		case tc.matches == nil:
			if sel != nil {
				t.Errorf("%q: selector %v, want none (every Operator)", tc.in, sel)
			}
		case !sel.Matches(tc.matches) || sel.Matches(tc.misses):
			t.Errorf("%q: matches %v: %v, %v: %v", tc.in, tc.matches, sel.Matches(tc.matches), tc.misses, sel.Matches(tc.misses))
		}
	}
}
