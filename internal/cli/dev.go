package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap/zapcore"
	"go.yaml.in/yaml/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/devcluster"
	"github.com/opkit-dev/opkit/internal/devcluster/devnode"
	"github.com/opkit-dev/opkit/internal/engine"
	"github.com/opkit-dev/opkit/internal/sleep"
	"github.com/opkit-dev/opkit/internal/typegen"
)

func newDevCommand() *cobra.Command {
	o := devOptions{console: &consoleFlags{}, metrics: &metricsFlag{}, webhook: &webhookFlags{}, runsAPI: &runsAPIFlags{}}
	cmd := &cobra.Command{
		Use:   "dev DIR",
		Short: "Run the Operators in DIR on a local control plane with a dev node, until interrupted",
		Long: `Start a local control plane with a dev node, then run the engine for every
Operator in DIR/*.yaml (files holding other objects are skipped), in this
process, until Ctrl-C. --apply FILE applies manifests once the operators run,
and shows them with kubectl get.

Definitions are reloaded when DIR's files change: an operator added or
changed is (re)started, one whose file is gone is stopped. An edit with an
error is reported with its file and line, and the last valid version of that
file's operators keeps running. So does an edit whose CRD would break the
installed one's clients or lose data (a field removed, a type narrowed: see
opkit lint), unless --allow-breaking.

The files opkit generate types wrote beside a definition (in its directory,
or one below) are regenerated when it changes, as their first line says.

The plane is new and empty at each start, and removed at exit, unless
--data-dir DIR keeps it: etcd's data, the certificates and the kubeconfig
stay in DIR, and the next opkit dev --data-dir DIR starts the same cluster
again, its objects and Secrets there; the engine then finishes the runs the
stop (or a crash) interrupted. DIR can also be given to opkit cluster start
--data-dir, at another time: one plane runs on a directory at a time.

The dev node runs the commands of Pods that tolerate opkit.dev/dev-node as
processes of this machine: see docs/local-control-plane.md.

Prometheus metrics, /healthz and /readyz are served on --metrics-addr, on
loopback (another port when the default one is taken): see docs/metrics.md.

The run archive is served to the plane's API server as the aggregated API
runs.opkit.dev/v1alpha1 (--runs-api-addr; 0 for none): kubectl get runs -A,
kubectl get runs -w, kubectl get --raw .../runs/ID/log. Its APIService is
removed when opkit dev stops: see docs/dev.md.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.logFormat.validate(); err != nil {
				return err
			}
			o.dir, o.stdout, o.stderr = args[0], cmd.OutOrStdout(), o.logFormat.writer(cmd.ErrOrStderr())
			if err := o.console.validate(cmd); err != nil {
				return logged(o.stderr, err)
			}
			if err := o.metrics.validate(cmd, true); err != nil {
				return logged(o.stderr, err)
			}
			return logged(o.stderr, dev(cmd, o))
		},
	}
	cmd.Flags().StringArrayVar(&o.apply, "apply", nil, "a manifest to apply once the operators run; repeatable")
	cmd.Flags().StringVar(&o.dataDir, "data-dir", "", "keep the plane (etcd data, certificates, kubeconfig) in this directory across restarts (default: a temporary plane, removed at exit)")
	o.engine.register(cmd)
	archiveFlag(cmd, &o.archivePath)
	o.console.register(cmd, "console", "127.0.0.1:7380", "serve the web console on this address; '' for none")
	o.metrics.register(cmd)
	o.webhook.register(cmd, defaultWebhookAddr)
	o.runsAPI.register(cmd, "127.0.0.1:0", "127.0.0.1")
	o.logFormat.register(cmd)
	return cmd
}

// devOptions are opkit dev's arguments and flags.
type devOptions struct {
	// dir holds the Operators' files.
	dir string
	// apply are manifests applied once the operators run (--apply).
	apply []string
	// dataDir keeps the plane across restarts (--data-dir); "" for a
	// temporary one.
	dataDir string
	// archivePath is the run archive (--archive).
	archivePath string
	engine      engineFlags
	console     *consoleFlags
	metrics     *metricsFlag
	webhook     *webhookFlags
	runsAPI     *runsAPIFlags
	logFormat   logFormatFlag
	// stdout and stderr are the command's.
	stdout, stderr io.Writer
}

// operatorFiles lists DIR's YAML files whose first document is an Operator;
// skipped holds the others, each with why.
func operatorFiles(dir string) (out []string, skipped map[string]string, err error) {
	var files []string
	for _, pattern := range []string{"*.yaml", "*.yml"} {
		m, err := filepath.Glob(filepath.Join(dir, pattern))
		if err != nil {
			return nil, nil, err
		}
		files = append(files, m...)
	}
	slices.Sort(files)
	skipped = map[string]string{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, nil, err
		}
		var head fileHead
		// A file that is not YAML is left to the loader, which says why.
		if yaml.NewDecoder(bytes.NewReader(data)).Decode(&head) == nil &&
			(head.APIVersion != v1alpha1.SchemeGroupVersion.String() || head.Kind != v1alpha1.Kind) {
			if why := head.notAnOperator(f); why != "" {
				skipped[f] = why
			}
			continue
		}
		out = append(out, f)
	}
	return out, skipped, nil
}

func dev(cmd *cobra.Command, o devOptions) error {
	ctx := cmd.Context()
	dir, apply, archivePath, stdout, stderr := o.dir, o.apply, o.archivePath, o.stdout, o.stderr
	ef, cf, mf, wf := o.engine, o.console, o.metrics, o.webhook
	reload := &reloader{dir: dir, log: stderr, objects: map[string]bool{}}
	for _, f := range apply {
		if abs, err := filepath.Abs(f); err == nil {
			reload.objects[abs] = true
		}
	}
	files, err := reload.operatorFiles()
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return fmt.Errorf("%s holds no Operator (apiVersion: %s, kind: %s) in a .yaml file", dir, v1alpha1.SchemeGroupVersion, v1alpha1.Kind)
	}
	// Refuse invalid definitions before starting anything.
	if _, err := compileFiles(files); err != nil {
		return err
	}
	cl, err := devcluster.Start(ctx, devcluster.Options{DataDir: o.dataDir, DevNode: true, Log: stderr})
	if err != nil {
		return err
	}
	if o.dataDir != "" {
		fmt.Fprintf(stderr, "the plane is kept in %s: opkit dev --data-dir %s starts it again\n", cl.DataDir(), shellQuote(o.dataDir))
	}
	defer cl.Stop()
	// opkit kubectl finds this plane.
	if forget, err := announceDevPlane(defaultStateDir(), cl.KubeconfigPath()); err != nil {
		fmt.Fprintf(stderr, "opkit kubectl will not find this plane: %v\n", err)
	} else {
		defer forget()
	}
	bins, err := (&devcluster.Cache{}).Binaries()
	if err != nil {
		return err
	}
	// opkit dev says what it does itself: controller-runtime's own lines
	// are kept for errors.
	webhookOpts, err := wf.options(cmd, metav1.NamespaceDefault, true)
	if err != nil {
		return err
	}
	// The runs API, reached by the plane's API server through a Service
	// of type ExternalName to 127.0.0.1; operator-wide runs and the
	// deliveries are in the engine's namespace, default.
	runsAPIOpts, err := o.runsAPI.options(metav1.NamespaceDefault)
	if err != nil {
		return err
	}
	r, err := startEngineLogging(ctx, engine.Options{
		Config:  cl.RESTConfig(),
		Webhook: webhookOpts,
		RunsAPI: runsAPIOpts,
		// Job handlers' pods run on the dev node.
		JobTolerations: []corev1.Toleration{{Key: devnode.Taint, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
		RunFinished:    func(run archive.Run) { reportFailedRun(stderr, run, archivePath) },
		// The plane is opkit's own: no deletion passes unseen.
		AdmissionFinalizers: true,
		AllowBreaking:       ef.allowBreaking,
		MigrateStorage:      ef.migrateStorage,
		RunEvents:           ef.runEvents,
		RunWait:             ef.engineRunWait(),
	}, archivePath, cf, mf, stderr, zapcore.ErrorLevel)
	if err != nil {
		return err
	}
	reload.engine = r.Engine
	if err := reload.sync(ctx); err != nil {
		_ = r.Stop()
		return err
	}
	go reload.watch(ctx, time.Second)
	types := &typegen.Watcher{}
	go sleep.Poll(ctx, time.Second, func() { regenerateTypes(types, dir, stderr) })
	if err := applyDevObjects(ctx, bins.Path(devcluster.Kubectl), cl.KubeconfigPath(), apply, stdout, stderr); err != nil {
		_ = r.Stop()
		return err
	}
	devBanner(stderr, dir, archivePath, r, cl.KubeconfigPath())
	select {
	case <-ctx.Done():
		return r.Stop() // the engine said "stopping"
	case <-r.Done():
		err := r.Err()
		if err == nil {
			err = errors.New("the engine stopped")
		}
		return err
	case <-cl.Done():
		_ = r.Stop()
		return fmt.Errorf("the control plane stopped: %w", cl.Err())
	}
}

// regenerateTypes regenerates the files opkit generate types wrote beside
// the definitions in dir that changed since w last looked (typegen.Watcher).
func regenerateTypes(w *typegen.Watcher, dir string, log io.Writer) {
	files, _, err := operatorFiles(dir)
	if err != nil {
		return // the reload says why
	}
	written, err := w.Refresh(files...)
	for _, f := range written {
		fmt.Fprintf(log, "types: regenerated %s\n", f)
	}
	if err != nil {
		fmt.Fprintf(log, "types: %v\n", err)
	}
}

// applyDevObjects applies each of files to the plane of kubeconfig with
// kubectl, and shows what the operators made of each once it is Ready.
func applyDevObjects(ctx context.Context, kubectlPath, kubeconfig string, files []string, stdout, stderr io.Writer) error {
	kubectl := func(args ...string) error {
		c := exec.CommandContext(ctx, kubectlPath, args...)
		c.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
		c.Stdout, c.Stderr = stdout, stderr
		return c.Run()
	}
	for _, f := range files {
		if err := kubectl("apply", "-f", f); err != nil {
			return fmt.Errorf("applying %s: %w", f, err)
		}
		// Show what the operators made of it once it is Ready (or after 60s).
		_ = kubectl("wait", "--for=condition=Ready", "--timeout=60s", "-f", f)
		_ = kubectl("get", "-f", f)
	}
	return nil
}

// devBanner tells what opkit dev runs, and how to look at it.
func devBanner(stderr io.Writer, dir, archivePath string, r *runningEngine, kubeconfig string) {
	fmt.Fprintf(stderr, "\nopkit dev is running; definitions in %s are reloaded when they change.\n", dir)
	if url := r.ConsoleURL(); url != "" {
		fmt.Fprintf(stderr, "The console: %s\n", url)
	}
	if url := r.MetricsURL(); url != "" {
		fmt.Fprintf(stderr, "Metrics: %s (and /healthz, /readyz)\n", url)
	}
	fmt.Fprintf(stderr, "In another shell:\n  export KUBECONFIG=%s\n  opkit runs --archive %s   # the handler runs\n", shellQuote(kubeconfig), shellQuote(archive.RedactDSN(archivePath)))
	if r.Engine.RunsAPIAddr() != "" {
		fmt.Fprintf(stderr, "  kubectl get runs -A   # the same, through the API server (runs.opkit.dev)\n")
	}
	fmt.Fprintf(stderr, "Stop it with Ctrl-C.\n")
}

// reportFailedRun prints one line for a run that failed or gave up, with
// the commands that show its log and, once its cause is fixed, retry it.
func reportFailedRun(w io.Writer, run archive.Run, archivePath string) {
	object := run.Name
	if run.Namespace != "" {
		object = run.Namespace + "/" + run.Name
	}
	archiveArg := ""
	if archivePath != defaultArchivePath() {
		archiveArg = " --archive " + shellQuote(archive.RedactDSN(archivePath))
	}
	msg := run.Error
	if len(msg) > 200 {
		msg = msg[:200] + "…"
	}
	admission := run.Trigger == v1alpha1.OnValidate || run.Trigger == v1alpha1.OnMutate
	switch {
	case admission && run.Outcome == archive.Denied:
		fmt.Fprintf(w, "%s %s: handler %s denied a request (%s): %s\n  its log: opkit logs %s%s\n",
			run.Operator, object, run.Handler, run.Trigger, msg, run.ID, archiveArg)
	case admission && run.Outcome == archive.Failed:
		fmt.Fprintf(w, "%s %s: admission handler %s gave no answer (%s): %s\n  its log: opkit logs %s%s\n",
			run.Operator, object, run.Handler, run.Trigger, msg, run.ID, archiveArg)
	case run.Outcome == archive.Failed:
		fmt.Fprintf(w, "%s %s: handler %s failed (%s, attempt %d; retried in %s): %s\n  its log: opkit logs %s%s\n",
			run.Operator, object, run.Handler, run.Trigger, run.Attempt, time.Until(run.NextRetryAt).Round(time.Second), msg, run.ID, archiveArg)
	case run.Outcome == archive.GaveUp:
		fmt.Fprintf(w, "%s %s: handler %s gave up (%s, attempt %d): %s\n  its log: opkit logs %s%s; once fixed: opkit retry %s%s\n",
			run.Operator, object, run.Handler, run.Trigger, run.Attempt, msg, run.ID, archiveArg, object, archiveArg)
	}
}
