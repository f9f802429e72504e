package typegen

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/opkit-dev/opkit/internal/sdktools"
)

// The acceptance of generated types: a handler written on them, and on
// the language's SDK, passes its type checker, and fails it once it reads
// a spec field the schema does not have (or writes a status field it does
// not have). testdata/check holds the handlers, on the types of
// testdata/everything.yaml; the bad ones are made from them here. Every
// golden case's types are checked too.

// misspell makes the bad handler from the good one: each replacement must
// apply once.
func misspell(t *testing.T, src string, replacements ...string) string {
	t.Helper()
	for i := 0; i < len(replacements); i += 2 {
		if n := strings.Count(src, replacements[i]); n != 1 {
			t.Fatalf("the handler has %q %d times, not once", replacements[i], n)
		}
		src = strings.Replace(src, replacements[i], replacements[i+1], 1)
	}
	return src
}

func writeTestFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func readTestFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestGeneratedGoBuildsAndCatchesAMisspelledField runs go vet on packages
// in this module (under testdata, removed after): each golden case's types
// alone, and testdata/check/handler.go with the types of everything.yaml;
// then builds that handler reading spec.Sise and writing LastRn, which
// must fail, naming both.
func TestGeneratedGoBuildsAndCatchesAMisspelledField(t *testing.T) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is not on PATH: %v", err)
	}
	root, err := os.MkdirTemp("testdata", "gocheck-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	var good []string
	for _, c := range goldenCases {
		out, err := generateFrom(c.path, Options{Lang: Go, File: c.file, Package: "types"})
		if err != nil {
			t.Fatal(err)
		}
		dir := "./" + filepath.ToSlash(filepath.Join(root, c.name))
		writeTestFile(t, filepath.Join(dir, "types.go"), out.Source)
		good = append(good, dir)
	}
	everything := generateCase(t, "testdata/everything.yaml", "testdata/everything.yaml", Go)
	handler := readTestFile(t, filepath.Join("testdata", "check", "handler.go"))
	for name, src := range map[string]string{
		"handler": handler,
		"bad":     misspell(t, handler, "var size int32 = spec.Size", "var size int32 = spec.Sise", "LastRun: &last", "LastRn: &last"),
	} {
		dir := "./" + filepath.ToSlash(filepath.Join(root, name))
		writeTestFile(t, filepath.Join(dir, "types.go"), everything.Source)
		writeTestFile(t, filepath.Join(dir, "main.go"), []byte(src))
		if name == "handler" {
			good = append(good, dir)
		}
	}
	if out, err := exec.Command(goCmd, append([]string{"vet"}, good...)...).CombinedOutput(); err != nil {
		t.Fatalf("go vet fails the generated types or the handler written on them: %v\n%s", err, out)
	}
	// go build, which reports every error, where vet stops at the first.
	bad := exec.Command(goCmd, "build", "-o", filepath.Join(t.TempDir(), "bad"), "./"+filepath.ToSlash(filepath.Join(root, "bad")))
	out, err := bad.CombinedOutput()
	if err == nil {
		t.Fatalf("go build passes a handler that reads spec.Sise and writes LastRn:\n%s", out)
	}
	for _, want := range []string{"spec.Sise undefined (type WidgetSpec has no field or method Sise)", "unknown field LastRn in struct literal of type WidgetStatusUpdate"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("go build does not say %q:\n%s", want, out)
		}
	}
}

// TestGeneratedTypeScriptPassesTscAndCatchesAMisspelledField runs tsc
// --strict (and the stricter options a project may set) with the SDK's
// opkit.ts on every golden case's types, testdata/check/handler.ts and a
// bad copy of it: only the bad one fails, naming the spec field it reads
// and the status field it writes.
func TestGeneratedTypeScriptPassesTscAndCatchesAMisspelledField(t *testing.T) {
	tsc := sdktools.TSC(t)
	dir := t.TempDir()
	writeTestFile(t, filepath.Join(dir, "opkit.ts"), []byte(readTestFile(t, filepath.Join("..", "..", "sdk", "typescript", "opkit.ts"))))
	writeTestFile(t, filepath.Join(dir, "package.json"), []byte(`{"type": "module"}`+"\n"))
	files := []string{"handler.ts", "bad.ts"}
	for _, c := range goldenCases {
		out := generateCase(t, c.path, c.file, TypeScript)
		name := c.name + ".ts"
		if c.name == "everything" {
			name = "widget.ts"
		}
		writeTestFile(t, filepath.Join(dir, name), out.Source)
		files = append(files, name)
	}
	handler := readTestFile(t, filepath.Join("testdata", "check", "handler.ts"))
	writeTestFile(t, filepath.Join(dir, "handler.ts"), []byte(handler))
	writeTestFile(t, filepath.Join(dir, "bad.ts"), []byte(misspell(t, handler, "const size: number = spec.size;", "const size: number = spec.sise;", "lastRun: last", "lastRn: last")))
	config, err := json.Marshal(map[string]any{
		"compilerOptions": map[string]any{
			"strict": true, "noEmit": true, "target": "ES2022", "module": "nodenext", "types": []string{},
			"exactOptionalPropertyTypes": true, "noUncheckedIndexedAccess": true, "noPropertyAccessFromIndexSignature": true,
			"verbatimModuleSyntax": true, "noUnusedLocals": true,
		},
		"files": files,
	})
	if err != nil {
		t.Fatal(err)
	}
	writeTestFile(t, filepath.Join(dir, "tsconfig.json"), config)
	cmd := exec.Command(tsc, "-p", "tsconfig.json", "--pretty", "false")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("tsc passes bad.ts, which reads spec.sise and writes lastRn:\n%s", out)
	}
	errs := regexp.MustCompile(`(?m)^(\S+?)\(\d+,\d+\): error TS\d+: (.*)$`).FindAllStringSubmatch(string(out), -1)
	var bad []string
	for _, e := range errs {
		if e[1] != "bad.ts" {
			t.Errorf("tsc fails %s: %s", e[1], e[2])
			continue
		}
		bad = append(bad, e[2])
	}
	for _, want := range []string{"Property 'sise' does not exist on type 'WidgetSpec'", "'lastRn' does not exist in type"} {
		if !strings.Contains(strings.Join(bad, "\n"), want) {
			t.Errorf("tsc on bad.ts does not say %q:\n%s", want, out)
		}
	}
}

// TestGeneratedPythonPassesPyrightAndCatchesAMisspelledField runs pyright
// (strict, as sdk/python/pyrightconfig.json) with the SDK's
// opkit_handler.py on every golden case's types, testdata/check/handler.py
// and a bad copy of it: only the bad one fails, naming the spec field it
// reads and the status field it writes.
func TestGeneratedPythonPassesPyrightAndCatchesAMisspelledField(t *testing.T) {
	pyright := sdktools.Pyright(t)
	dir := t.TempDir()
	writeTestFile(t, filepath.Join(dir, "opkit_handler.py"), []byte(readTestFile(t, filepath.Join("..", "..", "sdk", "python", "opkit_handler.py"))))
	writeTestFile(t, filepath.Join(dir, "pyrightconfig.json"), []byte(`{"pythonVersion": "3.11", "typeCheckingMode": "strict"}`+"\n"))
	files := []string{"handler.py", "bad_handler.py"}
	for _, c := range goldenCases {
		out := generateCase(t, c.path, c.file, Python)
		name := strings.ReplaceAll(c.name, "-", "_") + "_types.py"
		if c.name == "everything" {
			name = "widget_types.py"
		}
		writeTestFile(t, filepath.Join(dir, name), out.Source)
		files = append(files, name)
	}
	handler := readTestFile(t, filepath.Join("testdata", "check", "handler.py"))
	writeTestFile(t, filepath.Join(dir, "handler.py"), []byte(handler))
	badSrc := misspell(t, handler, `size: int = spec["size"]`, `size: int = spec["sise"]`, `"lastRun": last`, `"lastRn": last`)
	writeTestFile(t, filepath.Join(dir, "bad_handler.py"), []byte(badSrc))
	cmd := exec.Command(pyright, append([]string{"--project", "pyrightconfig.json", "--outputjson"}, files...)...)
	cmd.Dir = dir
	out, err := cmd.Output()
	var report struct {
		Diagnostics []struct {
			File     string `json:"file"`
			Severity string `json:"severity"`
			Message  string `json:"message"`
			Range    struct {
				Start struct {
					Line int `json:"line"`
				} `json:"start"`
			} `json:"range"`
		} `json:"generalDiagnostics"`
		Summary struct {
			FilesAnalyzed int `json:"filesAnalyzed"`
		} `json:"summary"`
	}
	if jerr := json.Unmarshal(out, &report); jerr != nil {
		t.Fatalf("pyright: %v (%v)\n%s", jerr, err, out)
	}
	if report.Summary.FilesAnalyzed < len(files) {
		t.Errorf("pyright analyzed %d files, not the %d given", report.Summary.FilesAnalyzed, len(files))
	}
	// The errors of bad_handler.py by line (from 1).
	bad := map[int][]string{}
	var all []string
	for _, d := range report.Diagnostics {
		if d.Severity != "error" && d.Severity != "warning" {
			continue
		}
		if filepath.Base(d.File) != "bad_handler.py" {
			t.Errorf("pyright fails %s: %s", filepath.Base(d.File), d.Message)
			continue
		}
		bad[d.Range.Start.Line+1] = append(bad[d.Range.Start.Line+1], d.Message)
		all = append(all, d.Message)
	}
	lines := strings.Split(badSrc, "\n")
	lineOf := func(s string) int {
		for i, l := range lines {
			if strings.Contains(l, s) {
				return i + 1
			}
		}
		return 0
	}
	if got := strings.Join(bad[lineOf(`spec["sise"]`)], "\n"); !strings.Contains(got, `"sise" is not a defined key in "WidgetSpec"`) {
		t.Errorf("pyright on bad_handler.py does not say that spec has no sise:\n%s", strings.Join(all, "\n"))
	}
	// pyright names the result's type, not the key, for a status field
	// it does not have: the error is on its line.
	if got := strings.Join(bad[lineOf(`"lastRn"`)], "\n"); !strings.Contains(got, "WidgetStatusUpdate") {
		t.Errorf("pyright on bad_handler.py does not refuse the status it writes, lastRn:\n%s", strings.Join(all, "\n"))
	}
}

// gadgets has what encoding/json and Go's constants need care with: a
// field named "-" (required and optional), int32 enums with values past
// int32 and at its bounds, and a status whose objects have required
// fields, which a result, a merge patch, may leave out.
const gadgets = `apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: gadgets}
spec:
  resource:
    group: demo.example.com
    kind: Gadget
    versions:
    - name: v1
      schema:
        type: object
        required: ["-"]
        properties:
          "-": {type: string}
          inner:
            type: object
            properties:
              "-": {type: integer}
          big: {type: integer, format: int32, enum: [1, 3000000000, -2147483649]}
          small: {type: integer, format: int32, enum: [1, -2147483648, 2147483647]}
      statusSchema:
        properties:
          phase: {type: string}
          endpoint:
            type: object
            required: [host]
            properties:
              host: {type: string}
              port: {type: integer}
          shards:
            type: object
            additionalProperties:
              type: object
              required: [ready, size]
              properties:
                ready: {type: boolean}
                size: {type: integer}
          history:
            type: array
            items:
              type: object
              required: [at]
              properties:
                at: {type: string}
  handlers:
  - {name: greet, "on": [create], exec: {command: [./greet]}}
`

// gadgetsMain reads a spec and writes it back, and writes a result that
// sets one field of an object with a required one: only what it sets.
const gadgetsMain = `package main

import (
	"encoding/json"
	"fmt"
)

var _ GadgetSpecSmall = GadgetSpecSmall2147483647 // an int32, as its format says

func main() {
	var s GadgetSpec
	if err := json.Unmarshal([]byte(` + "`" + `{"-":"dash","inner":{"-":7},"big":3000000000,"small":-2147483648}` + "`" + `), &s); err != nil {
		panic(err)
	}
	spec, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	fmt.Println(string(spec))
	port, ready := int64(8080), true
	res, err := json.Marshal(GreetResult{Status: &GadgetStatusUpdate{
		Endpoint: &GadgetStatusUpdateEndpoint{Port: &port},
		Shards:   map[string]GadgetStatusUpdateShardsValue{"a": {Ready: &ready}},
		History:  []GadgetStatusHistoryItem{{}},
	}})
	if err != nil {
		panic(err)
	}
	fmt.Println(string(res))
	fmt.Println(GadgetSpecBig3000000000 + GadgetSpecBigMinus2147483649)
}
`

// TestGeneratedGoReadsAndWritesWhatTheSchemaNames runs a program on the
// Go types of gadgets: a field named "-" is read and written (not skipped
// as encoding/json skips a field tagged "-"), an int32 enum with a value
// past int32 compiles, and a result's status writes only the fields set
// (not a required field's zero value), except in a list's items, which a
// merge patch writes whole.
func TestGeneratedGoReadsAndWritesWhatTheSchemaNames(t *testing.T) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is not on PATH: %v", err)
	}
	file := filepath.Join(t.TempDir(), "operator.yaml")
	writeTestFile(t, file, []byte(gadgets))
	types, err := GenerateFile(Options{Lang: Go, File: file, Package: "main"})
	if err != nil {
		t.Fatal(err)
	}
	root, err := os.MkdirTemp("testdata", "gorun-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	writeTestFile(t, filepath.Join(root, "types.go"), types.Source)
	writeTestFile(t, filepath.Join(root, "main.go"), []byte(gadgetsMain))
	out, err := exec.Command(goCmd, "run", "./"+filepath.ToSlash(root)).CombinedOutput()
	if err != nil {
		t.Fatalf("go run: %v\n%s\n%s", err, out, types.Source)
	}
	want := `{"-":"dash","big":3000000000,"inner":{"-":7},"small":-2147483648}
{"status":{"endpoint":{"port":8080},"history":[{"at":""}],"shards":{"a":{"ready":true}}}}
852516351
`
	if string(out) != want {
		t.Errorf("the program on the generated types wrote\n%s\nwant\n%s", out, want)
	}
}

// TestGeneratedPythonReadsTheRelatedObjectsOfAnyContext runs the Python
// function that reads a context's related objects on the types of
// everything.yaml: a context without them (a delete run, or none of the
// objects exists: opkit leaves related out) reads as none, with the list
// of a selector there and empty, as its type says.
func TestGeneratedPythonReadsTheRelatedObjectsOfAnyContext(t *testing.T) {
	python := sdktools.Python(t)
	dir := t.TempDir()
	writeTestFile(t, filepath.Join(dir, "opkit_handler.py"), []byte(readTestFile(t, filepath.Join("..", "..", "sdk", "python", "opkit_handler.py"))))
	writeTestFile(t, filepath.Join(dir, "widget_types.py"), generateCase(t, "testdata/everything.yaml", "testdata/everything.yaml", Python).Source)
	cmd := exec.Command(python, "-c", `
from widget_types import widget_related
for ctx in [{}, {"related": {"app": {"kind": "Deployment"}}}, {"related": {"pods": [{"kind": "Pod"}]}}]:
    related = widget_related(ctx)
    print(related.get("app", {}).get("kind"), len(related["pods"]))
`)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if want := "None 0\nDeployment 0\nNone 1\n"; err != nil || string(out) != want {
		t.Errorf("widget_related wrote\n%s(%v), want\n%s", out, err, want)
	}
}
