package cli

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/engine"
)

func newRunCommand() *cobra.Command {
	var files []string
	var kubeconfig string
	cmd := &cobra.Command{
		Use:   "run -f FILE...",
		Short: "Run the engine for the Operators in FILEs against the current kubeconfig",
		Long: `Run the engine for the Operators defined in FILEs, against the cluster of
$KUBECONFIG (or --kubeconfig), until interrupted. Every definition is checked
first; any error, with its file and line, stops the command before it
touches the cluster.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(files) == 0 {
				return errors.New("no definitions: give at least one -f FILE")
			}
			defs, err := compileFiles(files)
			if err != nil {
				return err
			}
			return runEngine(cmd, kubeconfig, defs, cmd.ErrOrStderr())
		},
	}
	cmd.Flags().StringArrayVarP(&files, "file", "f", nil, "an Operator definition (YAML, several documents allowed); repeatable")
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
	return cmd
}

// compileFiles loads and compiles every definition, reporting all errors.
func compileFiles(files []string) ([]*definition.Definition, error) {
	var defs []*definition.Definition
	var errs []error
	for _, f := range files {
		srcs, err := definition.LoadFile(f)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, src := range srcs {
			d, err := definition.Compile(src)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			defs = append(defs, d)
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("invalid definitions:\n%w", errors.Join(errs...))
	}
	return defs, nil
}

func runEngine(cmd *cobra.Command, kubeconfig string, defs []*definition.Definition, log io.Writer) error {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err != nil {
		return fmt.Errorf("loading the kubeconfig: %w", err)
	}
	r, err := startOperators(cmd.Context(), cfg, defs, log)
	if err != nil {
		return err
	}
	return <-r.done
}

// runningEngine is an engine running in the background.
type runningEngine struct {
	cancel context.CancelFunc
	done   chan error // receives Run's result once
}

// stop cancels the engine and waits for it.
func (r *runningEngine) stop() error {
	r.cancel()
	return <-r.done
}

// startOperators runs an engine on cfg, with controller-runtime logging to
// log, and applies defs. If one cannot be applied, the engine is stopped.
func startOperators(ctx context.Context, cfg *rest.Config, defs []*definition.Definition, log io.Writer) (*runningEngine, error) {
	ctrllog.SetLogger(zap.New(zap.WriteTo(log)))
	e, err := engine.New(engine.Options{Config: cfg})
	if err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	r := &runningEngine{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- e.Run(runCtx) }()
	for _, d := range defs {
		if err := e.Apply(ctx, d); err != nil {
			_ = r.stop()
			return nil, err
		}
		fmt.Fprintf(log, "operator %s: running (%s, %s)\n", d.Operator.Name, d.GVK.GroupKind(), d.Source)
	}
	return r, nil
}
