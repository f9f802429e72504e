package manifests

import (
	"regexp"
	"strings"

	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
)

// DevelopmentTag is the default image's tag for an opkit that is not a
// release: the newest image published, as no image of its own version
// exists.
const DevelopmentTag = "latest"

// gitDescribed is what git describe adds to a tag for a commit after it:
// -<commits since>-g<hash>.
var gitDescribed = regexp.MustCompile(`-[0-9]+-g[0-9a-f]{4,}$`)

// ImageTag is the tag of the engine's default image for an opkit version,
// and whether that version is a release: a semantic version (v1.2.3, or a
// pre-release such as v1.3.0-rc.1), as `go install ...@v1.2.3` records it
// and `make image` sets it from a tagged commit, is its own tag. Any other
// version is a development build's, tagged DevelopmentTag: "(devel)" or
// "" (a build from a checkout), a Go pseudo-version, git describe's
// v1.2.3-4-gabc1234 or a bare commit hash, a dirty tree's (-dirty,
// +dirty).
func ImageTag(version string) (tag string, release bool) {
	v := version
	if !semver.IsValid(v) || semver.Build(v) != "" || module.IsPseudoVersion(v) ||
		gitDescribed.MatchString(v) || strings.HasSuffix(v, "-dirty") {
		return DevelopmentTag, false
	}
	return v, true
}

// DefaultImage is the engine's image for an opkit version:
// DefaultImageRepository with ImageTag's tag.
func DefaultImage(version string) string {
	tag, _ := ImageTag(version)
	return DefaultImageRepository + ":" + tag
}
