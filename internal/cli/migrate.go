package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/migrate"
)

func newMigrateCommand() *cobra.Command {
	var kubeconfig string
	var qps float64
	var dryRun, anyCRD bool
	cmd := &cobra.Command{
		Use:   "migrate CRD|OPERATOR|KIND",
		Short: "Rewrite every stored object of a CRD at its storage version, then drop the older versions from its storedVersions",
		Long: `Rewrite every object of a custom resource, in every namespace, at its CRD's
storage version (a no-op update through the API server, which re-encodes
it), then set the CRD's status.storedVersions to the storage version alone,
so that an older version can be turned off and removed (docs/migration.md).

The CRD is named by its name (plural.group), by the operator that installed
it, or by its kind, plural, singular or short name. Only CRDs installed by
opkit are migrated unless --any is given.

Progress lines go to standard error, the summary to standard output: objects
rewritten, already current, gone and failed, and storedVersions before and
after. If any object fails, storedVersions is left as it was. An interrupted
migration (Ctrl-C) saves its progress on the CRD; run the command again to
resume it. Exit status: 0 when every object is stored at the storage version
(or nothing was to do), 1 otherwise.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if qps <= 0 {
				return fmt.Errorf("--qps %v: want a number of requests a second above 0", qps)
			}
			cfg, err := loadKubeconfig(kubeconfig)
			if err != nil {
				return err
			}
			name, err := findCRD(cmd.Context(), cfg, args[0], anyCRD)
			if err != nil {
				return withRights(err)
			}
			stderr := cmd.ErrOrStderr()
			rep, err := migrate.CRD(cmd.Context(), name, migrate.Options{
				Config: cfg, QPS: qps, DryRun: dryRun,
				Log: func(line string) { fmt.Fprintln(stderr, line) },
			})
			if rep != nil && rep.Storage != "" {
				for _, line := range rep.Lines() {
					fmt.Fprintln(cmd.OutOrStdout(), line)
				}
			}
			return withRights(err)
		},
	}
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
	cmd.Flags().Float64Var(&qps, "qps", migrate.DefaultQPS, "at most this many requests (lists and rewrites of objects) a second")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "count the objects and write nothing")
	cmd.Flags().BoolVar(&anyCRD, "any", false, "migrate a CRD that opkit did not install, too")
	return cmd
}

// withRights adds to a refusal for lack of rights what the command needs.
func withRights(err error) error {
	if err == nil || !apierrors.IsForbidden(err) {
		return err
	}
	return fmt.Errorf("%w\n(opkit migrate needs get and list of customresourcedefinitions, patch of the CRD and update of its status subresource, and list and update of its objects)", err)
}

// findCRD returns the name of the CRD that target names: a CRD's name,
// else the operator whose label the CRD carries, else the kind, plural,
// singular or a short name of exactly one CRD. A CRD opkit did not
// install is refused unless anyCRD.
func findCRD(ctx context.Context, cfg *rest.Config, target string, anyCRD bool) (string, error) {
	c, err := newClient(cfg, apiextensionsv1.AddToScheme)
	if err != nil {
		return "", err
	}
	if strings.Contains(target, "/") {
		return "", fmt.Errorf("%s: name the kind alone: a migration covers every namespace, as status.storedVersions is the CRD's", target)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	err = c.Get(ctx, client.ObjectKey{Name: target}, &crd)
	switch {
	case err == nil:
		return managed(&crd, anyCRD)
	case !apierrors.IsNotFound(err):
		return "", fmt.Errorf("reading CRD %s: %w", target, err)
	}
	var list apiextensionsv1.CustomResourceDefinitionList
	if err := c.List(ctx, &list); err != nil {
		return "", fmt.Errorf("listing CRDs to find %s: %w", target, err)
	}
	lower := strings.ToLower(target)
	var byOperator, byName []*apiextensionsv1.CustomResourceDefinition
	for i := range list.Items {
		crd := &list.Items[i]
		n := crd.Spec.Names
		if definition.OperatorName(crd) == target {
			byOperator = append(byOperator, crd)
		}
		if strings.ToLower(n.Kind) == lower || n.Plural == lower || n.Singular == lower || slices.Contains(n.ShortNames, lower) {
			byName = append(byName, crd)
		}
	}
	found := byOperator
	if len(found) == 0 {
		found = byName
	}
	switch len(found) {
	case 0:
		return "", fmt.Errorf("%s names no CRD: it is neither a CRD's name (plural.group), nor an operator that installed one, nor a kind (see kubectl get crds)", target)
	case 1:
		return managed(found[0], anyCRD)
	}
	var names []string
	for _, crd := range found {
		names = append(names, crd.Name)
	}
	return "", fmt.Errorf("%s names %d CRDs (%s): name one by plural.group", target, len(found), strings.Join(names, ", "))
}

// managed returns crd's name, or why it is refused.
func managed(crd *apiextensionsv1.CustomResourceDefinition, anyCRD bool) (string, error) {
	if definition.OperatorName(crd) == "" && !anyCRD {
		return "", fmt.Errorf("CRD %s was not installed by opkit (it has no label %s); a migration is safe for any CRD, but opkit touches others only when asked: add --any", crd.Name, definition.OperatorLabel)
	}
	return crd.Name, nil
}
