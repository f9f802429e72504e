package opkittest

import (
	"regexp"
	"strings"
	"testing"
)

func TestNamespaceNameIsAUniqueDNSLabel(t *testing.T) {
	label := regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	for _, test := range []string{
		"TestX",
		"TestPrinter/with_a_subtest",
		"Test__Odd--Name__",
		strings.Repeat("TestLong", 20),
	} {
		a, b := namespaceName(test), namespaceName(test)
		if !label.MatchString(a) || len(a) > 63 {
			t.Errorf("namespaceName(%q) = %q, not a DNS label", test, a)
		}
		if a == b {
			t.Errorf("namespaceName(%q) gave %q twice", test, a)
		}
	}
}
