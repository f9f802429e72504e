package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/internal/compat"
	"github.com/opkit-dev/opkit/internal/definition"
)

// opkit lint's exit codes, for CI.
const (
	// lintBreaking: a breaking change was found.
	lintBreaking = 1
	// lintUnusable: the files do not load, the command is misused, or the
	// cluster could not be read: nothing was compared.
	lintUnusable = 2
)

func newLintCommand() *cobra.Command {
	var against, kubeconfig string
	var againstCluster bool
	cmd := &cobra.Command{
		Use:   "lint FILE... [--against FILE | --against-cluster]",
		Short: "Check definitions, and what their CRDs would break against a previous file or the cluster",
		Long: `Check each Operator definition in FILEs as opkit run would (every error with
its file and line), then, with --against or --against-cluster, compare the
CRD each one builds with the one it replaces: the same Operator in the
previous file, or the CRD installed in the cluster (by its name; a CRD not
installed yet has nothing to compare). Each change that breaks clients or
loses data is printed as FILE:LINE: FIELD: breaking: REASON, each risky one
as ... warning: ...; see docs/versions.md for the list and why.

Exit codes, for CI: 0 nothing breaking (warnings may be printed), 1 breaking
changes found, 2 the files do not load, the command is misused or the
cluster could not be read. opkit run and opkit dev refuse a breaking change
to an installed CRD unless --allow-breaking.`,
		Example: `  opkit lint operator.yaml
  git show main:operator.yaml > /tmp/previous.yaml
  opkit lint operator.yaml --against /tmp/previous.yaml
  opkit lint operator.yaml --against-cluster --kubeconfig ~/.kube/config`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return &exitError{code: lintUnusable, err: errors.New("lint: name at least one definition file: opkit lint FILE... [--against FILE | --against-cluster]")}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, files []string) error {
			switch {
			case against != "" && againstCluster:
				return &exitError{code: lintUnusable, err: errors.New("lint: --against and --against-cluster: choose one")}
			case kubeconfig != "" && !againstCluster:
				return &exitError{code: lintUnusable, err: errors.New("lint: --kubeconfig is read only with --against-cluster")}
			}
			return lint(cmd.Context(), cmd.OutOrStdout(), files, against, againstCluster, kubeconfig)
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return &exitError{code: lintUnusable, err: err}
	})
	cmd.Flags().StringVar(&against, "against", "", "compare with the Operators of this file (the previous version of FILE)")
	cmd.Flags().BoolVar(&againstCluster, "against-cluster", false, "compare with the CRDs installed in the cluster of $KUBECONFIG (or --kubeconfig)")
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "with --against-cluster: kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
	return cmd
}

// lint loads files and compares each definition's CRD with its previous
// one, printing one line per finding and a summary to w.
func lint(ctx context.Context, w io.Writer, files []string, against string, againstCluster bool, kubeconfig string) error {
	defs, err := compileFiles(files)
	if err != nil {
		return &exitError{code: lintUnusable, err: err}
	}
	printWarnings(w, defs...)
	var previous func(d *definition.Definition) (*apiextensionsv1.CustomResourceDefinition, string, error)
	var versus string
	switch {
	case against != "":
		if previous, err = previousInFile(against); err != nil {
			return &exitError{code: lintUnusable, err: err}
		}
		versus = "against " + against
	case againstCluster:
		if previous, err = previousInCluster(ctx, kubeconfig); err != nil {
			return &exitError{code: lintUnusable, err: err}
		}
		versus = "against the cluster"
	default:
		fmt.Fprintf(w, "%s: no errors (compare with --against FILE or --against-cluster to find breaking changes)\n", plural(len(defs), "definition loads", "definitions load"))
		return nil
	}
	var breaking, warnings int
	for _, d := range defs {
		if !d.Owns() {
			fmt.Fprintf(w, "operator %s: no custom resource (%s): nothing to compare\n", d.Operator.Name, d.What())
			continue
		}
		old, missing, err := previous(d)
		if err != nil {
			return &exitError{code: lintUnusable, err: err}
		}
		if old == nil {
			fmt.Fprintf(w, "operator %s: %s: nothing to compare\n", d.Operator.Name, missing)
			continue
		}
		for _, f := range compat.Compare(old, d.CRD()) {
			fmt.Fprintln(w, f.At(d.Source, d.Line(f.DefinitionField)))
			if f.Severity == compat.Breaking {
				breaking++
			} else {
				warnings++
			}
		}
	}
	summary := fmt.Sprintf("%s, %s in %s %s", plural(breaking, "breaking change", "breaking changes"), plural(warnings, "warning", "warnings"),
		plural(len(defs), "definition", "definitions"), versus)
	if breaking > 0 {
		return &exitError{code: lintBreaking, err: errors.New(summary + ": opkit run and opkit dev refuse them unless --allow-breaking")}
	}
	fmt.Fprintln(w, summary)
	return nil
}

// previousInFile loads the Operators of file and finds the one each
// definition replaces: the Operator of its name, else the one with its
// CRD.
func previousInFile(file string) (func(*definition.Definition) (*apiextensionsv1.CustomResourceDefinition, string, error), error) {
	olds, err := definition.CompileFiles(file)
	if err != nil {
		return nil, fmt.Errorf("--against %s does not load:\n%w", file, err)
	}
	return func(d *definition.Definition) (*apiextensionsv1.CustomResourceDefinition, string, error) {
		crdName := d.CRD().Name
		for _, byName := range []bool{true, false} {
			for _, o := range olds {
				if !o.Owns() {
					continue
				}
				if byName && o.Operator.Name == d.Operator.Name || !byName && o.CRD().Name == crdName {
					return o.CRD(), "", nil
				}
			}
		}
		return nil, fmt.Sprintf("%s defines neither operator %s nor CRD %s", file, d.Operator.Name, crdName), nil
	}, nil
}

// previousInCluster finds the CRD each definition replaces in the cluster:
// the CRD of its name, else one that opkit installed for its operator under
// another name (its group or plural changed).
func previousInCluster(ctx context.Context, kubeconfig string) (func(*definition.Definition) (*apiextensionsv1.CustomResourceDefinition, string, error), error) {
	cfg, err := loadKubeconfig(kubeconfig)
	if err != nil {
		return nil, err
	}
	c, err := newClient(cfg, apiextensionsv1.AddToScheme)
	if err != nil {
		return nil, err
	}
	return func(d *definition.Definition) (*apiextensionsv1.CustomResourceDefinition, string, error) {
		name := d.CRD().Name
		crd := &apiextensionsv1.CustomResourceDefinition{}
		err := c.Get(ctx, client.ObjectKey{Name: name}, crd)
		switch {
		case err == nil:
			return crd, "", nil
		case !apierrors.IsNotFound(err):
			return nil, "", fmt.Errorf("reading CRD %s: %w", name, err)
		}
		list := &apiextensionsv1.CustomResourceDefinitionList{}
		if err := c.List(ctx, list, client.MatchingLabels{definition.OperatorLabel: d.Operator.Name}); err != nil {
			return nil, "", fmt.Errorf("listing the CRDs of operator %s: %w", d.Operator.Name, err)
		}
		if len(list.Items) == 1 {
			return &list.Items[0], "", nil
		}
		var names []string
		for _, other := range list.Items {
			names = append(names, other.Name)
		}
		if len(names) > 1 {
			return nil, fmt.Sprintf("CRD %s is not installed, and operator %s installed several others (%s)", name, d.Operator.Name, strings.Join(names, ", ")), nil
		}
		return nil, fmt.Sprintf("CRD %s is not installed yet", name), nil
	}, nil
}

// plural is "1 thing" or "n things".
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
