package cli

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/plan"
)

// opkit plan's exit codes, for CI: 0 nothing changes.
const (
	// planRefused: the definition is refused (a breaking CRD change), or
	// nothing could be planned (the files, the cluster, the command).
	planRefused = 1
	// planChanges: the plan changes something.
	planChanges = 2
)

func newPlanCommand() *cobra.Command {
	var file, against, kubeconfig, namespace, output string
	var concurrency int
	cmd := &cobra.Command{
		Use:   "plan -f NEW.yaml [--against OLD.yaml]",
		Short: "Show what a changed definition would do to the objects that exist, before it is applied",
		Long: `Plan each Operator of NEW.yaml against the cluster of $KUBECONFIG (or
--kubeconfig): the definition it replaces is the Operator of its name in
the cluster, or the one of its name in OLD.yaml (--against). For every
custom resource of the operator, it shows what the new definition changes:
each child as the API server would apply it (a server-side apply dry-run:
created, changed field by field, re-created, pruned), the handler runs it
causes and why, the status fields that change, and state machine effects.
The CRD compatibility check of opkit lint comes first: a breaking change
refuses the plan, as opkit run refuses to apply it. Nothing is written.

Exit codes, for CI: 0 nothing changes, 2 something changes, 1 the
definition is refused or nothing could be planned. See
docs/changing-operators.md.`,
		Example: `  opkit plan -f operator.yaml
  git show main:operator.yaml > /tmp/previous.yaml
  opkit plan -f operator.yaml --against /tmp/previous.yaml -n staging
  opkit plan -f operator.yaml -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case file == "":
				return &exitError{code: planRefused, err: errors.New("plan: name the new definition: opkit plan -f NEW.yaml")}
			case output != "text" && output != "json":
				return &exitError{code: planRefused, err: fmt.Errorf("plan: -o %q: choose text or json", output)}
			}
			return runPlan(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), planFlags{file: file, against: against, kubeconfig: kubeconfig, namespace: namespace, output: output, concurrency: concurrency})
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "the new definition (a file of Operators)")
	cmd.Flags().StringVar(&against, "against", "", "the definition it replaces, from this file (default: the Operator of its name in the cluster)")
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
	cmd.Flags().StringVarP(&namespace, "namespace", "n", "", "plan the objects of this namespace only (default: every namespace)")
	cmd.Flags().StringVarP(&output, "output", "o", "text", "text or json")
	cmd.Flags().IntVar(&concurrency, "concurrency", 32, "objects planned at once (each makes one dry-run at a time)")
	return cmd
}

type planFlags struct {
	file, against, kubeconfig, namespace, output string
	concurrency                                  int
}

// planOutput is opkit plan -o json: one plan per Operator of the file.
type planOutput struct {
	Plans []*plan.Plan `json:"plans"`
}

func runPlan(ctx context.Context, w, stderr io.Writer, f planFlags) error {
	news, err := compileFiles([]string{f.file})
	if err != nil {
		return &exitError{code: planRefused, err: err}
	}
	cfg, err := loadKubeconfig(f.kubeconfig)
	if err != nil {
		return &exitError{code: planRefused, err: err}
	}
	c, err := newClient(cfg, v1alpha1.AddToScheme)
	if err != nil {
		return &exitError{code: planRefused, err: err}
	}
	previous, err := previousDefinition(f.against, c)
	if err != nil {
		return &exitError{code: planRefused, err: err}
	}
	out := planOutput{Plans: []*plan.Plan{}}
	var refused []string
	changes := false
	for _, d := range news {
		old, op, err := previous(ctx, d)
		if err != nil {
			return &exitError{code: planRefused, err: err}
		}
		// The pause of the Operator read with the definition it replaces,
		// or, against a file, of the one in the cluster, if any.
		var paused *v1alpha1.Pause
		if op != nil {
			paused = pauseOf(op)
		} else if paused, err = operatorPause(ctx, c, d.Operator.Name); err != nil {
			// May not read Operators (a plan --against a file, by a user
			// of the custom resources), or the read failed: the plan
			// still stands, as it did before it read the pause.
			fmt.Fprintf(stderr, "note: %v: whether the whole operator is paused is not known; handler runs are planned as if it were not\n", err)
			paused = nil
		}
		p, err := plan.Run(ctx, plan.Options{Config: cfg, New: d, Old: old, Namespace: f.namespace, Concurrency: f.concurrency, Paused: paused})
		if err != nil {
			return &exitError{code: planRefused, err: fmt.Errorf("planning operator %s: %w", d.Operator.Name, err)}
		}
		out.Plans = append(out.Plans, p)
		if p.Refused != "" {
			refused = append(refused, fmt.Sprintf("operator %s: %s", p.Operator, p.Refused))
		}
		changes = changes || p.Summary.Changes() || p.Summary.Errors > 0
	}
	if f.output == "json" {
		if err := writeJSON(w, out); err != nil {
			return err
		}
	} else {
		for i, p := range out.Plans {
			if i > 0 {
				fmt.Fprintln(w)
			}
			p.WriteText(w)
		}
	}
	switch {
	case len(refused) > 0:
		return &exitError{code: planRefused, err: fmt.Errorf("plan refused: %s", refused[0])}
	case changes:
		return &exitError{code: planChanges, err: errors.New("the plan changes something"), said: true}
	}
	return nil
}

// operatorPause is the pause of the whole operator name, as its Operator
// in the cluster says (v1alpha1.PauseAnnotation): nil when it is not
// paused, or not in the cluster (a plan --against a file).
func operatorPause(ctx context.Context, c client.Client, name string) (*v1alpha1.Pause, error) {
	op := &v1alpha1.Operator{}
	err := c.Get(ctx, client.ObjectKey{Name: name}, op)
	switch {
	case apierrors.IsNotFound(err), meta.IsNoMatchError(err):
		return nil, nil // no Operator of that name, or none at all (opkit run -f)
	case err != nil:
		return nil, fmt.Errorf("reading Operator %s, whose pause holds its handlers: %w", name, err)
	}
	return pauseOf(op), nil
}

// pauseOf is the pause of the whole operator its Operator op says (nil
// for none).
func pauseOf(op *v1alpha1.Operator) *v1alpha1.Pause {
	value, paused := op.Annotations[v1alpha1.PauseAnnotation]
	if !paused {
		return nil
	}
	p := v1alpha1.ReadRequest(value)
	return &p
}

// previousDefinition finds the definition each new one replaces: the
// Operator of its name in file, or else in the cluster, which it returns
// too (read once: its pause and its definition are of one version).
func previousDefinition(file string, c client.Client) (func(context.Context, *definition.Definition) (*definition.Definition, *v1alpha1.Operator, error), error) {
	if file != "" {
		olds, err := definition.CompileFiles(file)
		if err != nil {
			return nil, fmt.Errorf("--against %s does not load:\n%w", file, err)
		}
		return func(_ context.Context, d *definition.Definition) (*definition.Definition, *v1alpha1.Operator, error) {
			for _, o := range olds {
				if o.Operator.Name == d.Operator.Name {
					return o, nil, nil
				}
			}
			return nil, nil, fmt.Errorf("--against %s has no Operator %s to plan against", file, d.Operator.Name)
		}, nil
	}
	return func(ctx context.Context, d *definition.Definition) (*definition.Definition, *v1alpha1.Operator, error) {
		op := &v1alpha1.Operator{}
		err := c.Get(ctx, client.ObjectKey{Name: d.Operator.Name}, op)
		switch {
		case apierrors.IsNotFound(err):
			return nil, nil, fmt.Errorf("operator %s is not in the cluster (kubectl get operators): name the definition it replaces with --against FILE", d.Operator.Name)
		case err != nil:
			return nil, nil, fmt.Errorf("reading Operator %s: %w", d.Operator.Name, err)
		}
		old, err := definition.Compile(definition.FromCluster(op))
		if err != nil {
			return nil, nil, fmt.Errorf("the Operator %s in the cluster does not compile: %w", d.Operator.Name, err)
		}
		return old, op, nil
	}, nil
}
