package layers

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestEveryPackageIsInTheArchitecture checks that docs/architecture.md's
// table of packages names every package under internal/ and pkg/ (the
// packages directly below them), and no package that is not there: a
// new feature's package is said where a contributor looks first.
func TestEveryPackageIsInTheArchitecture(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## The packages\n")
	if !ok {
		t.Fatal("docs/architecture.md has no section \"## The packages\"")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	named := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `((?:internal|pkg)/[a-z0-9]+)` \\|").FindAllStringSubmatch(section, -1) {
		named[m[1]] = true
	}
	for _, root := range []string{"internal", "pkg"} {
		entries, err := os.ReadDir(filepath.Join("..", "..", root))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if !e.IsDir() {
				continue
			}
			pkg := root + "/" + e.Name()
			if !hasGo(t, filepath.Join("..", "..", pkg)) {
				continue
			}
			if !named[pkg] {
				t.Errorf("docs/architecture.md, The packages: %s is missing; add a row saying what it is", pkg)
			}
			delete(named, pkg)
		}
	}
	for pkg := range named {
		t.Errorf("docs/architecture.md, The packages: %s is named, and there is no such package", pkg)
	}
}

// hasGo reports whether dir, or a directory below it, holds a Go file.
func hasGo(t *testing.T, dir string) bool {
	found := false
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") {
			found = true
			return filepath.SkipAll
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}
