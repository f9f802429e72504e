package typegen

import (
	"bytes"
	"errors"
	"flag"
	"go/format"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/golden from what Generate writes now")

// goldenCases are the definitions whose types are kept in
// testdata/golden: the examples, each kind of operator (a custom resource,
// a watch, a calendar; states, related objects, children, admission,
// computed status, event sources), and testdata/everything.yaml with
// every schema feature. path is the file; file is how the header names
// it (as if run from the repository's root).
var goldenCases = []struct{ name, path, file string }{
	{"handlers", "../../examples/handlers/operator.yaml", "examples/handlers/operator.yaml"},
	{"deploy-notifier", "../../examples/deploy-notifier/operator.yaml", "examples/deploy-notifier/operator.yaml"},
	{"database", "../../examples/database/operator.yaml", "examples/database/operator.yaml"},
	{"website", "../../examples/website/admission/operator.yaml", "examples/website/admission/operator.yaml"},
	{"team-watch", "../../examples/team-watch/operator.yaml", "examples/team-watch/operator.yaml"},
	{"calendar", "../../examples/calendar/operator.yaml", "examples/calendar/operator.yaml"},
	{"everything", "testdata/everything.yaml", "internal/typegen/testdata/everything.yaml"},
	{"long-names", "testdata/long-names.yaml", "internal/typegen/testdata/long-names.yaml"},
}

var suffixes = map[string]string{Go: ".go", Python: ".py", TypeScript: ".ts"}

// generateCase generates the types of a golden case.
func generateCase(t *testing.T, path, file, lang string) *Output {
	t.Helper()
	out, err := generateFrom(path, Options{Lang: lang, File: file})
	if err != nil {
		t.Fatalf("%s, %s: %v", path, lang, err)
	}
	return out
}

// TestGeneratedFilesAreTheGoldenOnes compares what Generate writes for
// each case and language with testdata/golden (go test -update rewrites
// them): a change of the output is seen in review. Each is generated
// twice, the same: the output is deterministic.
func TestGeneratedFilesAreTheGoldenOnes(t *testing.T) {
	for _, c := range goldenCases {
		for _, lang := range Languages {
			out := generateCase(t, c.path, c.file, lang)
			if again := generateCase(t, c.path, c.file, lang); !bytes.Equal(again.Source, out.Source) {
				t.Errorf("%s, %s: two runs write different files", c.name, lang)
			}
			golden := filepath.Join("testdata", "golden", c.name+suffixes[lang]+".golden")
			if *update {
				if err := os.WriteFile(golden, out.Source, 0o644); err != nil {
					t.Fatal(err)
				}
				continue
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (go test -update writes it)", err)
			}
			if !bytes.Equal(out.Source, want) {
				t.Errorf("%s, %s: the output is not %s (go test -update rewrites it, for review):\n%s", c.name, lang, golden, firstDifference(out.Source, want))
			}
		}
	}
}

// firstDifference shows the first line where got and want differ.
func firstDifference(got, want []byte) string {
	g, w := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	for i := range max(len(g), len(w)) {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return "line " + strconv.Itoa(i+1) + ":\n  got:  " + gl + "\n  want: " + wl
		}
	}
	return "(the same lines)"
}

// goGenerated is Go's rule for a generated file's first line
// (go help generate).
var goGenerated = regexp.MustCompile(`^// Code generated .* DO NOT EDIT\.$`)

// TestGeneratedGoParsesAndIsGofmtStable: every Go file generated parses,
// gofmt leaves it as it is, its first line is Go's mark of a generated
// file, and its package is the one asked for.
func TestGeneratedGoParsesAndIsGofmtStable(t *testing.T) {
	for _, c := range goldenCases {
		out, err := generateFrom(c.path, Options{Lang: Go, File: c.file, Package: "types"})
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(token.NewFileSet(), c.name+".go", out.Source, parser.ParseComments)
		if err != nil {
			t.Errorf("%s: the Go does not parse: %v", c.name, err)
			continue
		}
		if f.Name.Name != "types" {
			t.Errorf("%s: package %s, want types", c.name, f.Name.Name)
		}
		formatted, err := format.Source(out.Source)
		if err != nil || !bytes.Equal(formatted, out.Source) {
			t.Errorf("%s: gofmt changes the Go (%v):\n%s", c.name, err, firstDifference(formatted, out.Source))
		}
		first, _, _ := strings.Cut(string(out.Source), "\n")
		if !goGenerated.MatchString(first) {
			t.Errorf("%s: the first line %q is not Go's mark of a generated file", c.name, first)
		}
	}
}

// TestTheHeaderSaysHowTheFileWasGenerated: the first line of each
// language's file is the header, in its comment syntax, and reads back as
// the options it was generated with.
func TestTheHeaderSaysHowTheFileWasGenerated(t *testing.T) {
	for lang, marker := range map[string]string{Go: "// ", Python: "# ", TypeScript: "// "} {
		out := generateCase(t, "../../examples/handlers/operator.yaml", "examples/handlers/operator.yaml", lang)
		first, _, _ := strings.Cut(string(out.Source), "\n")
		want := marker + "Code generated by opkit generate types -f examples/handlers/operator.yaml --lang " + lang + "; DO NOT EDIT."
		if first != want {
			t.Errorf("%s: first line %q, want %q", lang, first, want)
		}
		opts, ok := ParseHeader(first)
		if !ok || opts.File != "examples/handlers/operator.yaml" || opts.Lang != lang {
			t.Errorf("%s: the header reads back as %+v, %v", lang, opts, ok)
		}
	}
}

// TestEverySchemaFeatureHasItsType checks, in each language, the type
// testdata/everything.yaml's fields get: required and optional, enums,
// formats, int-or-string, nested objects, maps, lists, open objects and
// untyped fields, nullable, descriptions, names no language can spell,
// versions, the object, related objects and children, and each kind of
// handler's context and result.
func TestEverySchemaFeatureHasItsType(t *testing.T) {
	want := map[string][]string{
		Go: {
			"type Widget struct {", "\tAPIVersion string `json:\"apiVersion\"`", "\tMetadata handler.ObjectMeta `json:\"metadata\"`",
			"\tSpec WidgetSpec `json:\"spec\"`", "\tStatus *WidgetStatus `json:\"status,omitempty\"`",
			"\t// How big it is.\n\tSize int32 `json:\"size\"`", "\tRatio *float64 `json:\"ratio,omitempty\"`",
			"\t// Default: true.\n\tEnabled bool `json:\"enabled\"`", // defaulted: always there
			"\tMode WidgetSpecMode `json:\"mode\"`", "type WidgetSpecMode string",
			"\tWidgetSpecModeFast WidgetSpecMode = \"fast\"", "\tWidgetSpecModeTwoWords WidgetSpecMode = \"two words\"",
			"\tWidgetSpecModeEmpty WidgetSpecMode = \"\"", "type WidgetSpecLevel int64", "\tWidgetSpecLevel2 WidgetSpecLevel = 2",
			"\t// An RFC 3339 date and time, like 2026-11-25T08:00:00Z.\n\tUntil *string `json:\"until,omitempty\"`",
			"\t// A port number or name. An integer or a string.\n\tPort any `json:\"port,omitempty\"`",
			"\tLabels map[string]string `json:\"labels,omitempty\"`", "\tLimits map[string]WidgetSpecLimitsValue `json:\"limits,omitempty\"`",
			"type WidgetSpecLimitsValue struct {\n\tMax int64 `json:\"max\"`", "\tPorts []WidgetSpecPortsItem `json:\"ports\"`",
			"\tProtocol *WidgetSpecPortsItemProtocol `json:\"protocol,omitempty\"`", "\tTags []string `json:\"tags,omitempty\"`",
			"\tExtra map[string]any `json:\"extra,omitempty\"`", "\tAnything json.RawMessage `json:\"anything,omitempty\"`",
			"\tOptions *WidgetSpecOptions `json:\"options,omitempty\"`", "which this type leaves out.",
			"\tNote *string `json:\"note,omitempty\"`", "\tTemplate *handler.KubeObject `json:\"template,omitempty\"`",
			"\tIndexHTML *string `json:\"index.html,omitempty\"`", "\tBackTickQuoted *string \"json:\\\"back`tick \\\\\\\"quoted\\\\\\\",omitempty\\\"\"", "\tClass *string `json:\"class,omitempty\"`", "\tXY *int64 `json:\"x-y,omitempty\"`",
			"\tFooBar *string `json:\"fooBar,omitempty\"`", "\tFooBar2 *string `json:\"foo_bar,omitempty\"`",
			"type WidgetSpecOwner struct {\n\tContact *WidgetSpecOwnerContact `json:\"contact,omitempty\"`\n\tName string `json:\"name\"`",
			"// WidgetSpec is the spec of a Widget (demo.example.com/v1).\n//\n// A widget, with every kind of field.",
			"\tConfigName json.RawMessage `json:\"configName,omitempty\"`", "type WidgetStatusUpdate struct {",
			"type WidgetV1alpha1 struct {", "\tSpec *WidgetV1alpha1Spec `json:\"spec,omitempty\"`", "type WidgetV1alpha1Spec struct {\n\tSize *string",
			"\tApp *handler.KubeObject `json:\"app,omitempty\"`", "\tPods []handler.KubeObject `json:\"pods\"`",
			"func WidgetRelatedOf[O, Old any](c *handler.Context[O, Old]) (*WidgetRelated, error) {",
			"func WidgetChildrenOf[O, Old any](c *handler.Context[O, Old]) (*WidgetChildren, error) {",
			"type ReconcileAllContext = handler.Context[Widget, WidgetSpec]", "type ReconcileAllResult = handler.Result[WidgetStatusUpdate]",
			"type ReconcileAllHandlers = handler.Handlers[Widget, WidgetSpec, WidgetStatusUpdate]",
			"type HookContext = handler.Context[struct{}, struct{}]", "type HookResult = handler.Result[struct{}]",
			"type CheckContext = handler.AdmissionContext[Widget]", "type CheckResult = handler.AdmissionResult",
			"type CheckHandlers = handler.Admission[Widget]", "type DefaultsContext = handler.AdmissionContext[Widget]",
			"type WidgetSpecCount int64", "\tWidgetSpecCount3000000000 WidgetSpecCount = 3000000000", // format int32, a value past it
			"\tField *string `json:\"-,omitempty\"`",
			// The status as handlers receive it, and as a result writes it:
			// a merge patch, with no required field.
			"type WidgetStatusEndpoint struct {\n\tHost string `json:\"host\"`",
			"\tEndpoint *WidgetStatusUpdateEndpoint `json:\"endpoint,omitempty\"`",
			"type WidgetStatusUpdateEndpoint struct {\n\tHost *string `json:\"host,omitempty\"`",
			"type WidgetStatusUpdateEndpointTls struct {\n\tSecret *string `json:\"secret,omitempty\"`",
			"\tShards map[string]WidgetStatusUpdateShardsValue `json:\"shards,omitempty\"`",
			"type WidgetStatusUpdateShardsValue struct {\n\tReady *bool `json:\"ready,omitempty\"`",
			"\tHistory []WidgetStatusHistoryItem `json:\"history,omitempty\"`\n\t// An RFC 3339", // a list is written whole
		},
		Python: {
			"class Widget(TypedDict):", "    apiVersion: Literal[\"demo.example.com/v1\"]\n    kind: Literal[\"Widget\"]\n    metadata: opkit.ObjectMeta\n",
			"    spec: WidgetSpec\n", "    status: NotRequired[WidgetStatus]\n",
			"    size: int\n    \"\"\"How big it is.\"\"\"", "    ratio: NotRequired[float]", "    enabled: bool\n    \"\"\"Default: true.\"\"\"",
			"    mode: WidgetSpecMode\n", "WidgetSpecMode = Literal[\"fast\", \"slow\", \"two words\", \"\"]", "WidgetSpecLevel = Literal[1, 2, 3]",
			"    until: NotRequired[str]\n    \"\"\"An RFC 3339 date and time, like 2026-11-25T08:00:00Z.\"\"\"",
			"    port: NotRequired[int | str]", "    labels: NotRequired[dict[str, str]]", "    limits: NotRequired[dict[str, WidgetSpecLimitsValue]]",
			"    ports: list[WidgetSpecPortsItem]\n", "    protocol: NotRequired[WidgetSpecPortsItemProtocol]", "    tags: NotRequired[list[str]]",
			"    extra: NotRequired[dict[str, Any]]", "    anything: NotRequired[Any]", "    note: NotRequired[str | None]",
			"    template: NotRequired[opkit.KubeObject]", "read them with .get().",
			"WidgetSpecFiles = TypedDict(\n    \"WidgetSpecFiles\",\n    {\n        # A key encoding/json would skip.\n        \"-\": NotRequired[str],\n        # A key with a backtick and quotes: */ \"\"\" ` \\\n        \"back`tick \\\"quoted\\\"\": NotRequired[str],\n        \"class\": NotRequired[str],\n        \"index.html\": NotRequired[str],\n        \"x-y\": NotRequired[int],\n    },\n)",
			"    fooBar: NotRequired[str]", "    foo_bar: NotRequired[str]",
			"class WidgetSpec(TypedDict):\n    \"\"\"The spec of a Widget (demo.example.com/v1).\n\n    A widget, with every kind of field.\n    \"\"\"",
			"    configName: NotRequired[Any]", "class WidgetStatusUpdate(TypedDict):", "class WidgetV1alpha1(TypedDict):", "    spec: NotRequired[WidgetV1alpha1Spec]",
			"    app: NotRequired[opkit.KubeObject]", "    pods: list[opkit.KubeObject]",
			"def widget_related(ctx: opkit.Context[Any, Any]) -> WidgetRelated:", "def widget_children(ctx: opkit.Context[Any, Any]) -> WidgetChildren:",
			"ReconcileAllContext = opkit.Context[Widget, WidgetSpec]", "ReconcileAllResult = opkit.Result[WidgetStatusUpdate]",
			"HookContext = opkit.EventContext", "HookResult = opkit.Result[Never]",
			"CheckContext = opkit.AdmissionContext[Widget]", "CheckResult = opkit.AdmissionResult",
			"WidgetSpecCount = Literal[1, 3000000000]",
			"class WidgetStatusEndpoint(TypedDict):", "    host: str\n",
			"class WidgetStatusUpdateEndpoint(TypedDict):", "    host: NotRequired[str]\n",
			"    endpoint: NotRequired[WidgetStatusUpdateEndpoint]\n", "    history: NotRequired[list[WidgetStatusHistoryItem]]\n",
		},
		TypeScript: {
			"export interface Widget {\n  apiVersion: \"demo.example.com/v1\";\n  kind: \"Widget\";\n  metadata: opkit.ObjectMeta;",
			"  spec: WidgetSpec;\n", "  status?: WidgetStatus;\n",
			"  /** How big it is. */\n  size: number;", "  ratio?: number;", "  /** Default: true. */\n  enabled: boolean;",
			"  mode: WidgetSpecMode;", "export type WidgetSpecMode = \"fast\" | \"slow\" | \"two words\" | \"\";", "export type WidgetSpecLevel = 1 | 2 | 3;",
			"  /** An RFC 3339 date and time, like 2026-11-25T08:00:00Z. */\n  until?: string;",
			"  port?: number | string;", "  labels?: Record<string, string>;", "  limits?: Record<string, WidgetSpecLimitsValue>;",
			"  ports: WidgetSpecPortsItem[];", "  protocol?: WidgetSpecPortsItemProtocol;", "  tags?: string[];",
			"  extra?: Record<string, unknown>;", "  anything?: unknown;", "  note?: string | null;", "  template?: opkit.KubeObject;",
			"export interface WidgetSpecOptions {\n  verbose?: boolean;\n  [field: string]: unknown;\n}",
			"  class?: string;\n  \"index.html\"?: string;\n  \"x-y\"?: number;", "  fooBar?: string;\n  foo_bar?: string;",
			"/**\n * The spec of a Widget (demo.example.com/v1).\n *\n * A widget, with every kind of field.\n */",
			"  configName?: unknown;", "export interface WidgetStatusUpdate {", "export interface WidgetV1alpha1 {", "  spec?: WidgetV1alpha1Spec;",
			"export type WidgetRelated = {", "  app?: opkit.KubeObject;", "  pods: opkit.KubeObject[];", "export type WidgetChildren = {",
			"export type ReconcileAllContext = Omit<\n  opkit.Context<Widget, WidgetSpec>,\n  \"related\" | \"children\"\n> & {\n  /** The related objects, by id; absent when none exists. */\n  related?: WidgetRelated;",
			"  /** The related objects, by id; absent in a delete run or when none exists. */\n  related?: WidgetRelated;",
			"export type WidgetSpecCount = 1 | 3000000000;", "  \"-\"?: string;",
			"export interface WidgetStatusEndpoint {\n  host: string;", "export interface WidgetStatusUpdateEndpoint {\n  host?: string;",
			"export type ReconcileAllResult = opkit.Result<WidgetStatusUpdate>;",
			"export type HookContext = opkit.EventContext;", "export type HookResult = opkit.Result<never>;",
			"export type CheckContext = opkit.AdmissionContext<Widget>;", "export type CheckResult = opkit.AdmissionResult<Widget>;",
		},
	}
	for _, lang := range Languages {
		out := generateCase(t, "testdata/everything.yaml", "testdata/everything.yaml", lang)
		src := string(out.Source)
		if lang == Go {
			// Compared without gofmt's alignment.
			src = regexp.MustCompile(`[ \t]+`).ReplaceAllStringFunc(src, func(s string) string {
				if strings.HasPrefix(s, "\t") {
					return s
				}
				return " "
			})
		}
		for _, w := range want[lang] {
			if !strings.Contains(src, w) {
				t.Errorf("%s: the types lack\n%s", lang, w)
			}
		}
		for _, no := range []string{"ReconcileAllResult = opkit.Result[WidgetStatus]", "Result<WidgetStatus>", "Result[WidgetStatus]"} {
			if strings.Contains(src, no) {
				t.Errorf("%s: a result may write the status spec.status computes: %s", lang, no)
			}
		}
		// opkit leaves a context's related out when none of the objects
		// exists: optional in every TypeScript context.
		if lang == TypeScript && strings.Contains(src, "  related: ") {
			t.Errorf("%s: a context's related is not optional", lang)
		}
	}
}

// TestTheVersionHandlersReceiveIsUnsuffixed: with readVersion naming a
// version that is not the storage version, that version's types are
// Kind, KindSpec...; the others are suffixed with their version.
func TestTheVersionHandlersReceiveIsUnsuffixed(t *testing.T) {
	def := `apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: sites}
spec:
  resource:
    group: demo.example.com
    kind: Site
    readVersion: v1
    versions:
    - name: v1
      schema: {type: object, properties: {old: {type: string}}}
    - name: v2
      storage: true
      schema: {type: object, properties: {new: {type: string}}}
  handlers:
  - {name: greet, "on": [create], exec: {command: [./greet]}}
`
	out := generateString(t, def, TypeScript)
	for _, w := range []string{
		"export interface SiteSpec {\n  old?: string;", "export interface SiteV2Spec {\n  new?: string;",
		"export type GreetContext = opkit.Context<Site, SiteSpec>;", `apiVersion: "demo.example.com/v2";`,
	} {
		if !strings.Contains(out, w) {
			t.Errorf("the types lack %q:\n%s", w, out)
		}
	}
}

// generateString generates the types of a definition given as text.
func generateString(t *testing.T, def, lang string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "operator.yaml")
	if err := os.WriteFile(file, []byte(def), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := GenerateFile(Options{Lang: lang, File: file})
	if err != nil {
		t.Fatal(err)
	}
	return string(out.Source)
}

func TestNamesAreIdentifiersInEveryLanguage(t *testing.T) {
	for _, c := range []struct{ in, pascal, goName, snake string }{
		{"greet", "Greet", "Greet", "greet"},
		{"greet-all", "GreetAll", "GreetAll", "greet_all"},
		{"fooBar", "FooBar", "FooBar", "foo_bar"},
		{"foo_bar", "FooBar", "FooBar", "foo_bar"},
		{"index.html", "IndexHtml", "IndexHTML", "index_html"},
		{"apiVersion", "ApiVersion", "APIVersion", "api_version"},
		{"HTTPServer", "HTTPServer", "HTTPServer", "http_server"},
		{"repoUrl", "RepoUrl", "RepoURL", "repo_url"},
		{"v1alpha1", "V1alpha1", "V1alpha1", "v1alpha1"},
		{"1st-run", "1stRun", "X1stRun", "1st_run"},
		{"-", "", "Field", ""},
	} {
		if got := pascal(c.in); got != c.pascal {
			t.Errorf("pascal(%q) = %q, want %q", c.in, got, c.pascal)
		}
		if got := goName(c.in); got != c.goName {
			t.Errorf("goName(%q) = %q, want %q", c.in, got, c.goName)
		}
		if got := snake(c.in); got != c.snake {
			t.Errorf("snake(%q) = %q, want %q", c.in, got, c.snake)
		}
	}
	if typeName("1st-run") != "X1stRun" {
		t.Errorf("typeName(1st-run) = %q", typeName("1st-run"))
	}
	for s, ok := range map[string]bool{"name": true, "index.html": false, "class": false, "from": false, "x_y": true, "1a": false, "": false} {
		if pythonIdentifier(s) != ok {
			t.Errorf("pythonIdentifier(%q) = %v", s, !ok)
		}
	}
	for s, ok := range map[string]bool{"name": true, "index.html": false, "class": true, "$x": true, "x-y": false} {
		if tsIdentifier(s) != ok {
			t.Errorf("tsIdentifier(%q) = %v", s, !ok)
		}
	}
}

// TestCollisionsAreResolvedAndSaid: names that collide get a number, and
// a warning says which; names a language cannot spell are made so, and
// said. Python and TypeScript are not told of Go's own names.
func TestCollisionsAreResolvedAndSaid(t *testing.T) {
	def := `apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: first}
spec:
  resource:
    group: demo.example.com
    kind: Literal
    versions:
    - name: v1
      schema: {type: object, properties: {fooBar: {type: string}, foo-bar: {type: string}}}
  handlers:
  - {name: greet, "on": [create], exec: {command: [./greet]}}
  - {name: 1st, "on": [create], exec: {command: [./first]}}
---
apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: second}
spec:
  resource:
    group: demo.example.com
    kind: Hello
    versions:
    - name: v1
      schema: {type: object}
  handlers:
  - {name: greet, "on": [create], exec: {command: [./greet]}}
`
	file := filepath.Join(t.TempDir(), "operator.yaml")
	if err := os.WriteFile(file, []byte(def), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, lang := range Languages {
		out, err := GenerateFile(Options{Lang: lang, File: file})
		if err != nil {
			t.Fatal(err)
		}
		warnings := strings.Join(out.Warnings, "\n")
		for _, w := range []string{
			"the object type of a Literal (demo.example.com/v1) would be named Literal, as is a name the generated code uses itself: named Literal2 instead",
			"the context of handler greet would be named GreetContext, as is the context of handler greet: named GreetContext2 instead",
			"the result of handler greet would be named GreetResult, as is the result of handler greet: named GreetResult2 instead",
			"handler 1st: its types are named X1stContext and X1stResult, as a name starts with a letter",
		} {
			if !strings.Contains(warnings, w) {
				t.Errorf("%s: the warnings do not say %q:\n%s", lang, w, warnings)
			}
		}
		goField := `go: the Go field of Literal2Spec's "fooBar" would be named FooBar, as is the Go field of Literal2Spec's "foo-bar": named FooBar2 instead`
		if said := strings.Contains(warnings, goField); said != (lang == Go) {
			t.Errorf("%s: the warning of Go's field names is there: %v, want %v:\n%s", lang, said, lang == Go, warnings)
		}
		for _, name := range []string{"Literal2", "GreetContext2", "GreetResult2", "X1stContext"} {
			if !strings.Contains(string(out.Source), name) {
				t.Errorf("%s: no type %s", lang, name)
			}
		}
	}
}

func TestGenerateRefusesWhatItCannotWrite(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("apiVersion: opkit.dev/v1alpha1\nkind: Operator\nmetadata: {name: bad}\nspec:\n  resource:\n    group: demo.example.com\n    kind: Bad\n    versions:\n    - name: v1\n      schema: {type: object, properties: {n: {type: strin}}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(t.TempDir(), "empty.yaml")
	if err := os.WriteFile(empty, []byte("# nothing\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		opts       Options
		want       string
		definition bool
	}{
		{Options{Lang: "rust", File: "../../examples/handlers/operator.yaml"}, `unknown language "rust": want one of go, python, typescript`, false},
		{Options{Lang: Go, File: "../../examples/handlers/operator.yaml", Package: "my-types"}, `"my-types" cannot name a Go package`, false},
		{Options{Lang: Python, File: "../../examples/handlers/operator.yaml", Package: "types"}, "a package is for --lang go only", false},
		{Options{Lang: Go}, "no definition file", false},
		{Options{Lang: Go, File: bad}, bad + `:10: spec.resource.versions[0].schema.properties.n.type: Unsupported value: "strin"`, true},
		{Options{Lang: Go, File: filepath.Join(t.TempDir(), "nosuch.yaml")}, "nosuch.yaml", true},
		{Options{Lang: Go, File: empty}, "defines no Operator", false},
	} {
		_, err := GenerateFile(c.opts)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want one saying %s", c.opts, err, c.want)
		}
		if errors.Is(err, ErrDefinition) != c.definition {
			t.Errorf("%+v: errors.Is(err, ErrDefinition) = %v", c.opts, !c.definition)
		}
	}
}

func TestWrapKeepsParagraphsAndListItems(t *testing.T) {
	got := wrap("One two three four five six.\n\n- a list item that is long\n- another", 12)
	want := []string{"One two", "three four", "five six.", "", "- a list", "  item that", "  is long", "- another"}
	if !slices.Equal(got, want) {
		t.Errorf("wrap = %q, want %q", got, want)
	}
}
