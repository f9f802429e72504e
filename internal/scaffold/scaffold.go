// Package scaffold writes a new operator project (opkit init): a
// definition (a custom resource with a spec, a status field and one
// handler on create and update), the handler in the language asked for
// on that language's SDK, the types of the definition (typegen), a
// scenario, an example object and a README with the commands that run it.
//
// Contracts: Write never overwrites: a directory that holds any of the
// files it would write is refused, naming them, and nothing is written.
// What it writes passes opkit lint and opkit test as written (its tests
// run both). Names come from the directory's name unless given, checked
// as Kubernetes checks them.
package scaffold

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"text/template"
	"unicode"

	"golang.org/x/mod/modfile"

	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/typegen"
	"github.com/opkit-dev/opkit/sdk"
)

// The languages Write writes a handler in.
const (
	Python     = "python"
	Go         = "go"
	TypeScript = "typescript"
	Bash       = "bash"
)

// Languages are the languages, as --lang names them.
var Languages = []string{Python, Go, TypeScript, Bash}

// HandlerName is the name of the handler Write writes.
const HandlerName = "answer"

// The images the handler's exec.image names, per language: what runs it
// in a cluster's runner Pod (locally, the machine's own interpreter).
var images = map[string]string{
	Python:     "python:3.12-slim",
	Go:         "golang:1.26",
	TypeScript: "node:20-slim",
}

// Options say what to write.
type Options struct {
	// Dir is the project's directory: created if missing, else it must
	// hold none of the files written.
	Dir string
	// Lang is one of Languages.
	Lang string
	// Name is the Operator's name, a DNS label; default: Dir's base name,
	// lower-cased, its other characters turned into dashes.
	Name string
	// Kind is the custom resource's kind; default: Name in PascalCase.
	Kind string
	// Group is its API group; default: Name.example.com.
	Group string
	// OpkitVersion is the version of github.com/opkit-dev/opkit a Go
	// handler requires; OpkitSource, when set, replaces it with that
	// directory (a development build's checkout).
	OpkitVersion, OpkitSource string
}

//go:embed templates
var templates embed.FS

var (
	dnsLabel = regexp.MustCompile(`^[a-z]([-a-z0-9]*[a-z0-9])?$`)
	kindRE   = regexp.MustCompile(`^[A-Z][A-Za-z0-9]*$`)
	groupRE  = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)+$`)
)

// Write writes the project, and returns the files written, relative to
// Dir, in the order written. Everything is made and checked first — the
// definition compiled, its types generated — so that a project that
// would not work is refused before a file is written.
func Write(o Options) ([]string, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	files, err := o.files()
	if err != nil {
		return nil, err
	}
	// The types come from the definition as written, by the code that
	// opkit generate types and opkit dev run; the header names the
	// definition as it lies beside them, for opkit dev to find them.
	src, err := definition.Load("operator.yaml", files[0].data)
	if err != nil {
		return nil, fmt.Errorf("the definition opkit init made does not load (a bug of opkit init): %w", err)
	}
	def, err := definition.Compile(src[0])
	if err != nil {
		return nil, fmt.Errorf("the names given make no valid operator: %w", err)
	}
	if lang := typeLang[o.Lang]; lang != "" {
		out, err := typegen.Generate([]*definition.Definition{def}, typegen.Options{Lang: lang, File: "operator.yaml"})
		if err != nil {
			return nil, err
		}
		if len(out.Warnings) > 0 {
			// The handler names the types by the kind: a kind the
			// generated code must rename would not compile.
			return nil, fmt.Errorf("--kind %s: the generated types cannot use its names as they are (%s): choose another kind", o.Kind, strings.Join(out.Warnings, "; "))
		}
		files = append(files, file{apiFile(lang), out.Source, 0o644})
	}
	var exist []string
	for _, f := range files {
		if _, err := os.Lstat(filepath.Join(o.Dir, f.name)); err == nil {
			exist = append(exist, f.name)
		}
	}
	if len(exist) > 0 {
		return nil, fmt.Errorf("%s holds %s already: opkit init writes a new project, and overwrites nothing (choose another directory)", o.Dir, strings.Join(exist, ", "))
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, err
	}
	var written []string
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(o.Dir, f.name), f.data, f.mode); err != nil {
			return written, err
		}
		written = append(written, f.name)
	}
	return written, nil
}

type file struct {
	name string
	data []byte
	mode fs.FileMode
}

// data is what the templates read.
type data struct {
	Options
	Lang, Handler, Plural, Image string
	// HandlerFile is the handler's file, as the README links it; Runtime
	// what runs it on this machine.
	HandlerFile, Runtime string
	// Type is the handler's name in PascalCase, as the generated types
	// name its context and result; Func as a function of the language.
	Type, Func string
	// Exec are the lines of the handler's exec.
	Exec []string
	// GoVersion is the go.mod's go line: the Go that built this opkit,
	// at least the go line of opkit's own module, which the handler's
	// module requires.
	GoVersion string
	// GoReplace is OpkitSource as go.mod spells a path (quoted when it
	// must be).
	GoReplace string
	// TypeScriptVersion is the compiler the project's package.json names.
	TypeScriptVersion string
	// SlowStart says why the first run may take long, for the scenario.
	SlowStart string
}

func (o *Options) defaults() error {
	if !slices.Contains(Languages, o.Lang) {
		return fmt.Errorf("--lang %q: want one of %s", o.Lang, strings.Join(Languages, ", "))
	}
	if o.Dir == "" {
		return errors.New("no directory: opkit init DIR")
	}
	if o.Name == "" {
		abs, err := filepath.Abs(o.Dir)
		if err != nil {
			return err
		}
		o.Name = strings.Trim(regexp.MustCompile(`[^a-z0-9]+`).ReplaceAllString(strings.ToLower(filepath.Base(abs)), "-"), "-")
		if o.Name == "" || !unicode.IsLetter(rune(o.Name[0])) {
			return fmt.Errorf("%s: its name makes no operator name (a DNS label starting with a letter): give one with --name", o.Dir)
		}
	}
	if len(o.Name) > 63 || !dnsLabel.MatchString(o.Name) {
		return fmt.Errorf("--name %q: an Operator's name is a DNS label: lower-case letters, digits and dashes, starting with a letter, at most 63", o.Name)
	}
	if o.Kind == "" {
		o.Kind = typegen.TypeName(o.Name)
	}
	if !kindRE.MatchString(o.Kind) || len(o.Kind) > 59 {
		// KindList is a kind too, and the plural (kinds) a DNS label.
		return fmt.Errorf("--kind %q: a kind is a capital letter then letters and digits, at most 59 (Printer, DeployNotifier)", o.Kind)
	}
	if o.Group == "" {
		o.Group = o.Name + ".example.com"
	}
	if !groupRE.MatchString(o.Group) || len(o.Group) > 253 {
		return fmt.Errorf("--group %q: an API group is a DNS name with at least one dot (greetings.example.com)", o.Group)
	}
	if o.Lang == Go && o.OpkitVersion == "" {
		o.OpkitVersion = "v0.0.0"
	}
	return nil
}

// goVersion is the Go that built this opkit, as a go.mod's go line; 1.26
// (opkit's own) for a toolchain that does not say it so (a development
// one).
func goVersion() string {
	if v := strings.TrimPrefix(runtime.Version(), "go"); regexp.MustCompile(`^1\.[0-9]+(\.[0-9]+)?$`).MatchString(v) {
		return v
	}
	return "1.26"
}

// apiFile is the file of the generated types in lang.
func apiFile(lang string) string {
	return "api." + map[string]string{typegen.Python: "py", typegen.Go: "go", typegen.TypeScript: "ts"}[lang]
}

// typeLang is the language of the types generated for a handler's.
var typeLang = map[string]string{Python: typegen.Python, Go: typegen.Go, TypeScript: typegen.TypeScript}

// files are the project's files, but for the generated types.
func (o *Options) files() ([]file, error) {
	d := data{Options: *o, Lang: o.Lang, Handler: HandlerName, Plural: strings.ToLower(o.Kind) + "s", Image: images[o.Lang],
		Type: typegen.TypeName(HandlerName), Func: HandlerName, TypeScriptVersion: sdk.TypeScriptVersion,
		GoVersion: goVersion(), GoReplace: modfile.AutoQuote(o.OpkitSource)}
	switch o.Lang {
	case Python:
		d.Exec = []string{"command: [python3, ./handler.py]", "image: " + d.Image, "mode: Serve"}
		d.HandlerFile, d.Runtime = "[handler.py](handler.py)", "`python3`"
	case Go:
		// -mod=mod: go run completes go.sum at its first run (the
		// module proxy), as a released opkit's module needs.
		d.Exec = []string{"command: [go, run, -mod=mod, .]", "image: " + d.Image, "mode: Serve"}
		d.HandlerFile, d.Runtime = "[main.go](main.go)", "`go`"
		d.SlowStart = "go run compiles the handler first"
	case TypeScript:
		d.Exec = []string{"command: [node, ./handler.js]", "image: " + d.Image, "mode: Serve"}
		d.HandlerFile, d.Runtime = "[handler.ts](handler.ts)", "`node`"
	case Bash:
		d.Exec = []string{"command: [./handler.sh]"}
		d.HandlerFile = "[handler.sh](handler.sh)"
	}
	var out []file
	add := func(name, tmpl string, mode fs.FileMode) error {
		text, err := templates.ReadFile("templates/" + tmpl)
		if err != nil {
			return err
		}
		t, err := template.New(tmpl).Option("missingkey=error").Parse(string(text))
		if err != nil {
			return err
		}
		var buf bytes.Buffer
		if err := t.Execute(&buf, d); err != nil {
			return fmt.Errorf("%s: %w", tmpl, err)
		}
		out = append(out, file{name, buf.Bytes(), mode})
		return nil
	}
	common := [][2]string{{"operator.yaml", "common/operator.yaml.tmpl"}, {o.Name + ".test.yaml", "common/test.yaml.tmpl"}, {"example.yaml", "common/example.yaml.tmpl"}, {"README.md", "common/README.md.tmpl"}}
	for _, c := range common {
		if err := add(c[0], c[1], 0o644); err != nil {
			return nil, err
		}
	}
	var err error
	switch o.Lang {
	case Python:
		err = errors.Join(add("handler.py", "python/handler.py.tmpl", 0o755), add("pyrightconfig.json", "python/pyrightconfig.json.tmpl", 0o644))
		out = append(out, file{"opkit_handler.py", sdk.Python, 0o644})
	case Go:
		err = errors.Join(add("main.go", "go/main.go.tmpl", 0o644), add("go.mod", "go/go.mod.tmpl", 0o644))
	case TypeScript:
		// The compiled JavaScript too, as npm run build makes it, so that
		// the project runs as written; the SDK's source and its build.
		err = errors.Join(add("handler.ts", "typescript/handler.ts.tmpl", 0o644), add("handler.js", "typescript/handler.js.tmpl", 0o644),
			add("package.json", "typescript/package.json.tmpl", 0o644), add("tsconfig.json", "typescript/tsconfig.json.tmpl", 0o644))
		out = append(out, file{"opkit.ts", sdk.TypeScript, 0o644}, file{"opkit.js", sdk.TypeScriptJS, 0o644},
			file{"api.js", []byte("// " + typegen.Header(typegen.Options{Lang: typegen.TypeScript, File: "operator.yaml"}) + "\nexport {};\n"), 0o644})
	case Bash:
		err = add("handler.sh", "bash/handler.sh.tmpl", 0o755)
	}
	return out, err
}
