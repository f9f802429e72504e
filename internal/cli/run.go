package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	uberzap "go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/engine"
	"github.com/opkit-dev/opkit/internal/stack"
	"github.com/opkit-dev/opkit/internal/tracing"
)

func newRunCommand() *cobra.Command {
	f := &runFlags{}
	cf, mf, lf := &f.console, &f.metrics, &f.logFormat
	cmd := &cobra.Command{
		Use:   "run [-f FILE]...",
		Short: "Run the engine against the current kubeconfig, for the Operators in the cluster or in FILEs",
		Long: `Run the engine against the cluster of $KUBECONFIG (or --kubeconfig) until
interrupted.

Without -f, it installs the CRD of operators.opkit.dev and runs every Operator
object in the cluster, picking up each one added, changed or deleted; each
Operator's status says whether it runs or why not (kubectl get operators).
With --selector (-l), it runs only those whose labels match, so that engines
sharing a cluster each run their own: an Operator relabelled out of it stops
here as a deleted one does.

With -f, it runs the Operators defined in FILEs instead. Every definition is
checked first; any error, with its file and line, stops the command before it
touches the cluster.

A definition whose CRD would change the installed one in a way that breaks
its clients or loses data (a field removed, a type narrowed, a stored
version dropped: see opkit lint) is refused, naming each change, unless
--allow-breaking; an Operator of the cluster says so in its status
(reason BreakingChange) and its running version keeps running.

Handler runs are recorded in the archive (--archive): see opkit runs, or
serve the web console beside the engine with --console ADDR.

Prometheus metrics, /healthz and /readyz are served on --metrics-addr
(loopback by default; --metrics-addr :7381 for a scraper on another host):
see docs/metrics.md.

Admission handlers (on validate or mutate) and the conversion of versions are
served to the API server over HTTPS on --webhook-addr, reached at
--webhook-host (an engine outside the cluster) or through --webhook-service
(one in it): see docs/admission.md and docs/conversion.md.

Exec handlers that name an image (exec.image) run in runner Pods of that image
when --runners-addr serves the runner API they pull runs from (through
--runners-service); without it they run on the engine's host: see
docs/production.md.

With --runs-api-addr, the engine also serves its archive to the API server's
aggregation layer as runs.opkit.dev/v1alpha1, so that kubectl get runs,
kubectl get deliveries and kubectl get --raw .../runs/ID/log read it, as RBAC
allows each user: see docs/production.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := lf.validate(); err != nil {
				return err
			}
			log := lf.writer(cmd.ErrOrStderr())
			return logged(log, func() error {
				if err := cf.validate(cmd); err != nil {
					return err
				}
				cf.namespace = kubeconfigNamespace(f.kubeconfig)
				if err := mf.validate(cmd, false); err != nil {
					return err
				}
				var defs []*definition.Definition
				if len(f.files) > 0 {
					var err error
					if defs, err = compileFiles(f.files); err != nil {
						return err
					}
					printWarnings(log, defs...)
				}
				opts, err := f.options(cmd)
				if err != nil {
					return err
				}
				if len(f.files) == 0 {
					return watchClusterOperators(cmd.Context(), opts, f.archivePath, cf, mf, log)
				}
				r, err := startOperators(cmd.Context(), opts, f.archivePath, cf, mf, defs, log)
				if err != nil {
					return err
				}
				return r.Wait()
			}())
		},
	}
	f.register(cmd)
	return cmd
}

// runFlags are opkit run's flags.
type runFlags struct {
	files                                           []string
	kubeconfig, archivePath                         string
	admission, leaderElect                          bool
	engine                                          engineFlags
	leaseNamespace, leaseName, hooksSlice, selector string
	console                                         consoleFlags
	metrics                                         metricsFlag
	webhook                                         webhookFlags
	logFormat                                       logFormatFlag
	runners                                         runnersFlags
	runsAPI                                         runsAPIFlags
}

func (f *runFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringArrayVarP(&f.files, "file", "f", nil, "an Operator definition (YAML, several documents allowed); repeatable")
	cmd.Flags().StringVarP(&f.selector, "selector", "l", "", "run only the Operators of the cluster whose labels match this selector, as kubectl's -l (e.g. team=payments): engines that share a cluster each run their own (not with -f)")
	cmd.Flags().StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
	cmd.Flags().BoolVar(&f.leaderElect, "leader-elect", false, "run as one of several replicas, of which the holder of a Lease acts and the others stand by, taking over within seconds of its end (8s after a leader that died) (see docs/production.md)")
	cmd.Flags().StringVar(&f.leaseNamespace, "leader-elect-namespace", "", "the Lease's namespace (default: $POD_NAMESPACE, else the kubeconfig's namespace, else default)")
	cmd.Flags().StringVar(&f.leaseName, "leader-elect-lease", engine.DefaultLeaseName, "the Lease's name: replicas of one engine share it")
	cmd.Flags().StringVar(&f.hooksSlice, "hooks-endpointslice", "", "the EndpointSlice of the hooks Service, in $POD_NAMESPACE: the replica that acts writes its address ($POD_IP) there, so that webhook deliveries reach it and no standby (see docs/production.md)")
	cmd.Flags().BoolVar(&f.admission, "admission-finalizers", false, "have the API server add opkit's finalizer to each new object of an operator with delete handlers (a MutatingAdmissionPolicy; Kubernetes 1.36+): no deletion passes unseen, even while the engine is away")
	f.engine.register(cmd)
	archiveFlag(cmd, &f.archivePath)
	f.console.register(cmd, "console", "", "serve the web console on this address, e.g. 127.0.0.1:7380 (default: none)")
	f.metrics.register(cmd)
	f.webhook.register(cmd, "0")
	f.runners.register(cmd)
	f.runsAPI.register(cmd, "0", "")
	f.logFormat.register(cmd)
}

// options are the engine's options as the flags say, with the runner API
// served when they ask for it.
func (f *runFlags) options(cmd *cobra.Command) (engine.Options, error) {
	cfg, err := loadKubeconfig(f.kubeconfig)
	if err != nil {
		return engine.Options{}, err
	}
	opts := engine.Options{Config: cfg, AdmissionFinalizers: f.admission, AllowBreaking: f.engine.allowBreaking, MigrateStorage: f.engine.migrateStorage, RunEvents: f.engine.runEvents, RunWait: f.engine.engineRunWait()}
	if opts.OperatorSelector, err = operatorSelector(f.selector, len(f.files) > 0); err != nil {
		return engine.Options{}, err
	}
	if opts.Webhook, err = f.webhook.options(cmd, kubeconfigNamespace(f.kubeconfig), false); err != nil {
		return engine.Options{}, err
	}
	if opts.RunsAPI, err = f.runsAPI.options(kubeconfigNamespace(f.kubeconfig)); err != nil {
		return engine.Options{}, err
	}
	if err := f.runners.serve(cmd.Context(), cfg, kubeconfigNamespace(f.kubeconfig), &opts); err != nil {
		return engine.Options{}, err
	}
	if f.leaderElect {
		ns := f.leaseNamespace
		if ns == "" {
			ns = kubeconfigNamespace(f.kubeconfig)
		}
		opts.LeaderElection = &engine.LeaderElection{Namespace: ns, Name: f.leaseName}
	}
	if f.hooksSlice != "" {
		ip := os.Getenv("POD_IP")
		if ip == "" {
			return engine.Options{}, errors.New("--hooks-endpointslice: the engine writes its Pod's address there, and $POD_IP does not give it (set it from the downward API's status.podIP)")
		}
		opts.HooksEndpoint = &engine.HooksEndpoint{
			Namespace: kubeconfigNamespace(f.kubeconfig), Name: f.hooksSlice,
			IP: ip, Pod: os.Getenv("POD_NAME"), Node: os.Getenv("NODE_NAME"),
		}
	}
	return opts, nil
}

// operatorSelector parses --selector: nil when it is empty.
func operatorSelector(s string, withFiles bool) (labels.Selector, error) {
	if s == "" {
		return nil, nil
	}
	if withFiles {
		return nil, errors.New("--selector chooses among the Operators of the cluster; with -f, the files say which operators run")
	}
	sel, err := labels.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("--selector %q: %w", s, err)
	}
	if sel.Empty() {
		return nil, nil
	}
	return sel, nil
}

// engineFlags are the flags of opkit run and opkit dev that say how the
// engine applies a definition's CRD.
type engineFlags struct {
	allowBreaking, migrateStorage, runEvents bool
	runWait                                  time.Duration
}

func (f *engineFlags) register(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&f.allowBreaking, "allow-breaking", false, "apply a definition even when its CRD breaks the installed one's clients or loses data (see opkit lint --against-cluster)")
	cmd.Flags().BoolVar(&f.runEvents, "run-events", false, "post a HandlerStarted and a HandlerSucceeded Event for every handler run; without it a run's Events are its failures (HandlerFailed, HandlerGaveUp) and those its result asks for, and a success is in the run archive and status.opkit.lastRun")
	cmd.Flags().DurationVar(&f.runWait, "run-wait", engine.DefaultRunWait, "how long an object's reconcile waits for a handler run it starts, so that a run that ends in time is recorded by it (a custom resource's with its one status write); 0 never waits")
	cmd.Flags().BoolVar(&f.migrateStorage, "migrate-storage", false, "when an operator's CRD has objects stored at an older version (status.storedVersions), rewrite them at the storage version in the background, as opkit migrate does (see docs/migration.md)")
}

// engineRunWait is --run-wait as engine.Options.RunWait says it: 0 there
// is the default, never waiting is negative.
func (f *engineFlags) engineRunWait() time.Duration {
	if f.runWait <= 0 {
		return -1
	}
	return f.runWait
}

// kubeconfigNamespace is the namespace of a Lease not named: the Pod's
// ($POD_NAMESPACE, from the downward API), else the kubeconfig's current
// context's, else default.
func kubeconfigNamespace(kubeconfig string) string {
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	ns, _, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).Namespace()
	if err != nil || ns == "" {
		return "default"
	}
	return ns
}

// defaultMetricsAddr is --metrics-addr's default, unless $OPKIT_METRICS_ADDR
// sets another: loopback, as the console's, beside its port 7380.
const defaultMetricsAddr = "127.0.0.1:7381"

// defaultHooksAddr is --hooks-addr's default, unless $OPKIT_HOOKS_ADDR sets
// another: loopback, beside the metrics' port.
const defaultHooksAddr = "127.0.0.1:7382"

// metricsFlag is --metrics-addr and --hooks-addr, of run and dev: the
// engine's own listeners.
type metricsFlag struct {
	addr string
	// hooks is where webhook deliveries are received, once an operator
	// with a source runs.
	hooks string
	// anyPort: the address is dev's default, not the user's; when its
	// port is taken (another opkit dev), another is chosen.
	anyPort bool
}

func (f *metricsFlag) register(cmd *cobra.Command) {
	addr := defaultMetricsAddr
	if env := os.Getenv("OPKIT_METRICS_ADDR"); env != "" {
		addr = env
	}
	cmd.Flags().StringVar(&f.addr, "metrics-addr", addr, "serve Prometheus /metrics, /healthz and /readyz on this address; 0 for none (env OPKIT_METRICS_ADDR)")
	hooks := defaultHooksAddr
	if env := os.Getenv("OPKIT_HOOKS_ADDR"); env != "" {
		hooks = env
	}
	cmd.Flags().StringVar(&f.hooks, "hooks-addr", hooks, "receive the webhook deliveries of the operators' sources (POST /hooks/OPERATOR/SOURCE) on this address, once an operator with a source runs; 0 for none (env OPKIT_HOOKS_ADDR)")
}

// validate checks the address before anything starts; movable says
// whether the default may move to another port when its own is taken.
func (f *metricsFlag) validate(cmd *cobra.Command, movable bool) error {
	f.anyPort = movable && !cmd.Flags().Changed("metrics-addr") && os.Getenv("OPKIT_METRICS_ADDR") == ""
	if f.hooks != "0" && f.hooks != "" {
		if _, _, err := net.SplitHostPort(f.hooks); err != nil {
			return fmt.Errorf("--hooks-addr %q: want HOST:PORT or :PORT, or 0 to receive none: %w", f.hooks, err)
		}
		if movable && !cmd.Flags().Changed("hooks-addr") && os.Getenv("OPKIT_HOOKS_ADDR") == "" {
			// dev's default: another port when another opkit dev has it.
			if ln, err := net.Listen("tcp", f.hooks); err != nil {
				host, _, _ := net.SplitHostPort(f.hooks)
				f.hooks = net.JoinHostPort(host, "0")
			} else {
				_ = ln.Close()
			}
		}
	}
	if f.addr == "0" || f.addr == "" {
		return nil
	}
	if _, _, err := net.SplitHostPort(f.addr); err != nil {
		return fmt.Errorf("--metrics-addr %q: want HOST:PORT or :PORT, or 0 to serve none: %w", f.addr, err)
	}
	return nil
}

// explain names the flag to change when err is the engine's listener
// failing to bind --metrics-addr.
func (f *metricsFlag) explain(err error) error {
	if opErr, ok := errors.AsType[*net.OpError](err); ok && opErr.Op == "listen" {
		return fmt.Errorf("--metrics-addr %s: %w (choose another address with --metrics-addr, or 0 to serve none)", f.addr, err)
	}
	return err
}

// compileFiles loads and compiles every definition, reporting all errors.
func compileFiles(files []string) ([]*definition.Definition, error) {
	defs, err := definition.CompileFiles(files...)
	if clash := definition.Clashes(defs); clash != nil {
		err = errors.Join(err, clash)
	}
	if err != nil {
		return nil, fmt.Errorf("invalid definitions:\n%w", err)
	}
	return defs, nil
}

// printWarnings prints each definition's warnings, one a line.
func printWarnings(w io.Writer, defs ...*definition.Definition) {
	for _, d := range defs {
		for _, warning := range d.Warnings {
			fmt.Fprintf(w, "warning: %v\n", warning)
		}
	}
}

// kubeconfigLoader reads the kubeconfig at path, or $KUBECONFIG's, or
// ~/.kube/config's.
func kubeconfigLoader(path string) clientcmd.ClientConfig {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = path
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil)
}

func loadKubeconfig(path string) (*rest.Config, error) {
	cfg, err := kubeconfigLoader(path).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("loading the kubeconfig: %w", err)
	}
	return cfg, nil
}

// watchClusterOperators runs the engine for the Operators in the cluster
// until ctx ends.
func watchClusterOperators(ctx context.Context, opts engine.Options, archivePath string, cf *consoleFlags, mf *metricsFlag, log io.Writer) error {
	r, err := startEngine(ctx, opts, archivePath, cf, mf, log)
	if err != nil {
		return err
	}
	fmt.Fprintln(log, "running the Operators of the cluster (kubectl get operators)")
	if err := r.Engine.WatchOperators(ctx); err != nil && ctx.Err() == nil {
		_ = r.Stop()
		return err
	}
	return r.Stop()
}

// runningEngine is the stack of opkit run and opkit dev: an engine
// running in the background, with its archive and console.
type runningEngine struct {
	*stack.Stack
	// quiet leaves controller-runtime's lines below errors out, for a
	// stop that the caller explains itself.
	quiet func()
	// flush exports the spans left once the engine stopped (tracing.Setup).
	flush func(context.Context) error
	log   io.Writer
}

// Stop stops the engine, then exports the spans it left (for at most
// 5s: a tracing backend out of reach does not hold the exit).
func (r *runningEngine) Stop() error {
	err := r.Stack.Stop()
	r.flushSpans()
	return err
}

// Wait waits for the engine to stop, then exports the spans it left.
func (r *runningEngine) Wait() error {
	err := r.Stack.Wait()
	r.flushSpans()
	return err
}

func (r *runningEngine) flushSpans() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.flush(ctx); err != nil {
		fmt.Fprintf(r.log, "tracing: the last spans were not exported: %v\n", err)
	}
}

// startEngine runs an engine on cfg, recording runs in the archive at
// archivePath, with controller-runtime logging to log, its console as cf
// says and its metrics as mf says.
func startEngine(ctx context.Context, opts engine.Options, archivePath string, cf *consoleFlags, mf *metricsFlag, log io.Writer) (*runningEngine, error) {
	r, err := startEngineLogging(ctx, opts, archivePath, cf, mf, log, zapcore.InfoLevel)
	if err == nil && r.ConsoleURL() != "" {
		fmt.Fprintf(log, "console: %s\n", r.ConsoleURL())
	}
	if err == nil && r.MetricsURL() != "" {
		fmt.Fprintf(log, "metrics: %s (and /healthz, /readyz)\n", r.MetricsURL())
	}
	if err == nil && r.Engine.RunsAPIAddr() != "" {
		fmt.Fprintf(log, "runs API: https://%s, registered as the APIService %s (kubectl get runs -A)\n", r.Engine.RunsAPIAddr(), engine.RunsAPIName)
	}
	return r, err
}

// routine are the messages, below errors, of what client-go recovers
// from by itself: a watch that ends with an error is started again, and
// an API server out of reach is told by the engine's own notices. Since
// client-go v0.37 its reflectors write them through controller-runtime's
// logger, with the file and line they come from.
var routine = []string{"Warning: watch ended with error"}

// routineFilter leaves the routine messages out of a log.
type routineFilter struct{ zapcore.Core }

func (f routineFilter) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if e.Level < zapcore.ErrorLevel && slices.ContainsFunc(routine, func(m string) bool { return strings.HasPrefix(e.Message, m) }) {
		return ce
	}
	return f.Core.Check(e, ce)
}

func (f routineFilter) With(fields []zapcore.Field) zapcore.Core {
	return routineFilter{f.Core.With(fields)}
}

// engineLogger is the logger of controller-runtime and client-go in opkit
// run and opkit dev, writing to log in its format (newLogger), at lvl.
// Errors the engine expects (an API server away) are not crashes: no
// stack traces, and a line repeated within 10s is written twice at most.
// What changed is said by the engine's notices.
func engineLogger(log io.Writer, lvl uberzap.AtomicLevel) logr.Logger {
	return newLogger(log, zap.Level(lvl),
		zap.StacktraceLevel(zapcore.DPanicLevel),
		zap.RawZapOpts(uberzap.WrapCore(func(c zapcore.Core) zapcore.Core {
			return zapcore.NewSamplerWithOptions(routineFilter{c}, 10*time.Second, 2, 0)
		})))
}

// startEngineLogging is startEngine with options, and controller-runtime's
// log lines below level left out.
func startEngineLogging(ctx context.Context, opts engine.Options, archivePath string, cf *consoleFlags, mf *metricsFlag, log io.Writer, level zapcore.Level) (*runningEngine, error) {
	if archivePath == "" {
		return nil, errors.New("--archive is empty: name a SQLite file, or a PostgreSQL database as postgres://USER@HOST/DB")
	}
	// Stopping is said in one line, not in controller-runtime's own.
	lvl := uberzap.NewAtomicLevelAt(level)
	logger := engineLogger(log, lvl)
	ctrllog.SetLogger(logger)
	klogTo.Store(&logger) // client-go's own lines, "Unable to write event"...
	context.AfterFunc(ctx, func() {
		lvl.SetLevel(zapcore.ErrorLevel)
		fmt.Fprintln(log, "stopping")
	})
	opts.Retention = defaultRetention
	opts.MetricsAddr, opts.HooksAddr = mf.addr, mf.hooks
	flush, tc, err := tracing.Setup(ctx, version())
	if err != nil {
		return nil, err
	}
	if tc.On {
		fmt.Fprintf(log, "tracing: exporting spans with OTLP over %s (OTEL_* environment)\n", tc.Protocol)
	}
	s, err := stack.Start(ctx, stack.Options{
		Engine:         opts,
		Archive:        archivePath,
		Log:            func(line string) { fmt.Fprintln(log, line) },
		Console:        cf.console(),
		MetricsAnyPort: mf.anyPort,
	})
	if err != nil {
		_ = flush(context.Background())
		return nil, mf.explain(cf.explain(err))
	}
	return &runningEngine{Stack: s, quiet: func() { lvl.SetLevel(zapcore.ErrorLevel) }, flush: flush, log: log}, nil
}

// startOperators runs an engine on cfg and applies defs. If one cannot be
// applied, the engine is stopped.
func startOperators(ctx context.Context, opts engine.Options, archivePath string, cf *consoleFlags, mf *metricsFlag, defs []*definition.Definition, log io.Writer) (*runningEngine, error) {
	r, err := startEngine(ctx, opts, archivePath, cf, mf, log)
	if err != nil {
		return nil, err
	}
	for _, d := range defs {
		if err := r.Engine.Apply(ctx, d); err != nil {
			if ctx.Err() != nil {
				// Interrupted while starting (Ctrl-C, SIGTERM): the engine
				// stops as it would once started, and the exit is clean.
				return r, nil
			}
			r.quiet() // err says why it stops
			_ = r.Stop()
			return nil, err
		}
		fmt.Fprintf(log, "operator %s: running (%s, %s)\n", d.Operator.Name, d.What(), d.Source)
		printSources(log, r.Engine, d)
	}
	return r, nil
}

// printSources prints where each webhook source of a running operator
// receives its deliveries, and where its admission handlers and its
// conversion are served.
func printSources(w io.Writer, e *engine.Engine, d *definition.Definition) {
	for _, s := range d.Sources {
		switch s.Kind {
		case definition.KindGitHubPoll:
			what := "repository " + s.GitHubPoll.Repository
			if s.GitHubPoll.Organization != "" {
				what = "organization " + s.GitHubPoll.Organization
			}
			fmt.Fprintf(w, "  source %s (githubPoll): polls the events of %s every %s at %s\n", s.Name, what, s.PollInterval, s.GitHubPoll.APIURL)
		case definition.KindNATS:
			fmt.Fprintf(w, "  source %s (nats): consumes stream %s as %s at %s\n", s.Name, s.NATS.Stream, s.NATS.Consumer, s.NATS.URL)
		case definition.KindKafka:
			fmt.Fprintf(w, "  source %s (kafka): consumes %s in group %s at %s\n", s.Name, strings.Join(s.Kafka.Topics, ", "), s.Kafka.Group, strings.Join(s.Kafka.Brokers, ","))
		case definition.KindCloudEvents:
			fmt.Fprintf(w, "  source %s (CloudEvents, %s): POST http://%s/hooks/%s/%s\n", s.Name, s.Verify, e.HooksAddr(), d.Operator.Name, s.Name)
		default:
			fmt.Fprintf(w, "  source %s (%s): POST http://%s/hooks/%s/%s\n", s.Name, s.Verify, e.HooksAddr(), d.Operator.Name, s.Name)
		}
	}
	for _, h := range d.Admission {
		fmt.Fprintf(w, "  admission handler %s (%s %s): served on https://%s/%s/%s/%s\n", h.Name, h.Admission.Trigger(),
			strings.Join(h.Admission.Operations, ", "), e.WebhookAddr(), h.Admission.Trigger(), d.Operator.Name, h.Name)
	}
	if d.Conversion != nil {
		fmt.Fprintf(w, "  conversion (to and from %s, the storage version): served on https://%s%s\n", d.StorageVersion, e.WebhookAddr(), definition.ConversionPath(d.Operator.Name))
	}
	if r := d.Rollout; r != nil {
		steps := make([]string, len(r.Steps))
		for i, s := range r.Steps {
			steps[i] = s.String()
		}
		fmt.Fprintf(w, "  rollout: definition %s; a change reaches the objects in steps of %s, %s of health apart (opkit rollout status %s)\n",
			d.Hash(), strings.Join(steps, ", "), r.Settle, d.Operator.Name)
	}
}
