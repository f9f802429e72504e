package layers

import (
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// module is the import path of opkit's module; the rules name packages
// relative to it (internal/engine), and third-party ones in full.
const module = "github.com/opkit-dev/opkit"

// pure are the packages that decide without acting: pure functions of
// their inputs, table-tested without a cluster. conformance is its model
// and generator; its checker is in its tests, which the rules do not bind.
var pure = []string{"internal/cause", "internal/statemachine", "internal/definition", "internal/compat", "internal/jsondepth", "internal/compare", "internal/inventory", "internal/conformance"}

// acting are the packages that run operators, talk to a cluster or serve:
// what a pure package must not reach.
var acting = []string{"internal/engine/...", "internal/related/...", "internal/gauges/...", "internal/delivery/...", "internal/lifecycle/...", "internal/admission/...", "internal/informer/...", "internal/health/...", "internal/run/...", "internal/endpoint/...", "internal/stack/...", "internal/executor/...", "internal/webhook/...", "internal/console/...", "internal/cli/...", "internal/devcluster/...", "internal/migrate/...", "internal/scenario/runner/...", "pkg/..."}

// kubeClient and clock are the third-party packages a pure package does
// not import itself.
var (
	kubeClient = []string{"k8s.io/client-go/...", "sigs.k8s.io/controller-runtime/..."}
	clock      = []string{"k8s.io/utils/clock/..."}
)

// rule is one layer rule: the packages in from (but those in except)
// reach none of not, through any chain of imports, and import none of
// notDirect themselves. A pattern is a package, or with /... a tree.
type rule struct {
	says      string // the rule as the docs say it, and where
	from      []string
	except    []string
	not       []string
	notDirect []string
	// coming, when set, says why from may match no package yet; a rule
	// that binds nothing otherwise fails, as a renamed package would
	// leave it checking nothing.
	coming string
}

var rules = []rule{
	{
		says:      "pure packages (cause, statemachine, definition, compat, jsondepth, compare, inventory, the conformance model) import no engine, client or clock (docs/architecture.md; conformance's package doc)",
		from:      pure,
		not:       acting,
		notDirect: slices.Concat(kubeClient, clock),
	},
	{
		says: "api/v1alpha1 is the public contract: it imports nothing of internal/ (docs/architecture.md)",
		from: []string{"api/..."},
		not:  []string{"internal/...", "pkg/...", "cmd/...", "bench/..."},
	},
	{
		says: "executors know nothing of the engine (docs/architecture.md; package executor)",
		from: []string{"internal/executor/..."},
		not:  []string{"internal/engine/...", "internal/run/...", "internal/stack/...", "internal/console/...", "internal/cli/..."},
	},
	{
		says: "the agent runs in a runner Pod beside a team's image, and the runner API serves it: neither knows the engine or the console (docs/production.md, Runners)",
		from: []string{"internal/agent/...", "internal/runners/..."},
		not:  []string{"internal/engine/...", "internal/run/...", "internal/stack/...", "internal/console/...", "internal/cli/..."},
	},
	{
		says: "a person's request is one protocol the acting packages share: it knows none of them (package request)",
		from: []string{"internal/request/..."},
		not:  []string{"internal/engine/...", "internal/run/...", "internal/calendar/...", "internal/lifecycle/...", "internal/delivery/...", "internal/rollout/...", "internal/executor/...", "internal/stack/...", "internal/console/...", "internal/cli/..."},
	},
	{
		says: "the engine never imports the console (docs/architecture.md)",
		from: []string{"internal/engine/...", "internal/run/..."},
		not:  []string{"internal/console/...", "internal/stack/...", "internal/cli/..."},
	},
	{
		says: "the console reads the archive and the cluster only: no engine, no executor (docs/architecture.md)",
		from: []string{"internal/console/..."},
		not:  []string{"internal/engine/...", "internal/run/...", "internal/executor/...", "internal/stack/...", "internal/cli/..."},
	},
	{
		says: "data flows one way, definition -> engine -> executor -> archive: the archive imports none of what writes it (docs/architecture.md; package archive)",
		from: []string{"internal/archive"},
		not:  []string{"internal/definition/...", "internal/cause/...", "internal/statemachine/...", "internal/engine/...", "internal/run/...", "internal/executor/...", "internal/console/...", "internal/source/...", "internal/webhook/...", "internal/stack/...", "internal/cli/..."},
	},
	{
		says: "sources (webhook deliveries' reception), the webhook server and the acting replica's EndpointSlices are used by the engine, never the other way (docs/architecture.md)",
		from: []string{"internal/source/...", "internal/webhook/...", "internal/endpoint/..."},
		not:  []string{"internal/engine/...", "internal/run/...", "internal/stack/...", "internal/console/...", "internal/cli/..."},
	},
	{
		says: "a consumer (a GitHub poll, NATS, Kafka) hands messages to package source's Sink and keeps its place through source.Cursors: the archive and the queue are the engine's (package source's Consumer)",
		from: []string{"internal/source/ghpoll/...", "internal/source/natsjs/...", "internal/source/kafkasrc/..."},
		not:  []string{"internal/archive/...", "internal/delivery/..."},
	},
	{
		says: "the informer cache lists, watches and keeps objects of any kind: it knows no operator, run or engine (package informer)",
		from: []string{"internal/informer/..."},
		not:  []string{"internal/engine/...", "internal/run/...", "internal/stack/...", "internal/definition/...", "internal/cause/...", "internal/executor/...", "internal/archive/...", "internal/console/...", "internal/cli/..."},
	},
	{
		says: "health watches the API server and the archive for the engine and knows no operator, run or engine (package health)",
		from: []string{"internal/health/..."},
		not:  []string{"internal/engine/...", "internal/run/...", "internal/stack/...", "internal/definition/...", "internal/cause/...", "internal/executor/...", "internal/console/...", "internal/cli/..."},
	},
	{
		says: "admission answers admission calls with the executors and the archive: it knows nothing of the engine that serves it (package admission)",
		from: []string{"internal/admission/..."},
		not:  []string{"internal/engine/...", "internal/stack/...", "internal/console/...", "internal/cli/...", "internal/informer/...", "internal/health/..."},
	},
	{
		says: "the life cycle acts on one object's state for the reconcile that calls it: it knows nothing of the engine (package lifecycle)",
		from: []string{"internal/lifecycle/..."},
		not:  []string{"internal/engine/...", "internal/stack/...", "internal/console/...", "internal/cli/...", "internal/informer/...", "internal/health/...", "internal/admission/..."},
	},
	{
		says: "deliveries are received, recorded and queued by package delivery, which hands causes to the runner and knows the engine only through Receiver.Running, which says what runs here (package delivery)",
		from: []string{"internal/delivery/..."},
		not:  []string{"internal/engine/...", "internal/stack/...", "internal/console/...", "internal/cli/...", "internal/informer/...", "internal/health/...", "internal/admission/...", "internal/lifecycle/..."},
	},
	{
		says: "a watch runs a watch operator's objects with the runner the engine gives it, and opkit's finalizer is added and removed by one function: neither knows the engine (packages watch, finalizer)",
		from: []string{"internal/watch/...", "internal/finalizer/..."},
		not:  []string{"internal/engine/...", "internal/stack/...", "internal/console/...", "internal/cli/...", "internal/health/...", "internal/admission/..."},
	},
	{
		says: "the calendar runs an operator's operator-wide schedules and its requests to run now with the runner the engine gives it: it knows nothing of the engine (package calendar)",
		from: []string{"internal/calendar/..."},
		not:  []string{"internal/engine/...", "internal/stack/...", "internal/console/...", "internal/cli/...", "internal/informer/...", "internal/health/...", "internal/admission/..."},
	},
	{
		says: "a staged rollout moves objects between the definitions the engine runs, through what its Config gives: it knows nothing of the engine (package rollout)",
		from: []string{"internal/rollout/..."},
		not:  []string{"internal/engine/...", "internal/stack/...", "internal/console/...", "internal/cli/...", "internal/informer/...", "internal/health/...", "internal/admission/..."},
	},
	{
		says: "the controller of an operator's custom resources is given the engine's clients and the makers of its runner, life cycle and rollout through its Config, and CRDs are installed by an Installer given its clients: neither knows the engine (packages converge, crds)",
		from: []string{"internal/converge/...", "internal/crds/..."},
		not:  []string{"internal/engine/...", "internal/stack/...", "internal/console/...", "internal/cli/...", "internal/health/...", "internal/admission/...", "internal/delivery/..."},
	},
	{
		says: "the object gauges read what the engine hands them: they know nothing of the engine (package gauges)",
		from: []string{"internal/gauges/..."},
		not:  []string{"internal/engine/...", "internal/stack/...", "internal/console/...", "internal/cli/..."},
	},
	{
		says: "the related index maps objects to the custom resources that name them: it knows nothing of the engine or of runs (package related)",
		from: []string{"internal/related/..."},
		not:  []string{"internal/engine/...", "internal/run/...", "internal/stack/...", "internal/console/...", "internal/cli/..."},
	},
	{
		says:      "the runs API reads the archive and serves it on net/http: no engine, console or CLI, and no k8s.io/apiserver (package runsapi)",
		from:      []string{"internal/runsapi/..."},
		not:       []string{"internal/engine/...", "internal/run/...", "internal/stack/...", "internal/console/...", "internal/cli/...", "internal/executor/...", "k8s.io/apiserver/..."},
		notDirect: []string{"sigs.k8s.io/controller-runtime/..."},
	},
	{
		says: "the CLI's client of the runs API reads it as kubectl does: it knows the API's types and the archive's records, never the runs API's server, an engine or a store's internals (package runsclient)",
		from: []string{"internal/runsclient/..."},
		not:  []string{"internal/runsapi/...", "internal/engine/...", "internal/run/...", "internal/stack/...", "internal/console/...", "internal/cli/..."},
	},
	{
		says:   "a run's path from cause to archive stays in the run package, with no call climbing back to the engine (issue 35)",
		from:   []string{"internal/run/..."},
		not:    []string{"internal/engine/..."},
		coming: "the run package is being carved out of internal/engine (issue 35)",
	},
	{
		says:      "one composition root (package stack) assembles the engine for every caller: the commands, opkit test's runner, pkg/opkittest and the bench (package stack)",
		from:      []string{"..."},
		except:    []string{"internal/stack/...", "internal/cli", "internal/scenario/runner", "pkg/opkittest", "bench"},
		notDirect: []string{"internal/stack/..."},
	},
	{
		says:      "cmd/opkit is main only; commands live in internal/cli, which nothing else imports (docs/architecture.md)",
		from:      []string{"..."},
		except:    []string{"cmd/opkit", "internal/cli"},
		notDirect: []string{"internal/cli"},
	},
	{
		says: "the Go handler SDK is imported by users' handler programs: nothing of opkit's internals, no Kubernetes or OpenTelemetry module (docs/architecture.md; package handler)",
		from: []string{"pkg/handler/..."},
		not:  []string{"internal/...", "api/...", "pkg/opkittest/...", "k8s.io/...", "sigs.k8s.io/...", "go.opentelemetry.io/...", "github.com/spf13/..."},
	},
}

// pkg is what go list says of a package.
type pkg struct {
	ImportPath string
	Imports    []string
	Standard   bool
}

// graph lists the module's packages and every package they import,
// without their tests.
func graph(t *testing.T) map[string]*pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-json=ImportPath,Imports,Standard", module+"/...")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	pkgs := map[string]*pkg{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		p := &pkg{}
		if err := dec.Decode(p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("reading go list's output: %v", err)
		}
		pkgs[p.ImportPath] = p
	}
	return pkgs
}

// matches reports whether the import path is one of patterns; a
// pattern without a dot in its first element ("internal/engine", "...")
// is relative to the module.
func matches(path string, patterns []string) bool {
	for _, pat := range patterns {
		full := pat
		if first, _, _ := strings.Cut(pat, "/"); pat == "..." || !strings.Contains(first, ".") {
			full = module + "/" + pat
		}
		if tree, ok := strings.CutSuffix(full, "/..."); ok {
			if path == tree || strings.HasPrefix(path, tree+"/") {
				return true
			}
		} else if path == full {
			return true
		}
	}
	return false
}

// chain is the shortest chain of imports from from to a package of
// patterns, or nil.
func chain(pkgs map[string]*pkg, from string, patterns []string) []string {
	parent := map[string]string{from: ""}
	queue := []string{from}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if p != from && matches(p, patterns) {
			var path []string
			for at := p; at != ""; at = parent[at] {
				path = append(path, at)
			}
			slices.Reverse(path)
			return path
		}
		if pk := pkgs[p]; pk != nil {
			for _, imp := range pk.Imports {
				if _, seen := parent[imp]; !seen && !pkgs[imp].isStandard() {
					parent[imp] = p
					queue = append(queue, imp)
				}
			}
		}
	}
	return nil
}

func (p *pkg) isStandard() bool { return p != nil && p.Standard }

// short drops the module's prefix from each path of a chain.
func short(path []string) string {
	s := make([]string, len(path))
	for i, p := range path {
		s[i] = strings.TrimPrefix(p, module+"/")
	}
	return strings.Join(s, " -> ")
}

// violations checks rules against pkgs and returns one line each, naming
// the chain at fault and the rule.
func violations(pkgs map[string]*pkg, rules []rule) (found []string, unbound []string) {
	var own []string
	for path := range pkgs {
		if matches(path, []string{"..."}) {
			own = append(own, path)
		}
	}
	slices.Sort(own)
	for _, r := range rules {
		bound := false
		for _, from := range own {
			if !matches(from, r.from) || matches(from, r.except) {
				continue
			}
			bound = true
			if len(r.not) > 0 {
				if c := chain(pkgs, from, r.not); c != nil {
					found = append(found, short(c)+": "+r.says)
				}
			}
			for _, imp := range pkgs[from].Imports {
				if matches(imp, r.notDirect) {
					found = append(found, short([]string{from, imp})+": "+r.says)
				}
			}
		}
		if !bound && r.coming == "" {
			unbound = append(unbound, r.says)
		}
	}
	return found, unbound
}

func TestPackagesKeepTheirLayers(t *testing.T) {
	found, unbound := violations(graph(t), rules)
	for _, v := range found {
		t.Error(v)
	}
	for _, says := range unbound {
		t.Errorf("the rule %q binds no package: was one renamed?", says)
	}
}

// TestAForbiddenImportIsNamedWithItsChain checks the checker on a graph
// of its own: a pure package reaching the engine through another, and
// one importing the clock itself.
func TestAForbiddenImportIsNamedWithItsChain(t *testing.T) {
	m := func(p string) string { return module + "/" + p }
	pkgs := map[string]*pkg{
		m("internal/cause"):        {ImportPath: m("internal/cause"), Imports: []string{"fmt", m("internal/definition")}},
		m("internal/definition"):   {ImportPath: m("internal/definition"), Imports: []string{m("internal/engine"), "k8s.io/apiserver/pkg/cel"}},
		m("internal/engine"):       {ImportPath: m("internal/engine"), Imports: []string{"k8s.io/client-go/rest"}},
		m("internal/jsondepth"):    {ImportPath: m("internal/jsondepth"), Imports: []string{"k8s.io/utils/clock"}},
		"k8s.io/apiserver/pkg/cel": {ImportPath: "k8s.io/apiserver/pkg/cel", Imports: []string{"k8s.io/utils/clock"}},
		"k8s.io/utils/clock":       {ImportPath: "k8s.io/utils/clock"},
		"k8s.io/client-go/rest":    {ImportPath: "k8s.io/client-go/rest"},
		"fmt":                      {ImportPath: "fmt", Standard: true},
	}
	found, _ := violations(pkgs, rules[:1])
	want := []string{
		"internal/cause -> internal/definition -> internal/engine: " + rules[0].says,
		"internal/definition -> internal/engine: " + rules[0].says,
		"internal/jsondepth -> k8s.io/utils/clock: " + rules[0].says,
	}
	if !slices.Equal(found, want) {
		t.Errorf("violations:\n%s\nwant:\n%s", strings.Join(found, "\n"), strings.Join(want, "\n"))
	}
}
