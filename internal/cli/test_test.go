package cli

import (
	"slices"
	"testing"
)

func TestGoTestFlagsSpellOpkitTestsFlagsAsGoTestDoes(t *testing.T) {
	for _, c := range []struct{ in, want []string }{
		{[]string{"test", "-run", "^printer", "-v", "examples"}, []string{"test", "--run", "^printer", "-v", "examples"}},
		{[]string{"test", "-run=x", "-junit=r.xml"}, []string{"test", "--run=x", "--junit=r.xml"}},
		{[]string{"test", "--run", "x", "--", "-run"}, []string{"test", "--run", "x", "--", "-run"}},
		{[]string{"runs", "-run"}, []string{"runs", "-run"}}, // another command: as given
		{nil, nil},
	} {
		if got := goTestFlags(c.in); !slices.Equal(got, c.want) {
			t.Errorf("goTestFlags(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
