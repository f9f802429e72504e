package cli

import (
	"bytes"
	"slices"
	"strings"
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

func TestTestSaysNoScenarioIsSelectedBeforeStartingAPlane(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := Main([]string{"test", "--run", "nomatch", "../../examples/printer"}, &stdout, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), `no scenario selected: --run nomatch matches none of their names: "a printer prints its text`) {
		t.Errorf("exit %d, stderr %q; want 1 and the names --run did not match", code, stderr.String())
	}
	if strings.Contains(stderr.String(), "control plane") {
		t.Errorf("a plane was started for no scenario:\n%s", stderr.String())
	}
}
