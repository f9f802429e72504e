package manifests

import (
	"regexp"
	"strings"

	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
)

// DevelopmentTag is the tag of a development build whose version gives
// no tag at all ("" or "(devel)": a build whose version was not
// recorded).
const DevelopmentTag = "devel"

// gitDescribed is what git describe adds to a tag for a commit after it:
// -<commits since>-g<hash>.
var gitDescribed = regexp.MustCompile(`-[0-9]+-g[0-9a-f]{4,}$`)

// notInTag are the characters an image tag cannot hold
// ([A-Za-z0-9_][A-Za-z0-9_.-]{0,127}).
var notInTag = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

// ImageTag is the tag of the engine's default image for an opkit
// version, and whether that version is a release. The tag is always the
// version, never latest: an image named by version is the one that
// speaks this opkit's flags and agent protocol. A release is a semantic
// version (v1.2.3, or a pre-release such as v1.3.0-rc.1), as `go install
// ...@v1.2.3` records it and `make image` sets it from a tagged commit.
// Any other version is a development build's, whose image is not
// published but can be built and pushed under the same tag (`make image`
// names its image by git describe, which is the version it links in): a
// Go pseudo-version, git describe's v1.2.3-4-gabc1234 or a bare commit
// hash, a dirty tree's (-dirty, +dirty), with what a tag cannot hold
// (+) as -; "(devel)" or "" give DevelopmentTag.
func ImageTag(version string) (tag string, release bool) {
	v := version
	release = semver.IsValid(v) && semver.Build(v) == "" && !module.IsPseudoVersion(v) &&
		!gitDescribed.MatchString(v) && !strings.HasSuffix(v, "-dirty")
	tag = strings.Trim(notInTag.ReplaceAllString(v, "-"), "-.")
	switch {
	case tag == "" || tag == "devel":
		tag = DevelopmentTag
	case len(tag) > 128:
		tag = tag[:128]
	}
	return tag, release
}

// DefaultImage is the engine's image for an opkit version:
// DefaultImageRepository with ImageTag's tag.
func DefaultImage(version string) string {
	tag, _ := ImageTag(version)
	return DefaultImageRepository + ":" + tag
}
