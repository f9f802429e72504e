package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/opkit-dev/opkit/internal/crds"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/devcluster"
	"github.com/opkit-dev/opkit/internal/devcluster/devnode"
	"github.com/opkit-dev/opkit/internal/scenario"
	"github.com/opkit-dev/opkit/internal/scenario/runner"
)

func newTestCommand() *cobra.Command {
	var parallel int
	var match, junit, kubeconfig string
	var verbose, schema bool
	var timeoutScale float64
	cmd := &cobra.Command{
		Use:   "test [PATH]...",
		Short: "Run the test scenarios (*.test.yaml) in PATHs against a local control plane",
		Long: `Run declarative test scenarios: each PATH is a scenario file, or a directory
searched for *.test.yaml files (default: the current directory). See
docs/testing.md and, for the format, docs/scenarios.md.

Every scenario is checked first (file:line of each problem; nothing runs if
one is malformed), and so are the operator definitions they name. Then a
local control plane starts (or, with --kubeconfig, a running cluster is
used) and each scenario runs in a namespace of its own, with an engine of
its own, -p at a time.

A failing scenario prints its failing step (file:line), what was expected
and what was found, and its handler runs with their logs. The exit code is
1 when a scenario fails.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if schema {
				_, err := cmd.OutOrStdout().Write(scenario.Schema())
				return err
			}
			var re *regexp.Regexp
			if match != "" {
				var err error
				if re, err = regexp.Compile(match); err != nil {
					return fmt.Errorf("--run: %w", err)
				}
			}
			if len(args) == 0 {
				args = []string{"."}
			}
			scenarios, err := loadScenarios(args)
			if err != nil {
				return err
			}
			// Selected before a plane starts, which takes seconds.
			if err := checkSelection(scenarios, re); err != nil {
				return err
			}
			if timeoutScale < 1 {
				return fmt.Errorf("--timeout-scale %g: want 1 or more", timeoutScale)
			}
			return runScenarios(cmd, scenarios, runner.Options{Parallel: parallel, Match: re, Verbose: verbose, Out: cmd.OutOrStdout(), TimeoutScale: timeoutScale}, kubeconfig, junit)
		},
	}
	cmd.Flags().IntVarP(&parallel, "parallel", "p", runtime.GOMAXPROCS(0), "how many scenarios run at once")
	cmd.Flags().StringVar(&match, "run", "", "run only the scenarios whose name matches this regular expression")
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "print every step of every scenario, not only failures")
	cmd.Flags().StringVar(&junit, "junit", "", "write a JUnit XML report to this file, for CI")
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "run against this running cluster (e.g. opkit cluster start's) instead of starting a local control plane")
	cmd.Flags().Float64Var(&timeoutScale, "timeout-scale", envTimeoutScale(), "multiply every expect step's timeout by this, for a loaded machine (default: $"+scenario.TimeoutScaleEnv+", else 1)")
	cmd.Flags().BoolVar(&schema, "schema", false, "print the JSON Schema of scenario files (for editors) and exit")
	return cmd
}

// envTimeoutScale is --timeout-scale's default: $OPKIT_TEST_TIMEOUT_SCALE,
// which scales Go tests' waits too (pkg/opkittest), else 1.
func envTimeoutScale() float64 {
	f, _ := scenario.TimeoutScale() // 1 when unset or not such a number
	return f
}

// goTestFlags lets `opkit test` take go test's spelling of its flags,
// -run and -junit with one dash, which the flag parser would read as
// -r -u -n: they become --run and --junit.
func goTestFlags(args []string) []string {
	if len(args) == 0 || args[0] != "test" {
		return args
	}
	out := slices.Clone(args)
	for i, a := range out {
		if a == "--" {
			break
		}
		for _, name := range []string{"run", "junit"} {
			if a == "-"+name || strings.HasPrefix(a, "-"+name+"=") {
				out[i] = "-" + a
			}
		}
	}
	return out
}

// loadScenarios finds and loads every scenario, and compiles the
// definitions they name: every problem of every file, or the scenarios.
func loadScenarios(paths []string) ([]*scenario.Scenario, error) {
	files, err := scenario.Find(paths...)
	if err != nil {
		return nil, err
	}
	var all []*scenario.Scenario
	var errs []error
	for _, f := range files {
		scs, err := scenario.LoadFile(f)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		all = append(all, scs...)
	}
	// The operators they run, and the handlers and sources they name.
	seen := map[string]bool{}
	for _, sc := range all {
		if err := runner.Check(sc); err != nil {
			if msg := err.Error(); !seen[msg] { // one bad definition, many scenarios
				seen[msg] = true
				errs = append(errs, err)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("invalid scenarios, nothing run:\n%w", err)
	}
	return all, nil
}

// checkSelection fails when --run selects none of the scenarios, naming
// them.
func checkSelection(scenarios []*scenario.Scenario, re *regexp.Regexp) error {
	if re == nil || slices.ContainsFunc(scenarios, func(sc *scenario.Scenario) bool { return re.MatchString(sc.Name) }) {
		return nil
	}
	names := make([]string, 0, len(scenarios))
	for _, sc := range scenarios {
		names = append(names, strconv.Quote(sc.Name))
	}
	const shown = 10
	if len(names) > shown {
		names = append(names[:shown], fmt.Sprintf("and %d more", len(names)-shown))
	}
	return fmt.Errorf("no scenario selected: --run %s matches none of their names: %s", re, strings.Join(names, ", "))
}

// installCRDs installs the CRDs of the operators the scenarios run before
// the plane's controllers start, so that the garbage collector knows them
// from its start: a child owned by a custom resource then goes with it at
// once, not after the collector's next discovery (up to 30s).
func installCRDs(scenarios []*scenario.Scenario) func(context.Context, *rest.Config) error {
	return func(ctx context.Context, cfg *rest.Config) error {
		c, err := newClient(cfg, apiextensionsv1.AddToScheme)
		if err != nil {
			return err
		}
		var files []string
		for _, sc := range scenarios {
			files = append(files, sc.Operators...)
		}
		slices.Sort(files)
		defs, err := definition.CompileFiles(slices.Compact(files)...)
		if err != nil {
			return err
		}
		installed := map[string]bool{}
		for _, d := range defs {
			if !d.Owns() || installed[d.GVK.GroupKind().String()] {
				continue
			}
			installed[d.GVK.GroupKind().String()] = true
			crd := d.CRD()
			if err := c.Create(ctx, crd); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("installing the CRD of operator %s: %w", d.Operator.Name, err)
			}
			if err := crds.WaitEstablished(ctx, c, crd.Name); err != nil {
				return fmt.Errorf("waiting for the CRD %s: %w", crd.Name, err)
			}
		}
		return nil
	}
}

// runScenarios runs the scenarios on a plane of their own, or on the
// cluster of kubeconfig, and prints a summary.
func runScenarios(cmd *cobra.Command, scenarios []*scenario.Scenario, opts runner.Options, kubeconfig, junit string) error {
	ctx := cmd.Context()
	stderr := cmd.ErrOrStderr()
	// The engines' own logs are in each failure's runs; controller-runtime's
	// lines would interleave across scenarios.
	ctrllog.SetLogger(logr.Discard())
	start := time.Now()
	if kubeconfig != "" {
		cfg, err := loadKubeconfig(kubeconfig)
		if err != nil {
			return err
		}
		opts.Config = cfg
	} else {
		selected := slices.DeleteFunc(slices.Clone(scenarios), func(sc *scenario.Scenario) bool { return opts.Match != nil && !opts.Match.MatchString(sc.Name) })
		cl, err := devcluster.Start(ctx, devcluster.Options{DevNode: true, Log: io.Discard, BeforeControllers: installCRDs(selected)})
		if err != nil {
			return fmt.Errorf("starting the local control plane: %w", err)
		}
		defer cl.Stop()
		fmt.Fprintf(stderr, "local control plane ready in %.1fs\n", time.Since(start).Seconds())
		opts.Config = cl.RESTConfig()
	}
	// Job handlers' pods run on the dev node, when there is one.
	opts.JobTolerations = []corev1.Toleration{{Key: devnode.Taint, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	began := time.Now()
	results, err := runner.Run(ctx, opts, scenarios)
	if err != nil {
		return err
	}
	if junit != "" {
		if err := runner.WriteJUnit(junit, results); err != nil {
			return fmt.Errorf("--junit: %w", err)
		}
	}
	var passed, failed, skipped int
	for _, r := range results {
		switch {
		case r.Skipped:
			skipped++
		case r.Passed():
			passed++
		default:
			failed++
		}
	}
	summary := fmt.Sprintf("%d passed, %d failed", passed, failed)
	if skipped > 0 {
		summary += fmt.Sprintf(", %d not selected", skipped)
	}
	summary += fmt.Sprintf(" in %.2fs (-p %d)", time.Since(began).Seconds(), opts.Parallel)
	if failed > 0 {
		fmt.Fprintf(cmd.OutOrStdout(), "FAIL: %s\n", summary)
		return &exitError{code: 1, err: fmt.Errorf("%d of %d scenarios failed", failed, passed+failed)}
	}
	if passed == 0 {
		return errors.New("no scenario selected (--run)")
	}
	fmt.Fprintf(cmd.OutOrStdout(), "ok: %s\n", summary)
	return nil
}
