package manifests

import "testing"

func TestImageTagIsTheVersionOfAReleaseAndLatestOtherwise(t *testing.T) {
	for _, c := range []struct {
		version string
		tag     string
	}{
		{"v1.2.3", "v1.2.3"},
		{"v0.4.0", "v0.4.0"},
		{"v1.3.0-rc.1", "v1.3.0-rc.1"},
		{"", DevelopmentTag},
		{"(devel)", DevelopmentTag},
		{"v0.0.0-20260126123456-abcdef123456", DevelopmentTag},       // a pseudo-version, as go build records it
		{"v1.2.4-0.20260126123456-abcdef123456", DevelopmentTag},     // one after a tag
		{"v0.0.0-20260126123456-abcdef123456+dirty", DevelopmentTag}, // of a dirty tree
		{"v1.2.3-4-gabc1234", DevelopmentTag},                        // git describe, a commit after the tag
		{"v1.2.3-4-gabc1234-dirty", DevelopmentTag},
		{"v1.2.3-dirty", DevelopmentTag},
		{"6a2ce0b", DevelopmentTag}, // git describe --always, no tag
		{"1.2.3", DevelopmentTag},   // not how a Go version is written
	} {
		tag, release := ImageTag(c.version)
		if tag != c.tag || release != (c.tag != DevelopmentTag) {
			t.Errorf("ImageTag(%q) = %q, %v; want %q", c.version, tag, release, c.tag)
		}
	}
	if got := DefaultImage("v1.2.3"); got != "ghcr.io/opkit-dev/opkit:v1.2.3" {
		t.Errorf("DefaultImage(v1.2.3) = %q", got)
	}
}
