package scenario

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/google/cel-go/cel"
	"go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/apiserver/pkg/cel/environment"

	"github.com/opkit-dev/opkit/internal/definition"
)

// Messages said both by the schema's checks and by Load's own, which
// check the objects of apply files.
const namespaceMessage = "the namespace is the scenario's own: remove metadata.namespace"

func durationSyntaxMessage(s string) string {
	return fmt.Sprintf("%q is not a Go duration: write it with its unit, such as 30s, 5m or 1h30m", s)
}

func nameMessage(s string) string {
	return fmt.Sprintf("%q is not an object name: lower-case letters, digits, '-' and '.', starting and ending with a letter or digit, at most 253", s)
}

// nameRE is a DNS subdomain, as the schema's $defs/name.
var nameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)

// duration parses a duration that must be more than 0 and, when max is
// not 0, at most max.
func (d *decoder) duration(field, s string, maxDuration time.Duration) time.Duration {
	v, err := time.ParseDuration(s)
	switch {
	case err != nil:
		d.l.add(field, "%s", durationSyntaxMessage(s))
	case v <= 0:
		d.l.add(field, "must be more than 0")
	case maxDuration > 0 && v > maxDuration:
		d.l.add(field, "must be at most %s: a scenario that waits longer is too slow to run often; advance the clock (advance: 1h) instead of waiting for time to pass", definition.ShortDuration(maxDuration))
	default:
		return v
	}
	return 0
}

// timeout parses a timeout, or gives fallback when it is not valid.
func (d *decoder) timeout(field, s string, fallback time.Duration) time.Duration {
	if v := d.duration(field, s, MaxTimeout); v > 0 {
		return v
	}
	return fallback
}

// file resolves a path given in the scenario against the scenario file's
// directory and checks that it is a file.
func (d *decoder) file(field, p string) string {
	resolved := p
	if !filepath.IsAbs(p) {
		resolved = filepath.Join(d.dir, p)
	}
	info, err := os.Stat(resolved)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		d.l.add(field, "no file %s: paths are relative to the scenario's file", resolved)
	case err != nil:
		d.l.add(field, "%v", err)
	case info.IsDir():
		d.l.add(field, "%s is a directory: name a file", resolved)
	}
	return resolved
}

// celEnv is the environment of an expect's cel: object, the expected
// object, and the Kubernetes CEL libraries, as in operator definitions.
var celEnv = sync.OnceValues(func() (*cel.Env, error) {
	set, err := environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()).Extend(environment.VersionedOptions{
		IntroducedVersion: version.MajorMinor(1, 0),
		EnvOptions:        []cel.EnvOption{cel.Variable("object", cel.MapType(cel.StringType, cel.DynType))},
	})
	if err != nil {
		return nil, err
	}
	return set.NewExpressionsEnv(), nil
})

// cel compiles an expression that must be a bool.
func (d *decoder) cel(field, src string) *CEL {
	env, err := celEnv()
	if err != nil {
		d.l.add(field, "opkit's CEL environment does not load: %v", err)
		return nil
	}
	ast, iss := env.Compile(src)
	if iss.Err() != nil {
		var msgs []string
		for _, e := range iss.Errors() {
			msgs = append(msgs, fmt.Sprintf("%s (column %d)", e.Message, e.Location.Column()+1))
		}
		d.l.add(field, "does not compile: %s", strings.Join(msgs, "; "))
		return nil
	}
	if t := ast.OutputType(); !t.IsExactType(cel.BoolType) {
		d.l.add(field, "has type %s, not bool: an expect's cel must be true or false; compare the value, e.g. object.status.ready == true", celTypeName(t))
		return nil
	}
	prg, err := env.Program(ast)
	if err != nil {
		d.l.add(field, "%v", err)
		return nil
	}
	return &CEL{Source: src, Program: prg}
}

func celTypeName(t *cel.Type) string {
	if t.IsExactType(cel.DynType) {
		return "dyn (a value read from object, whose type is known only when it runs)"
	}
	return t.String()
}

// checkObject checks an object to apply, at the path field.
func checkObject(l *errorList, field string, m map[string]any) {
	for _, k := range []string{"apiVersion", "kind"} {
		f := keyPath(field, k)
		switch v, ok := m[k]; {
		case !ok:
			l.add(f, "required: %s", propertyTitle("#/$defs/object", k))
		case v == "":
			l.add(f, "must not be empty")
		default:
			if _, ok := v.(string); !ok {
				l.add(f, "must be a string, not %s", describeValue(v))
			}
		}
	}
	meta, ok := m["metadata"].(map[string]any)
	f := keyPath(field, "metadata")
	switch {
	case m["metadata"] == nil:
		l.add(f, "required: %s", propertyTitle("#/$defs/object", "metadata"))
		return
	case !ok:
		l.add(f, "must be a mapping, not %s", describeValue(m["metadata"]))
		return
	}
	switch name, ok := meta["name"].(string); {
	case meta["name"] == nil:
		l.add(keyPath(f, "name"), "required: the object's name")
	case !ok:
		l.add(keyPath(f, "name"), "must be a string, not %s", describeValue(meta["name"]))
	case len(name) > 253 || !nameRE.MatchString(name):
		l.add(keyPath(f, "name"), "%s", nameMessage(name))
	}
	if _, ok := meta["namespace"]; ok {
		l.add(keyPath(f, "namespace"), namespaceMessage)
	}
}

// loadObjects reads the objects of an apply step's file: one per YAML
// document. Errors are placed in that file.
func loadObjects(path string) ([]Object, Errors) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, Errors{readError(path, err)}
	}
	var objs []Object
	var errs Errors
	synErr := readDocuments(path, data, func(root *yaml.Node) {
		l := newErrorList(path)
		v, _ := jsonValue(l, root, "")
		m, ok := v.(map[string]any)
		if !ok {
			l.add("", "a document of an apply file is one Kubernetes object, a mapping, not %s", describeValue(v))
		} else {
			checkObject(l, "", m)
			objs = append(objs, m)
		}
		errs = append(errs, l.errs...)
	})
	if synErr != nil {
		errs = append(errs, synErr)
	}
	if len(errs) == 0 && len(objs) == 0 {
		errs = append(errs, &Error{File: path, Message: "no object: an apply file holds one or more Kubernetes objects, separated by ---"})
	}
	return objs, errs
}
