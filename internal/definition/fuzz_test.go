package definition_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	crdvalidation "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/opkit-dev/opkit/internal/compat"
	"github.com/opkit-dev/opkit/internal/definition"
)

// fuzzFile is the file name the fuzzed definitions are read as: every
// error of theirs names it.
const fuzzFile = "fuzz/operator.yaml"

// fuzzBudget is how long loading and compiling one input may take.
const fuzzBudget = 5 * time.Second

// FuzzLoadAndCompile feeds any bytes to Load and Compile, as opkit run,
// opkit lint and opkit dev read a definition file, and checks what every
// input must give: no panic; an answer within fuzzBudget; a refusal that
// names the file and what is wrong, at a field or a line; and for what
// is accepted, a CRD the API server's own validation accepts, which
// marshals to JSON and back unchanged, which opkit lint (compat) finds
// no change in against itself, and an Operator that compiles again the
// same when read back from the cluster (FromCluster) or from its YAML.
//
// The seeds are the repository's examples, the package's testdata and
// the definitions its tests spell out.
func FuzzLoadAndCompile(f *testing.F) {
	for _, seed := range definitionSeeds(f) {
		f.Add(seed)
	}
	f.Fuzz(loadAndCompile)
}

// FuzzCompileField sets one field of an example (any field, at any
// depth: slot picks it among them all) to any value, a string or what
// the value reads as in YAML (parse), and checks what FuzzLoadAndCompile
// checks: the YAML stays valid, so that every input reaches Compile's
// checks of that field (names, schemas, CEL expressions, handlers,
// states, sources, rollouts) rather than the YAML parser.
func FuzzCompileField(f *testing.F) {
	examples := exampleTrees(f)
	for e, ex := range examples {
		// A few of its strings, changed: a seed per field would take the
		// fuzzing's time to play.
		strs := 0
		for slot, p := range ex.paths {
			if v, ok := ex.at(p).(string); ok && slot%5 == 0 && strs < 4 {
				strs++
				f.Add(uint8(e), uint16(slot), v+"x", strs%2 == 0)
			}
		}
		f.Add(uint8(e), uint16(0), "", true)
		f.Add(uint8(e), uint16(1), "{}", true)
		f.Add(uint8(e), uint16(2), "[1, true, null]", true)
		f.Add(uint8(e), uint16(3), "${self.spec}", false)
	}
	f.Fuzz(func(t *testing.T, example uint8, slot uint16, value string, parse bool) {
		ex := examples[int(example)%len(examples)]
		p := ex.paths[int(slot)%len(ex.paths)]
		var v any = value
		if parse {
			var parsed any
			if err := yaml.Unmarshal([]byte(value), &parsed); err != nil {
				return // not YAML: FuzzLoadAndCompile's
			}
			v = parsed
		}
		data, err := yaml.Marshal(ex.with(p, v))
		if err != nil {
			return // a value JSON cannot hold (NaN)
		}
		loadAndCompile(t, data)
	})
}

// loadAndCompile is the body of the fuzz targets: it loads and compiles
// data and checks the answer.
func loadAndCompile(t *testing.T, data []byte) {
	start := time.Now()
	defer watchdog(data)()
	srcs, err := definition.Load(fuzzFile, data)
	if err != nil {
		checkRefusal(t, "Load", err)
		checkTime(t, start, data)
		return
	}
	for _, src := range srcs {
		d, err := definition.Compile(src)
		if err != nil {
			checkRefusal(t, "Compile", err)
			continue
		}
		checkAccepted(t, src, d)
	}
	checkTime(t, start, data)
}

// tree is an example Operator as JSON values, and the path of each of its
// values, maps and lists included.
type tree struct {
	root  any
	paths [][]any // map keys (string) and list indexes (int)
}

// exampleTrees reads the examples' Operators.
func exampleTrees(tb testing.TB) []*tree {
	tb.Helper()
	files, err := filepath.Glob("../../examples/*/operator.yaml")
	if err != nil || len(files) == 0 {
		tb.Fatalf("no examples/*/operator.yaml (%v)", err)
	}
	var out []*tree
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			tb.Fatal(err)
		}
		var root any
		if err := yaml.Unmarshal(data, &root); err != nil {
			tb.Fatalf("%s: %v", file, err)
		}
		tr := &tree{root: root}
		var walk func(v any, p []any)
		walk = func(v any, p []any) {
			tr.paths = append(tr.paths, slices.Clone(p))
			switch v := v.(type) {
			case map[string]any:
				for _, k := range slices.Sorted(maps.Keys(v)) {
					walk(v[k], append(p, k))
				}
			case []any:
				for i, item := range v {
					walk(item, append(p, i))
				}
			}
		}
		walk(root, nil)
		out = append(out, tr)
	}
	return out
}

// at is the value at p.
func (tr *tree) at(p []any) any {
	v := tr.root
	for _, step := range p {
		switch step := step.(type) {
		case string:
			v = v.(map[string]any)[step]
		case int:
			v = v.([]any)[step]
		}
	}
	return v
}

// with is a copy of the tree's value with the value at p replaced by v.
func (tr *tree) with(p []any, v any) any {
	var set func(node any, p []any) any
	set = func(node any, p []any) any {
		if len(p) == 0 {
			return v
		}
		switch step := p[0].(type) {
		case string:
			m := maps.Clone(node.(map[string]any))
			m[step] = set(m[step], p[1:])
			return m
		default:
			l := slices.Clone(node.([]any))
			l[step.(int)] = set(l[step.(int)], p[1:])
			return l
		}
	}
	return set(tr.root, p)
}

// watchdog ends the process when one input takes twice fuzzBudget: an
// input that never returns is a finding too, which the fuzzing engine
// keeps when its worker dies. It returns the function that stops it.
func watchdog(data []byte) func() bool {
	timer := time.AfterFunc(2*fuzzBudget, func() {
		panic(fmt.Sprintf("loading and compiling %d bytes takes over %s: %q", len(data), 2*fuzzBudget, data))
	})
	return timer.Stop
}

func checkTime(t *testing.T, start time.Time, data []byte) {
	t.Helper()
	if took := time.Since(start); took > fuzzBudget {
		t.Fatalf("loading and compiling %d bytes took %s, over %s", len(data), took.Round(time.Millisecond), fuzzBudget)
	}
}

// checkRefusal checks that an error says what is wrong, and where: each
// problem names the file, and a field or a line.
func checkRefusal(t *testing.T, what string, err error) {
	t.Helper()
	if strings.TrimSpace(err.Error()) == "" {
		t.Fatalf("%s: an error without a message", what)
	}
	var es definition.Errors
	if !errors.As(err, &es) {
		t.Fatalf("%s: error %T is not definition.Errors: %v", what, err, err)
	}
	if len(es) == 0 {
		t.Fatalf("%s: an empty definition.Errors", what)
	}
	for _, e := range es {
		switch {
		case strings.TrimSpace(e.Message) == "":
			t.Errorf("%s: a problem without a message: %#v", what, e)
		case e.File != fuzzFile:
			t.Errorf("%s: %q names the file %q, not %q", what, e.Error(), e.File, fuzzFile)
		case e.Field == "" && e.Line <= 0:
			t.Errorf("%s: %q names neither a field nor a line", what, e.Error())
		case !strings.HasPrefix(e.Error(), fuzzFile):
			t.Errorf("%s: %q does not start with the file", what, e.Error())
		}
	}
}

// checkAccepted checks what Compile accepted.
func checkAccepted(t *testing.T, src *definition.Source, d *definition.Definition) {
	t.Helper()
	if d == nil || d.Operator == nil {
		t.Fatal("Compile: no error and no definition")
	}
	if d.Owns() {
		checkCRD(t, d)
	}
	// Two definitions of one name clash, at metadata.name.
	var es definition.Errors
	if err := definition.Clashes([]*definition.Definition{d, d}); !errors.As(err, &es) || len(es) == 0 || es[0].Field != "metadata.name" {
		t.Errorf("Clashes of a definition with itself: %v; want an error at metadata.name", err)
	}
	if err := definition.Clashes([]*definition.Definition{d}); err != nil {
		t.Errorf("Clashes of one definition: %v", err)
	}
	_ = d.What()
	_ = d.RelatedKinds()
	hash := d.Hash()

	// Read back from the cluster: the same Operator, without its file.
	again, err := definition.Compile(definition.FromCluster(src.Operator))
	if err != nil {
		t.Fatalf("accepted from a file, refused from the cluster:\n%v", err)
	}
	if again.Hash() != hash {
		t.Errorf("the definition's hash differs read from the cluster: %s, then %s", hash, again.Hash())
	}
	// Written as YAML and read again, as opkit generate and kubectl do.
	data, err := yaml.Marshal(src.Operator)
	if err != nil {
		t.Fatalf("the Operator does not marshal as YAML: %v", err)
	}
	srcs, err := definition.Load(fuzzFile, data)
	if err != nil || len(srcs) != 1 {
		t.Fatalf("the Operator written as YAML does not load again (%d Operators): %v\n%s", len(srcs), err, data)
	}
	reread, err := definition.Compile(srcs[0])
	if err != nil {
		t.Fatalf("the Operator written as YAML does not compile again:\n%v\n%s", err, data)
	}
	if reread.Hash() != hash {
		t.Errorf("the definition's hash differs written as YAML and read again: %s, then %s\n%s", hash, reread.Hash(), data)
	}
}

// checkCRD checks the CRD of a definition that owns one, as the engine
// builds it (with its conversion webhook's address) and installs it.
func checkCRD(t *testing.T, d *definition.Definition) {
	t.Helper()
	plain := d.CRD()
	crd := d.CRDWith(definition.CRDOptions{ConversionWebhook: &apiextensionsv1.WebhookClientConfig{
		URL: ptr.To("https://engine.opkit-system.svc:9443" + definition.ConversionPath(d.Operator.Name)),
	}})
	if plain == nil || crd == nil {
		t.Fatal("no CRD for a definition that owns a resource")
	}
	data, err := json.Marshal(crd)
	if err != nil {
		t.Fatalf("the CRD does not marshal to JSON: %v", err)
	}
	var back apiextensionsv1.CustomResourceDefinition
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatalf("the CRD's JSON does not read back: %v\n%s", err, data)
	}
	if !equality.Semantic.DeepEqual(crd, &back) {
		t.Errorf("the CRD changed through JSON:\n%s", data)
	}
	// What the API server checks when the engine installs it.
	apiextensionsv1.SetObjectDefaults_CustomResourceDefinition(&back)
	var internal apiextensions.CustomResourceDefinition
	if err := apiextensionsv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(&back, &internal, nil); err != nil {
		t.Fatalf("the CRD does not convert: %v", err)
	}
	if errs := crdvalidation.ValidateCustomResourceDefinition(context.Background(), &internal); len(errs) > 0 {
		t.Errorf("accepted, but the API server would refuse its CRD:\n%v\n%s", errs.ToAggregate(), data)
	}
	// opkit lint: a CRD has no change against itself.
	if fs := compat.Compare(crd, crd); len(fs) > 0 {
		t.Errorf("opkit lint finds changes between the CRD and itself: %v", fs)
	}
	if err := compat.RefuseBreaking(d, plain, crd); err != nil {
		t.Errorf("the CRD breaks itself: %v", err)
	}
}

// definitionSeeds are the Operators of the examples, of testdata, and some
// of those the package's tests spell out in Go strings (a fragment that
// starts indented is appended to the tests' base definition, as they do).
func definitionSeeds(tb testing.TB) [][]byte {
	tb.Helper()
	var seeds [][]byte
	seen := map[string]bool{}
	add := func(s string) {
		if !seen[s] {
			seen[s] = true
			seeds = append(seeds, []byte(s))
		}
	}
	files, err := filepath.Glob("../../examples/*/operator.yaml")
	if err != nil || len(files) == 0 {
		tb.Fatalf("no examples/*/operator.yaml (%v)", err)
	}
	more, _ := filepath.Glob("testdata/*.yaml")
	for _, file := range append(files, more...) {
		srcs, err := definition.LoadFile(file)
		if err != nil {
			tb.Fatalf("seed %s: %v", file, err)
		}
		for _, src := range srcs {
			data, err := yaml.Marshal(src.Operator)
			if err != nil {
				tb.Fatal(err)
			}
			add(string(data))
		}
		data, err := os.ReadFile(file)
		if err != nil {
			tb.Fatal(err)
		}
		add(string(data))
	}
	// Of the tests' definitions, some 60, spread over them all: each seed
	// is played before the fuzzing starts, a few hundred would take all of
	// a short run's time.
	tests, _ := filepath.Glob("*_test.go")
	crdtests, _ := filepath.Glob("crdtest/*_test.go")
	var fromTests []string
	for _, file := range append(tests, crdtests...) {
		fromTests = append(fromTests, stringsOf(tb, file)...)
	}
	step := max(1, len(fromTests)/60)
	for i := 0; i < len(fromTests); i += step {
		add(fromTests[i])
	}
	return seeds
}

// stringsOf returns the YAML in a Go file's strings: its constant
// strings and concatenations of them, and the indented fragments among
// them appended to its first constant definition of an Operator (the
// tests' base).
func stringsOf(tb testing.TB, file string) []string {
	tb.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, nil, parser.SkipObjectResolution)
	if err != nil {
		tb.Fatal(err)
	}
	consts := map[string]string{}
	var eval func(ast.Expr) (string, bool)
	eval = func(e ast.Expr) (string, bool) {
		switch e := e.(type) {
		case *ast.BasicLit:
			if e.Kind != token.STRING {
				return "", false
			}
			s, err := strconv.Unquote(e.Value)
			return s, err == nil
		case *ast.Ident:
			s, ok := consts[e.Name]
			return s, ok
		case *ast.ParenExpr:
			return eval(e.X)
		case *ast.BinaryExpr:
			if e.Op != token.ADD {
				return "", false
			}
			x, ok := eval(e.X)
			if !ok {
				return "", false
			}
			y, ok := eval(e.Y)
			return x + y, ok
		}
		return "", false
	}
	base := ""
	for _, decl := range f.Decls {
		g, ok := decl.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if i < len(vs.Values) {
					if s, ok := eval(vs.Values[i]); ok {
						consts[name.Name] = s
						if base == "" && isOperator(s) {
							base = s
						}
					}
				}
			}
		}
	}
	if base == "" {
		base = "apiVersion: opkit.dev/v1alpha1\nkind: Operator\nmetadata: {name: app}\nspec:\n"
	}
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		e, ok := n.(ast.Expr)
		if !ok {
			return true
		}
		s, ok := eval(e)
		switch {
		case !ok:
			return true
		case isOperator(s):
			out = append(out, s)
		case strings.HasPrefix(s, "  ") && strings.Contains(s, ":"):
			out = append(out, base+s)
		}
		return false
	})
	return out
}

func isOperator(s string) bool {
	return strings.Contains(s, "kind: Operator") && strings.Contains(s, "apiVersion: opkit.dev/")
}
