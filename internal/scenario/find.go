package scenario

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Suffix ends the name of every scenario file Find looks for.
const Suffix = ".test.yaml"

// Find lists the scenario files of paths: a file is taken as it is,
// whatever its name; a directory is walked for files named *.test.yaml,
// skipping directories whose names start with a dot (.git). The list is
// sorted and has no duplicates. A path that does not exist, or a directory
// without a scenario file, is an error naming it.
func Find(paths ...string) ([]string, error) {
	var files []string
	for _, p := range paths {
		info, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		if !info.IsDir() {
			files = append(files, p)
			continue
		}
		found := 0
		err = filepath.WalkDir(p, func(path string, e fs.DirEntry, err error) error {
			switch {
			case err != nil:
				return err
			case e.IsDir() && path != p && strings.HasPrefix(e.Name(), "."):
				return filepath.SkipDir
			case !e.IsDir() && strings.HasSuffix(e.Name(), Suffix):
				files = append(files, path)
				found++
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		if found == 0 {
			return nil, fmt.Errorf("%s: no scenario file (*%s) in it or below", p, Suffix)
		}
	}
	slices.Sort(files)
	return slices.Compact(files), nil
}
