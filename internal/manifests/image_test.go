package manifests

import (
	"regexp"
	"testing"
)

// tagSyntax is an image tag's, as the OCI distribution spec writes it.
var tagSyntax = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)

func TestImageTagIsTheVersionNeverLatest(t *testing.T) {
	for _, c := range []struct {
		version, tag string
		release      bool
	}{
		{"v1.2.3", "v1.2.3", true},
		{"v1.3.0-rc.1", "v1.3.0-rc.1", true},
		{"", "devel", false},
		{"(devel)", "devel", false},
		{"v0.0.0-20260126123456-abcdef123456", "v0.0.0-20260126123456-abcdef123456", false},             // a pseudo-version, as go build records it
		{"v1.2.4-0.20260126123456-abcdef123456", "v1.2.4-0.20260126123456-abcdef123456", false},         // one after a tag
		{"v0.0.0-20260126123456-abcdef123456+dirty", "v0.0.0-20260126123456-abcdef123456-dirty", false}, // of a dirty tree
		{"v1.2.3-4-gabc1234", "v1.2.3-4-gabc1234", false},                                               // git describe, a commit after the tag: make image's tag
		{"v1.2.3-4-gabc1234-dirty", "v1.2.3-4-gabc1234-dirty", false},
		{"v1.2.3-dirty", "v1.2.3-dirty", false},
		{"6a2ce0b", "6a2ce0b", false}, // git describe --always, no tag
		{"1.2.3", "1.2.3", false},     // not how a Go version is written
	} {
		tag, release := ImageTag(c.version)
		if tag != c.tag || release != c.release {
			t.Errorf("ImageTag(%q) = %q, %v; want %q, %v", c.version, tag, release, c.tag, c.release)
		}
		if !tagSyntax.MatchString(tag) || tag == "latest" {
			t.Errorf("ImageTag(%q) = %q: not a usable pinned tag", c.version, tag)
		}
	}
	if got := DefaultImage("v1.2.3"); got != "ghcr.io/opkit-dev/opkit:v1.2.3" {
		t.Errorf("DefaultImage(v1.2.3) = %q", got)
	}
}
