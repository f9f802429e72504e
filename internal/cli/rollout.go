package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/compare"
	"github.com/opkit-dev/opkit/internal/definition"
)

// rolloutAnswer is how long continue and undo wait for the engine to
// answer.
const rolloutAnswer = 15 * time.Second

func newRolloutCommand() *cobra.Command {
	var kubeconfig, namespace string
	cmd := &cobra.Command{
		Use:   "rollout status|continue|undo OPERATOR",
		Short: "Follow a staged rollout of a changed definition, continue it past a pause, or undo it",
		Long: `An operator with spec.rollout moves its objects to a changed definition in
steps, pausing when a moved object goes Degraded or Stalled or a handler of
it fails (docs/changing-operators.md). The engine keeps where the rollout
is in the Rollout object of the operator (kubectl get rollouts.opkit.dev),
across its restarts.

  status    the step, the objects on each definition, and why it paused
  continue  take the next step of a paused rollout (the objects unhealthy
            now pause it no more until they are healthy again), or roll an
            undone definition out again from its first step
  undo      move every object back to the previous definition; the new one
            is not rolled out again until the definition changes, or
            continue

continue and undo write the request, with who asks (the Kubernetes user
this command runs as), to the Rollout's spec; the engine acting for the
operator answers it within a second or two, and this command waits for the
answer. They need patch on rollouts.opkit.dev.`,
		Example: `  opkit rollout status website
  opkit rollout continue website
  opkit rollout undo website
  opkit rollout status website -n team-a   # an engine of one namespace (opkit run --namespace team-a)`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			verb, operator := args[0], args[1]
			ctx, out := cmd.Context(), cmd.OutOrStdout()
			_, c, err := kubeClient(kubeconfig)
			if err != nil {
				return err
			}
			switch verb {
			case "status":
				u, err := findRollout(ctx, c, operator, namespace)
				if err != nil {
					return err
				}
				if err := printRollout(ctx, out, c, u); err != nil {
					return err
				}
				// A paused rollout waits for a person: a script that
				// checks the status sees it by the exit code.
				if phase, _, _ := unstructured.NestedString(u.Object, "status", "phase"); phase == string(v1alpha1.RolloutPaused) {
					return fmt.Errorf("operator %s: the rollout is Paused: it waits for opkit rollout continue or undo", operator)
				}
				return nil
			case "continue", "undo":
				return requestRollout(ctx, cmd, kubeconfig, c, operator, namespace, verb)
			}
			return fmt.Errorf("rollout %s: choose status, continue or undo", verb)
		},
	}
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
	cmd.Flags().StringVarP(&namespace, "namespace", "n", "", "the namespace of an engine of one namespace (opkit run --namespace), whose Rollout is OPERATOR.NAMESPACE")
	return cmd
}

// findRollout reads the Rollout of operator: OPERATOR, OPERATOR.NAMESPACE
// with namespace, or the one OPERATOR.* when there is one alone.
func findRollout(ctx context.Context, c client.Client, operator, namespace string) (*unstructured.Unstructured, error) {
	name := operator
	if namespace != "" {
		name += "." + namespace
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(v1alpha1.SchemeGroupVersion.WithKind(v1alpha1.RolloutKind))
	err := c.Get(ctx, client.ObjectKey{Name: name}, u)
	switch {
	case err == nil:
		return u, nil
	case meta.IsNoMatchError(err):
		return nil, fmt.Errorf("the cluster has no rollouts (rollouts.opkit.dev is not installed): an engine installs it when it first runs an operator with spec.rollout")
	case !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("reading the Rollout %s: %w", name, err)
	}
	if namespace == "" {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(v1alpha1.SchemeGroupVersion.WithKind(v1alpha1.RolloutKind + "List"))
		if err := c.List(ctx, list); err == nil {
			var found []*unstructured.Unstructured
			for i := range list.Items {
				if strings.HasPrefix(list.Items[i].GetName(), operator+".") {
					found = append(found, &list.Items[i])
				}
			}
			if len(found) == 1 {
				return found[0], nil
			}
			if len(found) > 1 {
				var names []string
				for _, f := range found {
					names = append(names, strings.TrimPrefix(f.GetName(), operator+"."))
				}
				return nil, fmt.Errorf("operator %s has a rollout in each of the namespaces %s (engines of one namespace): choose one with -n", operator, strings.Join(names, ", "))
			}
		}
	}
	return nil, fmt.Errorf("operator %s has no Rollout %s: an engine makes one when it runs the operator with spec.rollout", operator, name)
}

// printRollout prints a Rollout.
func printRollout(ctx context.Context, out io.Writer, c client.Client, u *unstructured.Unstructured) error {
	r, err := v1alpha1.ReadRollout(u)
	if err != nil {
		return err
	}
	st := r.Status
	var op v1alpha1.Operator
	if err := json.Unmarshal([]byte(st.To.Operator), &op); err != nil {
		return fmt.Errorf("the Rollout %s: its definition is not an Operator: %w", u.GetName(), err)
	}
	fmt.Fprintf(out, "operator %s: %s", op.Name, st.Phase)
	if st.Phase == v1alpha1.RolloutProgressing || st.Phase == v1alpha1.RolloutPaused {
		fmt.Fprintf(out, " at step %d of %d", st.Step, st.Steps)
	}
	fmt.Fprintln(out)
	if st.From.Hash != st.To.Hash {
		fmt.Fprintf(out, "  from definition %s to %s\n", st.From.Hash, st.To.Hash)
	} else {
		fmt.Fprintf(out, "  definition %s\n", st.To.Hash)
	}
	if st.Reason != "" {
		fmt.Fprintf(out, "  %s\n", st.Reason)
	}
	switch st.Phase {
	case v1alpha1.RolloutPaused:
		fmt.Fprintf(out, "  next: opkit rollout continue %s (take the next step), or opkit rollout undo %s (every object back on %s)\n", op.Name, op.Name, st.From.Hash)
	case v1alpha1.RolloutRolledBack:
		fmt.Fprintf(out, "  next: change the definition, or opkit rollout continue %s to roll %s out again\n", op.Name, st.To.Hash)
	}
	if r.Spec.Request != "" {
		fmt.Fprintf(out, "  asked: %s by %s, not answered yet (is an engine running the operator?)\n", r.Spec.Request, r.Spec.RequestedBy)
	}
	d, err := definition.Compile(definition.FromCluster(&op))
	if err != nil || d.Rollout == nil || st.From.Hash == st.To.Hash {
		return nil
	}
	fmt.Fprintln(out, "  steps:")
	for i, s := range d.Rollout.Steps {
		mark := ""
		switch {
		case i < st.Step:
			mark = "  (taken)"
		case i == st.Step && st.Phase == v1alpha1.RolloutProgressing:
			mark = "  (next, once the moved objects have been healthy for " + d.Rollout.Settle.String() + ")"
		}
		fmt.Fprintf(out, "    %d. %s%s\n", i+1, s, mark)
	}
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(d.GVK.GroupVersion().WithKind(d.GVK.Kind + "List"))
	if err := c.List(ctx, list); err != nil {
		return fmt.Errorf("listing the %s objects: %w", d.GVK.Kind, err)
	}
	moved := map[string]bool{}
	for _, m := range st.Moved {
		moved[m] = true
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	switch others := len(list.Items) - len(st.Moved); {
	case others <= 0:
		fmt.Fprintf(out, "  objects: all %d on %s\n", len(list.Items), st.To.Hash)
	default:
		fmt.Fprintf(out, "  objects: %d of %d on %s, the other %d on %s\n", len(st.Moved), len(list.Items), st.To.Hash, others, st.From.Hash)
	}
	fmt.Fprintln(tw, "    OBJECT\tDEFINITION\tHEALTH")
	items := list.Items
	slices.SortFunc(items, func(a, b unstructured.Unstructured) int {
		return strings.Compare(objectRef(a.GetNamespace(), a.GetName()), objectRef(b.GetNamespace(), b.GetName()))
	})
	for _, o := range items {
		name := objectRef(o.GetNamespace(), o.GetName())
		on, _, _ := unstructured.NestedString(o.Object, "status", "opkit", "definition")
		want := st.From.Hash
		if moved[name] {
			want = st.To.Hash
		}
		if on != want {
			on = fmt.Sprintf("%s (moving to %s)", cmp.Or(on, "none"), want)
		}
		fmt.Fprintf(tw, "    %s\t%s\t%s\n", name, on, objectHealth(&o))
	}
	return tw.Flush()
}

// objectHealth says an object's conditions in a few words.
func objectHealth(o *unstructured.Unstructured) string {
	conds := compare.Conditions(o)
	for _, t := range []string{v1alpha1.ConditionDegraded, v1alpha1.ConditionStalled} {
		if c := meta.FindStatusCondition(conds, t); c != nil && c.Status == "True" {
			return t + ": " + oneLine(c.Message, 100)
		}
	}
	if c := meta.FindStatusCondition(conds, v1alpha1.ConditionReady); c != nil {
		if c.Status == "True" {
			return "Ready"
		}
		return "not Ready: " + oneLine(c.Message, 100)
	}
	return "not reconciled yet"
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		s = s[:n] + "..."
	}
	return s
}

// splitObjectRef is objectRef's inverse: the namespace and name of
// NAMESPACE/NAME, or of NAME alone (a cluster-scoped object).
func splitObjectRef(ref string) (ns, name string) {
	ns, name, ok := strings.Cut(ref, "/")
	if !ok {
		return "", ref
	}
	return ns, name
}

func objectRef(ns, name string) string {
	if ns == "" {
		return name
	}
	return ns + "/" + name
}

// requestRollout writes a person's continue or undo, and waits for the
// engine's answer.
func requestRollout(ctx context.Context, cmd *cobra.Command, kubeconfig string, c client.Client, operator, namespace, verb string) error {
	out := cmd.OutOrStdout()
	u, err := findRollout(ctx, c, operator, namespace)
	if err != nil {
		return err
	}
	r, err := v1alpha1.ReadRollout(u)
	if err != nil {
		return err
	}
	req := v1alpha1.RolloutContinue
	switch phase := r.Status.Phase; {
	case verb == "undo" && (phase == v1alpha1.RolloutComplete || phase == v1alpha1.RolloutRolledBack):
		return fmt.Errorf("operator %s: the rollout is %s: nothing to undo (%s)", operator, phase, r.Status.Reason)
	case verb == "undo":
		req = v1alpha1.RolloutUndo
	case phase != v1alpha1.RolloutPaused && phase != v1alpha1.RolloutRolledBack:
		return fmt.Errorf("operator %s: the rollout is %s, not paused nor undone: nothing to continue (%s)", operator, phase, r.Status.Reason)
	}
	cfg, _, err := kubeClient(kubeconfig)
	if err != nil {
		return err
	}
	by, err := requester(ctx, cmd.ErrOrStderr(), cfg, kubeconfig)
	if err != nil {
		return err
	}
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": u.GetResourceVersion()},
		"spec":     map[string]any{"request": req, "requestedBy": by},
	})
	if err != nil {
		return err
	}
	if err := c.Patch(ctx, u, client.RawPatch(types.MergePatchType, patch)); err != nil {
		if apierrors.IsConflict(err) {
			return fmt.Errorf("operator %s: the rollout changed while the request was written; look at it again (opkit rollout status %s)", operator, operator)
		}
		return fmt.Errorf("writing the request to the Rollout %s: %w", u.GetName(), err)
	}
	fmt.Fprintf(out, "operator %s: %s asked by %s\n", operator, req, by)
	deadline := time.Now().Add(rolloutAnswer)
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
		if err := c.Get(ctx, client.ObjectKey{Name: u.GetName()}, u); err != nil {
			continue
		}
		if r, err := v1alpha1.ReadRollout(u); err == nil && r.Spec.Request == "" {
			fmt.Fprintf(out, "operator %s: %s: %s\n", operator, r.Status.Phase, r.Status.Reason)
			return nil
		}
	}
	return fmt.Errorf("operator %s: no engine answered within %s: the request stays in the Rollout %s, and the engine that runs the operator answers it when it runs", operator, rolloutAnswer, u.GetName())
}
