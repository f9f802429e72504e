package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/runsclient"
	"github.com/opkit-dev/opkit/internal/why"
)

func newWhyCommand() *cobra.Command {
	var archivePath, kubeconfig, kind, output string
	var since time.Duration
	cmd := &cobra.Command{
		Use:   "why NAMESPACE/NAME",
		Short: "Say what made an object what it is now",
		Long: `Say what made an object what it is now, newest first: each field
manager's last write to it (who, when, which fields and their values now),
the runs of the object (their trigger, the spec change that caused them,
what they wrote, who asked), the run that wrote it when a handler says so
(the annotation opkit.dev/run), and the deliveries behind runs on event and
behind a source's object (who sent them). A child points to its owner.

It reads the object from the kubeconfig's cluster and the runs from the
archive (or the cluster's runs API, as opkit runs does), never a tracing
backend. NAME alone is a cluster-scoped object. --kind names the object's
kind (Deployment, deployments.apps); without it, the kind of its runs, or,
for an object with none yet, the one kind of the cluster's operators (the
kinds they own or watch) with an object of that name.`,
		Example: `  opkit why default/hello --kind Printer
  opkit why default/packit-worker-stg --kind Deployment --since 1h
  opkit why default/hello -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ns, name := splitObjectRef(args[0])
			if name == "" || strings.Contains(name, "/") {
				return fmt.Errorf("%q: want NAMESPACE/NAME, or NAME for a cluster-scoped object", args[0])
			}
			if output != "table" && output != "json" {
				return fmt.Errorf("-o %q: want table or json", output)
			}
			var from time.Time
			if since > 0 {
				from = time.Now().Add(-since)
			}
			src, err := openRunSource(cmd, archivePath, kubeconfig)
			if err != nil {
				return err
			}
			defer func() { _ = src.Close() }()
			ref := why.Ref{Namespace: ns, Name: name}
			obj, gvk, readErr := readWhyObject(cmd.Context(), src, kubeconfig, ns, name, kind)
			switch {
			case gvk != nil:
				ref.Kind = gvk.Kind
			case kind != "" && !strings.Contains(kind, "."):
				ref.Kind = kind // the cluster out of reach: as given
			}
			var whySource why.Source = src
			if src.remote() {
				whySource = remoteWhySource{src}
			}
			chain, err := why.Explain(cmd.Context(), whySource, ref, obj, from)
			if err != nil {
				return err
			}
			if readErr != nil {
				chain.Notes = append(chain.Notes, "the object was not read: "+readErr.Error()+"; from the archive alone")
			}
			if output == "json" {
				return writeJSON(cmd.OutOrStdout(), chain)
			}
			printChain(cmd.OutOrStdout(), chain)
			return nil
		},
	}
	runSourceFlags(cmd, &archivePath, &kubeconfig)
	cmd.Flags().StringVar(&kind, "kind", "", "the object's kind, as written in manifests (Deployment) or as a resource (deployments.apps); default: the kind of its runs, or of the cluster's operators")
	cmd.Flags().DurationVar(&since, "since", 0, "only what happened within this long, e.g. 1h (0: everything kept)")
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table or json")
	return cmd
}

// remoteWhySource is the runs API as opkit why reads it: a delivery's
// record is kept to the archive (runsclient.ErrNotServed), and named as
// not shown.
type remoteWhySource struct{ *runSource }

func (s remoteWhySource) GetDelivery(ctx context.Context, id string) (*archive.Delivery, error) {
	d, err := s.runSource.GetDelivery(ctx, id)
	if runsclient.IsNotServed(err) {
		return nil, fmt.Errorf("%w: the runs API keeps a delivery's payload to the archive; opkit why --archive reads it", why.ErrWithheld)
	}
	return d, err
}

// readWhyObject reads the object explained from the kubeconfig's cluster:
// of kind, or else of the kind of its newest run. err says why it was
// not read (the object is then explained from the archive alone); gvk is
// its kind when known.
func readWhyObject(ctx context.Context, src *runSource, kubeconfig, ns, name, kind string) (*unstructured.Unstructured, *schema.GroupVersionKind, error) {
	cfg, err := loadKubeconfig(kubeconfig)
	if err != nil {
		return nil, nil, err
	}
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return nil, nil, err
	}
	var gvk schema.GroupVersionKind
	switch {
	case kind != "":
		res, group, _ := strings.Cut(strings.ToLower(kind), ".")
		gvk, err = c.RESTMapper().KindFor(schema.GroupVersionResource{Group: group, Resource: res})
		if err != nil {
			return nil, nil, fmt.Errorf("--kind %s: %w", kind, err)
		}
	default:
		page, err := src.List(ctx, archive.Query{Namespace: ns, NoNamespace: ns == "", Name: name, Limit: 1})
		if err != nil {
			return nil, nil, err
		}
		if len(page.Runs) > 0 {
			gvk = schema.FromAPIVersionAndKind(page.Runs[0].APIVersion, page.Runs[0].Kind)
			break
		}
		// No run yet (an object created and not handled, one whose
		// handlers are filtered out): the kinds the cluster's operators
		// own or watch, if one of them has an object of that name.
		found, err := operatorKindOf(ctx, cfg, ns, name)
		if err != nil {
			return nil, nil, fmt.Errorf("no run of it in the archive says its kind, and %w: name it with --kind", err)
		}
		gvk = found
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, u); err != nil {
		return nil, &gvk, err
	}
	return u, &gvk, nil
}

// printChain writes a chain as a table, newest first.
func printChain(w io.Writer, c *why.Chain) {
	fmt.Fprintf(w, "%s, newest first:\n", c.Object)
	if len(c.Entries) == 0 {
		fmt.Fprintln(w, "  nothing recorded")
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, e := range c.Entries {
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", e.At.Local().Format("2006-01-02 15:04:05"), e.Kind, e.Summary)
	}
	_ = tw.Flush()
	for _, n := range c.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	var logs []string
	for _, e := range c.Entries {
		if e.Run != nil {
			logs = append(logs, e.Run.ID)
		}
	}
	if len(logs) > 0 {
		fmt.Fprintf(w, "a run's log: opkit logs %s\n", logs[0])
	}
}

// operatorKindOf is the kind of the object ns/name among the kinds the
// cluster's Operators own or watch: the one kind of which such an object
// exists. An error says why none is (no Operators, no such object, more
// than one kind has one).
func operatorKindOf(ctx context.Context, cfg *rest.Config, ns, name string) (schema.GroupVersionKind, error) {
	c, err := newClient(cfg, v1alpha1.AddToScheme)
	if err != nil {
		return schema.GroupVersionKind{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var ops v1alpha1.OperatorList
	switch err := c.List(ctx, &ops); {
	case meta.IsNoMatchError(err):
		return schema.GroupVersionKind{}, errors.New("the cluster serves no Operators (opkit.dev) whose kinds it could be of")
	case err != nil:
		return schema.GroupVersionKind{}, fmt.Errorf("the cluster's Operators were not read (%w)", err)
	}
	var kinds []schema.GroupVersionKind
	for i := range ops.Items {
		d, err := definition.Compile(definition.FromCluster(&ops.Items[i]))
		if err != nil {
			continue // one that does not compile runs nothing
		}
		own := []schema.GroupVersionKind{d.GVK}
		if d.Watch != nil {
			own = append(own, d.Watch.GVK)
		}
		for _, gvk := range own {
			if !gvk.Empty() && !slices.Contains(kinds, gvk) {
				kinds = append(kinds, gvk)
			}
		}
	}
	var found []schema.GroupVersionKind
	var unread []error
	for _, gvk := range kinds {
		// Only the kinds of the object's scope: a cluster-scoped kind
		// has no object default/NAME, whatever its name.
		mapping, err := c.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			unread = append(unread, fmt.Errorf("%s: %w", gvk.GroupKind(), err))
			continue
		}
		if namespaced := mapping.Scope.Name() == meta.RESTScopeNameNamespace; namespaced != (ns != "") {
			continue
		}
		u := &metav1.PartialObjectMetadata{}
		u.SetGroupVersionKind(gvk)
		switch err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, u); {
		case err == nil:
			found = append(found, gvk)
		case !apierrors.IsNotFound(err):
			unread = append(unread, fmt.Errorf("%s: %w", gvk.GroupKind(), err))
		}
	}
	switch {
	case len(found) == 1 && len(unread) == 0:
		return found[0], nil
	case len(found) <= 1 && len(unread) > 0:
		// An object of a kind not read may be the one: no guess.
		return schema.GroupVersionKind{}, fmt.Errorf("the kinds of the cluster's operators were not all read (%w)", errors.Join(unread...))
	case len(found) == 0:
		return schema.GroupVersionKind{}, fmt.Errorf("no kind of the cluster's %d operators has an object %s", len(ops.Items), objectRef(ns, name))
	}
	names := make([]string, len(found))
	for i, gvk := range found {
		names[i] = gvk.GroupKind().String()
	}
	return schema.GroupVersionKind{}, fmt.Errorf("the operators' kinds %s each have an object %s", strings.Join(names, " and "), objectRef(ns, name))
}
