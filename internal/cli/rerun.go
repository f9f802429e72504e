package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
)

func newRerunCommand() *cobra.Command {
	var archivePath, kubeconfig, reason string
	var sameInput bool
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "rerun RUN [--same-input] [--reason TEXT]",
		Short: "Run a run's handler again for its object (after a fix, or to redo what it did)",
		Long: `Run the handler of an earlier run once more for that run's object (a
custom resource, or an object an Operator watches): with the object as it
is now, or with --same-input, the binding context the run got, as the
archive recorded it. The new run has the trigger rerun, the idempotency
key <the run's key>/rerun/<n>, and rerunOf, the run it repeats, in its
binding context and its record; who asked (the Kubernetes user this
command runs as) and --reason are recorded with it, and the run it
repeats lists it (opkit logs, the console). A re-run is one run: it is not
retried, and it changes none of the handler's records, so the object's own
triggers go on as before.

The request is written on the object as the annotation
` + v1alpha1.RerunAnnotation + `, over the resourceVersion read: who may patch the
object may ask (Kubernetes RBAC). The engine takes it once the object has
no run in flight (a paused object waits), removes it (an object it only
watches keeps it: the engine remembers it answered it) and answers with an
Event: RerunStarted, naming the new run, or RerunRefused, with why. opkit
rerun waits up to --wait for that answer and prints it; a refusal exits 1.

Refused before anything is written: a run still running, a run whose
object is gone (deleted, or another object of that name now), a handler no
longer in the Operator's definition, an admission call or a state
transition, and the runs of an operator-wide schedule or webhook delivery,
which have no object: run the slot again with opkit schedule run, the
delivery with opkit events redeliver.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, out := cmd.Context(), cmd.OutOrStdout()
			id := args[0]
			src, err := openRunSourceOf(cmd, id, archivePath, kubeconfig)
			if err != nil {
				return err
			}
			defer func() { _ = src.Close() }()
			run, err := getRun(ctx, src, id)
			if err != nil {
				return err
			}
			// The runs API does not serve a run's binding context: whether
			// it has one is the engine's to check then.
			if why := run.RerunRefusal(sameInput && !src.remote()); why != "" {
				return errors.New(why)
			}
			cfg, c, err := kubeClient(kubeconfig)
			if err != nil {
				return err
			}
			obj, err := rerunObject(ctx, c, run)
			if err != nil {
				return err
			}
			if why := handlerGone(ctx, c, run); why != "" {
				return errors.New(why)
			}
			if raw, ok := obj.GetAnnotations()[v1alpha1.RerunAnnotation]; ok && !rerunAnswered(ctx, c, obj, raw) {
				return fmt.Errorf("a re-run request is already on %s %s and not answered yet (%s); nothing was written: its Events say what became of it, or remove it (kubectl annotate %s %s%s %s-)",
					run.Kind, run.Object(), raw, strings.ToLower(run.Kind), run.Name, nsFlag(run.Namespace), v1alpha1.RerunAnnotation)
			}
			by, err := requester(ctx, cmd.ErrOrStderr(), cfg, kubeconfig)
			if err != nil {
				return err
			}
			now := time.Now().UTC()
			req := v1alpha1.Rerun{Request: archive.NewID(now), Run: run.ID, SameInput: sameInput, Reason: reason, By: by, At: now.Format(time.RFC3339)}
			if err := c.Patch(ctx, obj, client.RawPatch(types.MergePatchType, req.Patch(obj.GetResourceVersion()))); err != nil {
				return fmt.Errorf("writing the re-run request on %s %s: %w (if it changed since it was read, run opkit rerun again)", run.Kind, run.Object(), err)
			}
			fmt.Fprintf(out, "%s %s: %s asked to run handler %s again (run %s, request %s)\n", run.Kind, run.Object(), by, run.Handler, run.ID, req.Request)
			return awaitRerun(ctx, c, obj, req.Request, wait, out)
		},
	}
	runSourceFlags(cmd, &archivePath, &kubeconfig)
	cmd.Flags().BoolVar(&sameInput, "same-input", false, "give the handler the binding context the run got, as recorded, instead of the object as it is now")
	cmd.Flags().StringVar(&reason, "reason", "", "why, in your words: recorded with the re-run")
	cmd.Flags().DurationVar(&wait, "wait", 10*time.Second, "how long to wait for the engine's answer; 0: do not wait")
	return cmd
}

// rerunAnswered reports whether the re-run request raw, on obj, has its
// answer among obj's Events (RerunStarted or RerunRefused). The engine
// removes the request from a custom resource once read, and leaves it on
// an object it only watches, which opkit never writes: there a request
// answered is no longer waiting, and a new one replaces it.
func rerunAnswered(ctx context.Context, c client.Client, obj *unstructured.Unstructured, raw string) bool {
	var req v1alpha1.Rerun
	if json.Unmarshal([]byte(raw), &req) != nil || req.Request == "" {
		return false
	}
	for _, e := range objectEvents(ctx, c, obj) {
		if (e.Reason == v1alpha1.EventRerunStarted || e.Reason == v1alpha1.EventRerunRefused) && strings.Contains(e.Message, "request "+req.Request+" ") {
			return true
		}
	}
	return false
}

// rerunObject reads the object run r was for; gone (deleted, or another
// object of that name now) is an error that says so.
func rerunObject(ctx context.Context, c client.Client, r *archive.Run) (*unstructured.Unstructured, error) {
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(schema.FromAPIVersionAndKind(r.APIVersion, r.Kind))
	err := c.Get(ctx, client.ObjectKey{Namespace: r.Namespace, Name: r.Name}, obj)
	switch {
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("%s %s, the object of run %s, is gone: there is nothing to run handler %s for again", r.Kind, r.Object(), r.ID, r.Handler)
	case err != nil:
		return nil, fmt.Errorf("reading %s %s, the object of run %s: %w", r.Kind, r.Object(), r.ID, err)
	case string(obj.GetUID()) != r.UID:
		return nil, fmt.Errorf("%s %s, the object of run %s (uid %s), is gone: the %s of that name now is another object (uid %s), made since", r.Kind, r.Object(), r.ID, r.UID, r.Kind, obj.GetUID())
	case obj.GetDeletionTimestamp() != nil:
		return nil, fmt.Errorf("%s %s is being deleted: its handlers do not run again; nothing was written", r.Kind, r.Object())
	}
	return obj, nil
}

// handlerGone says why r's handler cannot run again when the Operator in
// the cluster no longer has it; "" when it has it, or when the Operator
// cannot be read there (one run from a file): the engine checks then.
func handlerGone(ctx context.Context, c client.Client, r *archive.Run) string {
	o, err := getOperator(ctx, c, r.Operator)
	if err != nil {
		return ""
	}
	for _, h := range o.Spec.Handlers {
		if h.Name == r.Handler {
			return ""
		}
	}
	return fmt.Sprintf("handler %s is no longer in operator %s's definition: nothing to run again", r.Handler, r.Operator)
}

// startedRun finds the new run's id in a RerunStarted Event's message.
var startedRun = regexp.MustCompile(`, as run ([0-9a-z]{18})`)

// awaitRerun waits up to wait for the engine's Event answering request
// on obj, prints it, and returns the refusal as an error.
func awaitRerun(ctx context.Context, c client.Client, obj *unstructured.Unstructured, request string, wait time.Duration, out io.Writer) error {
	if wait <= 0 {
		fmt.Fprintln(out, "written: the engine takes it when the object has no run in flight (an Event on the object says RerunStarted or RerunRefused)")
		return nil
	}
	deadline := time.Now().Add(wait)
	for {
		for _, e := range objectEvents(ctx, c, obj) {
			if !strings.Contains(e.Message, "request "+request+" ") {
				continue
			}
			switch e.Reason {
			case v1alpha1.EventRerunRefused:
				return errors.New(e.Message)
			case v1alpha1.EventRerunStarted:
				fmt.Fprintln(out, e.Message)
				if m := startedRun.FindStringSubmatch(e.Message); m != nil {
					fmt.Fprintf(out, "follow it with: opkit logs -f %s\n", m[1])
				}
				return nil
			}
		}
		if !time.Now().Add(answerPoll).Before(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(answerPoll):
		}
	}
	fmt.Fprintf(out, "within %s, the engine did not answer: the request stays on the object and is taken when the object has no run in flight (paused objects wait for resume); its Events will say\n", wait)
	return nil
}
