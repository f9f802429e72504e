package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/engine"
	"github.com/opkit-dev/opkit/internal/sleep"
)

// reloader keeps an engine running the Operators defined in a directory's
// files. Each file is compiled on its own: an error in one file leaves the
// operators of the others, and that file's last valid operators, running.
type reloader struct {
	dir    string
	engine *engine.Engine
	log    io.Writer

	contents map[string][]byte // file -> what was last read
	// leaving holds the files that, at the last poll, were gone or no
	// longer held an Operator: their operators stop if the next poll
	// says so again (a file being written may read so for a moment).
	leaving map[string]bool
	byFile  map[string][]string // file -> names of the operators it defines, as running
	applied map[string][32]byte // operator name -> hash of the spec running
	failed  map[string]bool     // files whose last version was refused
	skipped map[string]string   // file -> why it is skipped, as last said
	// objects are the files given to --apply, by absolute path: skipped
	// without a word, as they are known to hold objects, not Operators.
	objects map[string]bool
}

// watch polls the directory every interval until ctx ends. Polling reads a
// few small files a second; it sees edits made by any editor (rename, write
// in place) and through any file system.
func (r *reloader) watch(ctx context.Context, interval time.Duration) {
	sleep.Tick(ctx, interval, func() { _ = r.sync(ctx) }) // reported to r.log
}

// sync applies what changed in the directory since the last call. It
// returns the errors it reported.
func (r *reloader) sync(ctx context.Context) error {
	if r.contents == nil {
		r.contents, r.byFile, r.applied, r.failed, r.leaving = map[string][]byte{}, map[string][]string{}, map[string][32]byte{}, map[string]bool{}, map[string]bool{}
	}
	files, err := r.operatorFiles()
	if err != nil {
		fmt.Fprintf(r.log, "reload: %v\n", err)
		return err
	}
	var errs []error
	for file := range r.contents {
		if slices.Contains(files, file) {
			delete(r.leaving, file)
			continue
		}
		if !r.leaving[file] {
			r.leaving[file] = true // gone for good if the next poll agrees
			continue
		}
		delete(r.leaving, file)
		delete(r.contents, file)
		r.removeFile(ctx, file, nil)
	}
	var changed []fileRead
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if old, ok := r.contents[file]; ok && bytes.Equal(old, data) {
			continue
		}
		changed = append(changed, fileRead{file, data})
	}
	// Those being written are left out: the next poll reads them whole.
	for _, c := range settled(changed) {
		file, data := c.file, c.data
		r.contents[file] = data
		if err := r.loadFile(ctx, file, data); err != nil {
			fmt.Fprintf(r.log, "reload: %v\n", err)
			errs = append(errs, err)
			r.failed[file] = true
		} else {
			delete(r.failed, file)
		}
	}
	return errors.Join(errs...)
}

// settleTime is how long a changed file is left before it is read again.
// An editor or a script that writes a file in place truncates it first:
// read in between, it is empty or cut short, and would stop or refuse
// the operators it defines.
const settleTime = 50 * time.Millisecond

// fileRead is a file and what was read of it.
type fileRead struct {
	file string
	data []byte
}

// settled returns the files of reads that read the same a moment later
// (one wait for them all).
func settled(reads []fileRead) []fileRead {
	if len(reads) == 0 {
		return nil
	}
	time.Sleep(settleTime)
	var out []fileRead
	for _, r := range reads {
		if again, err := os.ReadFile(r.file); err == nil && bytes.Equal(again, r.data) {
			out = append(out, r)
		}
	}
	return out
}

// operatorFiles lists the directory's Operator files and says which files
// it skips: each once, until the reason changes.
func (r *reloader) operatorFiles() ([]string, error) {
	files, skipped, err := operatorFiles(r.dir)
	if err != nil {
		return nil, err
	}
	for file, why := range skipped {
		if abs, err := filepath.Abs(file); err == nil && r.objects[abs] {
			continue
		}
		if r.skipped[file] != why {
			fmt.Fprintln(r.log, why)
		}
	}
	r.skipped = skipped
	return files, nil
}

// fileHead is what the first YAML document of a file in opkit dev's
// directory says it is.
type fileHead struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	// Scenario is the name of an opkit test scenario (scenario.Scenario).
	Scenario any `yaml:"scenario"`
}

// notAnOperator says why a file that holds no Operator is skipped, naming
// what it holds; "" for a scenario file, which is expected beside the
// definitions it tests.
func (h fileHead) notAnOperator(file string) string {
	var what string
	switch {
	case h.APIVersion == "" && h.Kind == "" && h.Scenario != nil:
		return ""
	case h.APIVersion != "" && h.Kind != "":
		what = h.APIVersion + " " + h.Kind
	case h.Kind != "":
		what = "kind " + h.Kind + ", with no apiVersion"
	case h.APIVersion != "":
		what = "apiVersion " + h.APIVersion + ", with no kind"
	default:
		what = "neither apiVersion nor kind"
	}
	return fmt.Sprintf("skipping %s: not an Operator (%s)", file, what)
}

// loadFile compiles one file and applies its operators that changed.
func (r *reloader) loadFile(ctx context.Context, file string, data []byte) error {
	srcs, err := definition.Load(file, data)
	if err != nil {
		return fmt.Errorf("%w\n(the last valid version of %s keeps running)", err, file)
	}
	var defs []*definition.Definition
	var errs []error
	for _, src := range srcs {
		d, err := definition.Compile(src)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if other := r.definedIn(d.Operator.Name); other != "" && other != file {
			errs = append(errs, fmt.Errorf("%s: operator %s is already defined in %s", file, d.Operator.Name, other))
			continue
		}
		defs = append(defs, d)
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w\n(the last valid version of %s keeps running)", errors.Join(errs...), file)
	}
	var names []string
	for _, d := range defs {
		names = append(names, d.Operator.Name)
		spec, _ := json.Marshal(d.Operator.Spec)
		sum := sha256.Sum256(spec)
		if prev, ok := r.applied[d.Operator.Name]; ok && prev == sum {
			if r.failed[file] {
				// A refused edit was undone: the error on screen is stale.
				fmt.Fprintf(r.log, "operator %s: reloaded (%s, %s; unchanged since its last valid version)\n", d.Operator.Name, d.What(), file)
			}
			continue
		}
		verb := "running"
		if _, ok := r.applied[d.Operator.Name]; ok {
			verb = "reloaded"
		}
		printWarnings(r.log, d)
		if err := r.engine.Apply(ctx, d); err != nil {
			if _, breaking := errors.AsType[*engine.BreakingChangeError](err); breaking && verb == "reloaded" {
				err = fmt.Errorf("%w\n(the running version of operator %s keeps running)", err, d.Operator.Name)
			}
			errs = append(errs, err)
			continue
		}
		r.applied[d.Operator.Name] = sum
		fmt.Fprintf(r.log, "operator %s: %s (%s, %s)\n", d.Operator.Name, verb, d.What(), file)
		printSources(r.log, r.engine, d)
	}
	r.removeFile(ctx, file, names)
	r.byFile[file] = names
	return errors.Join(errs...)
}

// removeFile stops the operators the file defined that are not in keep.
func (r *reloader) removeFile(ctx context.Context, file string, keep []string) {
	for _, name := range r.byFile[file] {
		if slices.Contains(keep, name) {
			continue
		}
		r.engine.Remove(ctx, name)
		delete(r.applied, name)
		fmt.Fprintf(r.log, "operator %s: stopped (no longer defined in %s)\n", name, file)
	}
	delete(r.byFile, file)
}

// definedIn returns the file that defines a running operator, or "".
func (r *reloader) definedIn(name string) string {
	for file, names := range r.byFile {
		if slices.Contains(names, name) {
			return file
		}
	}
	return ""
}
