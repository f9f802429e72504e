package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/request"
)

func newScheduleCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "schedule",
		Short: "Act on an operator-wide schedule",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newScheduleRunCommand())
	return cmd
}

// runNowPoll is how often opkit schedule run reads the Operator's Events
// for the engine's answer.
const runNowPoll = 500 * time.Millisecond

// scheduleRunLong is opkit schedule run's help.
const scheduleRunLong = `Run a handler of an operator-wide schedule (an Operator with neither
spec.resource nor spec.watch, docs/operators.md#operator-wide-schedules) now,
once, besides its slots: the import that failed at 8:00, run again now that
its cause is fixed. The schedule's slots are not changed.

The request is the annotation ` + v1alpha1.RunNowAnnotationPrefix + `HANDLER on the Operator, saying
who asked (the Kubernetes user this command runs as), why (--reason) and
when, with a request id. The engine that leads runs it, with the trigger
` + v1alpha1.TriggerManual + ` and the key OPERATOR/schedule/HANDLER/manual/REQUEST (an engine
stopped during the run runs it again with that key, never twice after it
succeeded), retried by the handler's policy; the archive records the run
with who asked as its actor and, as the first line of its log, why. The
engine answers on the Operator with an Event (RanNow, RunNowFailed, or
RunNowRefused with why) and removes the annotation.

opkit schedule run waits up to --wait for that answer and prints it: the
run's id and outcome; it exits 1 when the run failed or was refused.

The request needs the Operator object in the cluster, which the engine
watches: an operator run from a file (opkit run -f) cannot be asked this
way. Asking needs patch on the Operator (Kubernetes RBAC). What cannot
apply is refused before anything is written: an unknown operator or
handler, an operator that is not an operator-wide schedule, a request of
the handler still pending.`

func newScheduleRunCommand() *cobra.Command {
	var kubeconfig, reason string
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "run OPERATOR HANDLER [--reason TEXT]",
		Short: "Run an operator-wide schedule's handler now, once (the slot that failed at 8:00, now)",
		Long:  scheduleRunLong,
		Example: `  opkit schedule run images import --reason "the registry is back"
  opkit runs --operator images --trigger manual     # the runs asked for, with who asked`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, out := cmd.Context(), cmd.OutOrStdout()
			name, handler := args[0], args[1]
			cfg, c, err := kubeClient(kubeconfig)
			if err != nil {
				return err
			}
			op, d, err := scheduleOperator(ctx, c, name)
			if err != nil {
				return err
			}
			var h *definition.Handler
			for _, x := range d.Handlers {
				if x.Name == handler {
					h = x
				}
			}
			switch {
			case !d.Calendar():
				return fmt.Errorf("the operator %s %s: it is not an operator-wide schedule, whose handlers run for no object; "+
					"to run a handler of an object again, use opkit retry NAMESPACE/NAME", name, d.What())
			case h == nil:
				return fmt.Errorf("the operator %s has no handler %s: its handlers are %s", name, handler, strings.Join(handlerList(d), ", "))
			}
			if value, paused := op.GetAnnotations()[v1alpha1.PauseAnnotation]; paused {
				return fmt.Errorf("the operator %s is paused (%s): nothing runs until it is resumed (opkit resume --operator %s --all); nothing was written",
					name, describePause(v1alpha1.ReadRequest(value)), name)
			}
			annotation := v1alpha1.RunNowAnnotation(handler)
			if pending, ok := op.GetAnnotations()[annotation]; ok {
				p, _ := v1alpha1.ReadRunNow(pending)
				return fmt.Errorf("a run now of %s %s is already asked for (by %s at %s, request %s) and not answered yet: nothing was written; "+
					"its answer is an Event on the Operator (kubectl describe operator %s), or remove the request (kubectl annotate operator %s %s-) and ask again",
					name, handler, cmp.Or(p.By, "someone"), cmp.Or(p.At, "?"), cmp.Or(p.ID, "?"), name, name, annotation)
			}
			if ready := meta.FindStatusCondition(op.Status.Conditions, v1alpha1.ConditionReady); ready == nil || ready.Status != metav1.ConditionTrue {
				fmt.Fprintf(cmd.ErrOrStderr(), "note: the Operator %s is not Ready (kubectl get operator %s): the request waits until its engine runs it\n", name, name)
			}
			by, err := requester(ctx, cmd.ErrOrStderr(), cfg, kubeconfig)
			if err != nil {
				return err
			}
			now := time.Now()
			req := v1alpha1.RunNow{ID: archive.NewID(now), By: by, Reason: reason, At: now.UTC().Format(time.RFC3339)}
			// Over the resourceVersion read: a request written meanwhile is
			// not overwritten.
			patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
				"resourceVersion": op.GetResourceVersion(), "annotations": map[string]any{annotation: req.Value()},
			}})
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(v1alpha1.SchemeGroupVersion.WithKind(v1alpha1.Kind))
			u.SetName(name)
			if err := c.Patch(ctx, u, client.RawPatch(types.MergePatchType, patch)); err != nil {
				if apierrors.IsConflict(err) {
					return fmt.Errorf("the Operator %s changed while the request was written (another request?): nothing was written; run opkit schedule run again", name)
				}
				return fmt.Errorf("writing the request on the Operator %s: %w", name, err)
			}
			fmt.Fprintf(out, "operator %s: handler %s asked to run now by %s%s (request %s)\n", name, handler, by, reasonSuffix(reason), req.ID)
			return awaitRunNow(ctx, out, c, op, handler, req, wait)
		},
	}
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
	cmd.Flags().StringVar(&reason, "reason", "", "why, in your words: recorded with the run, and who asked")
	cmd.Flags().DurationVar(&wait, "wait", 2*time.Minute, "how long to wait for the run's end; 0: do not wait")
	return cmd
}

// scheduleOperator reads the Operator name from the cluster and compiles
// it; an operator with no Operator object is refused, saying why.
func scheduleOperator(ctx context.Context, c client.Client, name string) (*v1alpha1.Operator, *definition.Definition, error) {
	op, err := getOperator(ctx, c, name)
	if err != nil {
		if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
			return nil, nil, fmt.Errorf("there is no Operator %s in the cluster (kubectl get operators): a run now is asked of the engine through the Operator object, "+
				"so an operator run from a file (opkit run -f) cannot be asked this way; apply its Operator to the cluster (kubectl apply -f FILE) and run it from there", name)
		}
		return nil, nil, fmt.Errorf("reading the Operator %s: %w", name, err)
	}
	d, err := definition.Compile(definition.FromCluster(op))
	if err != nil {
		return nil, nil, fmt.Errorf("the Operator %s is not valid (%w): its handlers cannot be read from it", name, err)
	}
	return op, d, nil
}

// handlerList names d's handlers.
func handlerList(d *definition.Definition) []string {
	names := make([]string, len(d.Handlers))
	for i, h := range d.Handlers {
		names[i] = h.Name
	}
	return names
}

// awaitRunNow waits, up to wait, for the engine's answer to req on op (an
// Event naming the request) and prints it; an error when the run failed
// or the request was refused.
func awaitRunNow(ctx context.Context, out io.Writer, c client.Client, op *v1alpha1.Operator, handler string, req v1alpha1.RunNow, wait time.Duration) error {
	follow := fmt.Sprintf("follow it with: opkit runs --operator %s --handler %s --trigger %s, and kubectl describe operator %s", op.Name, handler, v1alpha1.TriggerManual, op.Name)
	if wait <= 0 {
		fmt.Fprintln(out, "written: the engine runs it when it reads it; "+follow)
		return nil
	}
	deadline := time.Now().Add(wait)
	mark := "(request " + req.ID + ","
	for {
		var list corev1.EventList
		// Kubernetes keeps the Events of a cluster-scoped object in default.
		err := c.List(ctx, &list, client.InNamespace(metav1.NamespaceDefault), client.MatchingFields{"involvedObject.uid": string(op.UID)})
		if err == nil {
			for _, ev := range list.Items {
				if !strings.Contains(ev.Message, mark) {
					continue
				}
				switch ev.Reason {
				case request.RunNow.Taken:
					fmt.Fprintln(out, ev.Message)
					return nil
				case request.RunNow.Failed, request.RunNow.Refused:
					return errors.New(ev.Message)
				}
			}
		}
		if !time.Now().Add(runNowPoll).Before(deadline) {
			why := ""
			if err != nil {
				why = fmt.Sprintf(" (its Events cannot be read: %v)", err)
			}
			fmt.Fprintf(out, "within %s, the engine has not answered%s: the run may still go on (retries, a Job); %s\n", wait, why, follow)
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(runNowPoll):
		}
	}
}
