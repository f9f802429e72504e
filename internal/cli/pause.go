package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/definition"
)

func newPauseCommand() *cobra.Command {
	return pauseCommand(true)
}

func newResumeCommand() *cobra.Command {
	return pauseCommand(false)
}

// pauseCommand is opkit pause (pause true) or opkit resume.
func pauseCommand(pause bool) *cobra.Command {
	var archivePath, kubeconfig, operator, reason string
	var all bool
	verb, done := pauseWords(pause)
	cmd := &cobra.Command{
		Use: verb + " NAMESPACE/NAME [--operator OP] [--reason TEXT] | " + verb + " --operator OP --all [--reason TEXT]",
		Short: map[bool]string{
			true:  "Pause an object's handlers: none starts until it is resumed",
			false: "Resume a paused object's handlers: what came due meanwhile runs",
		}[pause],
		Long: map[bool]string{
			true: `Pause the handlers of a custom resource, as the console's Pause does: a run
in flight finishes and is recorded, but no handler starts (create, update,
delete, resume or schedule) until the object is resumed (opkit resume).
Its children are still kept converged, and its Paused condition says so.

The pause is the annotation ` + v1alpha1.PauseAnnotation + `, whose value says who paused
(the Kubernetes user this command runs as) and why (--reason). The engine
records the pause, with both, in the run archive (opkit runs --object
NAMESPACE/NAME shows it, handler ` + v1alpha1.PauseHandler + `) and as an Event on the
object. Pausing needs patch on the object (Kubernetes RBAC).

The object's kind is read from its Operator in the cluster (--operator), or
else found from its runs in the archive.

With --all, the whole operator --operator is paused: the annotation is set
on its Operator, and no handler of any of its objects starts, objects
created while it is paused included, nor any of its operator-wide
schedules' slots (opkit schedule run is refused too). Each object is
recorded paused, naming the operator's pause, and its Paused condition
says so. The operator is not restarted. This needs its Operator object in
the cluster, which the engine watches: an operator run from a file (opkit
run -f, opkit dev) has none. Pausing needs patch on the Operator.`,
			false: `Resume the handlers of a paused custom resource, as the console's Resume
does: what came due while it was paused runs now.

The annotation ` + v1alpha1.PauseAnnotation + ` is removed, and ` + v1alpha1.ResumedAnnotation + ` says who
resumed (the Kubernetes user this command runs as) and why (--reason); the
engine records the resume, with both, in the run archive and as an Event
on the object, then removes it. Resuming needs patch on the object
(Kubernetes RBAC).

The object's kind is read from its Operator in the cluster (--operator), or
else found from its runs in the archive.

With --all, the whole operator --operator is resumed (opkit pause --all):
every object's handlers run what came due while it was paused, and each
object is recorded resumed. An object paused on its own stays paused.`,
		}[pause],
		Example: map[bool]string{
			true: `  opkit pause team-a/web --operator deploys --reason "the registry is down"
  opkit pause --operator deploys --all --reason "database migration until 10:00"`,
			false: `  opkit resume team-a/web --operator deploys
  opkit resume --operator deploys --all --reason "migration done"`,
		}[pause],
		Args: func(cmd *cobra.Command, args []string) error {
			switch {
			case all && len(args) > 0:
				return fmt.Errorf("--all %ss every object of --operator: give no object (%s)", verb, args[0])
			case all && operator == "":
				return fmt.Errorf("--all %ss a whole operator: name it with --operator", verb)
			case !all && len(args) != 1:
				return fmt.Errorf("want one object, NAMESPACE/NAME, or --operator OP --all for a whole operator")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if all {
				return pauseOperator(cmd.Context(), cmd, kubeconfig, operator, reason, pause)
			}
			return pauseObject(cmd, pauseRequest{archivePath: archivePath, kubeconfig: kubeconfig, operator: operator, reason: reason, pause: pause}, args[0])
		},
	}
	runSourceFlags(cmd, &archivePath, &kubeconfig)
	cmd.Flags().StringVar(&operator, "operator", "", "the object's operator: its kind is read from the Operator in the cluster")
	cmd.Flags().StringVar(&reason, "reason", "", "why, in your words: recorded with who "+done)
	cmd.Flags().BoolVar(&all, "all", false, verb+" every object of --operator, and its schedules, through its Operator")
	return cmd
}

// pauseWords are the verb of opkit pause (or resume) and its past.
func pauseWords(pause bool) (verb, done string) {
	if pause {
		return "pause", "paused"
	}
	return "resume", "resumed"
}

// pauseRequest is what opkit pause or resume of one object was asked.
type pauseRequest struct {
	archivePath, kubeconfig, operator, reason string
	pause                                     bool
}

// pauseObject pauses or resumes the object arg, NAMESPACE/NAME (NAME for a
// cluster-scoped one), by its annotation.
func pauseObject(cmd *cobra.Command, req pauseRequest, arg string) error {
	ctx, out := cmd.Context(), cmd.OutOrStdout()
	verb, done := pauseWords(req.pause)
	ns, name := splitObjectRef(arg)
	if name == "" {
		return fmt.Errorf("%q names no object: want NAMESPACE/NAME, or NAME for a cluster-scoped one", arg)
	}
	cfg, c, err := kubeClient(req.kubeconfig)
	if err != nil {
		return err
	}
	gvk, err := pausedKind(cmd, c, req.archivePath, req.kubeconfig, req.operator, ns, name, arg)
	if err != nil {
		return err
	}
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(gvk)
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("%s %s does not exist: nothing to %s", gvk.Kind, arg, verb)
		}
		return fmt.Errorf("reading %s %s: %w", gvk.Kind, arg, err)
	}
	current, paused := obj.GetAnnotations()[v1alpha1.PauseAnnotation]
	switch {
	case req.pause && paused:
		return fmt.Errorf("%s %s is already paused (%s): nothing was written", gvk.Kind, arg, describePause(v1alpha1.ReadRequest(current)))
	case !req.pause && !paused:
		return fmt.Errorf("%s %s is not paused: nothing to resume", gvk.Kind, arg)
	}
	by, err := requester(ctx, cmd.ErrOrStderr(), cfg, req.kubeconfig)
	if err != nil {
		return err
	}
	p := v1alpha1.Pause{By: by, Reason: req.reason, At: time.Now().UTC().Format(time.RFC3339)}
	annotations := map[string]any{v1alpha1.PauseAnnotation: p.Value()}
	if !req.pause {
		annotations = map[string]any{v1alpha1.PauseAnnotation: nil, v1alpha1.ResumedAnnotation: p.Value()}
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
	if err := c.Patch(ctx, obj, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("%s %s %s: %w", verb, gvk.Kind, arg, err)
	}
	fmt.Fprintf(out, "%s %s: handlers %s by %s%s; the engine records it (opkit runs --object %s)\n", gvk.Kind, arg, done, by, reasonSuffix(req.reason), arg)
	return nil
}

// pauseOperator pauses (pause true) or resumes the whole operator name,
// through the annotations of its Operator in the cluster.
func pauseOperator(ctx context.Context, cmd *cobra.Command, kubeconfig, name, reason string, pause bool) error {
	cfg, c, err := kubeClient(kubeconfig)
	if err != nil {
		return err
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(v1alpha1.SchemeGroupVersion.WithKind(v1alpha1.Kind))
	if err := c.Get(ctx, client.ObjectKey{Name: name}, u); err != nil {
		if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
			return fmt.Errorf("there is no Operator %s in the cluster (kubectl get operators): a whole operator is paused through its Operator object, "+
				"so an operator run from a file (opkit run -f, opkit dev) cannot be; pause its objects one by one (opkit pause NAMESPACE/NAME --operator %s), "+
				"or stop it", name, name)
		}
		return fmt.Errorf("reading the Operator %s: %w", name, err)
	}
	current, paused := u.GetAnnotations()[v1alpha1.PauseAnnotation]
	switch {
	case pause && paused:
		return fmt.Errorf("the operator %s is already paused (%s): nothing was written", name, describePause(v1alpha1.ReadRequest(current)))
	case !pause && !paused:
		return fmt.Errorf("the operator %s is not paused as a whole: nothing to resume (an object paused on its own is resumed with opkit resume NAMESPACE/NAME --operator %s)", name, name)
	}
	by, err := requester(ctx, cmd.ErrOrStderr(), cfg, kubeconfig)
	if err != nil {
		return err
	}
	p := v1alpha1.Pause{By: by, Reason: reason, At: time.Now().UTC().Format(time.RFC3339)}
	annotations, done := map[string]any{v1alpha1.PauseAnnotation: p.Value()}, "paused"
	if !pause {
		annotations, done = map[string]any{v1alpha1.PauseAnnotation: nil, v1alpha1.ResumedAnnotation: p.Value()}, "resumed"
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
	if err := c.Patch(ctx, u, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("%s the Operator %s: %w", strings.TrimSuffix(done, "d"), name, err)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "operator %s: handlers of every object %s by %s%s; the engine records it for each (opkit runs --operator %s --handler %s)\n",
		name, done, by, reasonSuffix(reason), name, v1alpha1.PauseHandler)
	return nil
}

// pausedKind is the kind of the object opkit pause or resume names: that
// of the custom resources of the Operator operator in the cluster, when
// one is named; else the kind of the object's runs in the archive.
func pausedKind(cmd *cobra.Command, c client.Client, archivePath, kubeconfig, operator, ns, name, arg string) (schema.GroupVersionKind, error) {
	ctx := cmd.Context()
	if operator == "" {
		gvk, _, err := objectKind(cmd, archivePath, kubeconfig, archive.Query{Namespace: ns, Name: name}, arg,
			"name its operator with --operator, whose Operator in the cluster says its kind")
		switch {
		case err != nil:
			return gvk, err
		case gvk.Group == v1alpha1.Group && gvk.Kind == v1alpha1.Kind:
			return gvk, fmt.Errorf("%s is an operator-wide schedule: it has no object to pause", arg)
		}
		return gvk, nil
	}
	op, err := getOperator(ctx, c, operator)
	if err != nil {
		if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
			// An operator run from a file has no Operator object: its
			// object's runs in the archive say its kind.
			gvk, _, aerr := objectKind(cmd, archivePath, kubeconfig, archive.Query{Namespace: ns, Name: name, Operator: operator}, arg,
				"there is no Operator "+operator+" in the cluster either (kubectl get operators)")
			return gvk, aerr
		}
		return schema.GroupVersionKind{}, fmt.Errorf("reading the Operator %s: %w", operator, err)
	}
	d, err := definition.Compile(definition.FromCluster(op))
	if err != nil {
		return schema.GroupVersionKind{}, fmt.Errorf("the Operator %s is not valid (%w): its kind cannot be read from it", operator, err)
	}
	if !d.Owns() {
		return schema.GroupVersionKind{}, errors.New("the operator " + operator + " owns no custom resource (it " + d.What() +
			"): opkit never writes to what it does not own, so its objects cannot be paused")
	}
	return d.GVK, nil
}

// describePause says who paused and why, for people.
func describePause(p v1alpha1.Pause) string {
	if p.By == "" {
		return "by someone unknown: the annotation " + v1alpha1.PauseAnnotation + " names nobody"
	}
	s := "by " + p.By
	if p.At != "" {
		s += " at " + p.At
	}
	return s + reasonSuffix(p.Reason)
}

// reasonSuffix is ": reason", or "" for none.
func reasonSuffix(reason string) string {
	if reason == "" {
		return ""
	}
	return ": " + reason
}
