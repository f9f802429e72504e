package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/statemachine"
)

// decideLong is opkit decide's help.
const decideLong = `Answer the question of an object whose state needs a person (docs/states.md):
--choose names the state to go to, one of the state's choices, and --reason
says why. The engine takes the transition, and records it with who decided
(the Kubernetes user this command runs as) and why, in the run archive and
as an Event. Without --choose, the question and the choices are printed.

The decision is written as the annotation ` + v1alpha1.DecisionAnnotation + `, for the
state and visit (status.state.seq) read; what makes it wrong is refused
before it is written (the object is being deleted, its state does not wait
for a person, the choice is not one, a decision is already sent). Then
opkit decide waits up to --wait for the engine's answer and prints it:
taken; refused, with why (the object moved meanwhile: nothing changes),
and exits 1; or waits, with what for (the object is paused, or the
handlers of its state have not finished), and exits 0: the decision stays
and is taken then. The object's
kind is found from its transitions in the archive (--operator chooses when
several operators have an object of that name). The choices' descriptions
are read from the Operator in the cluster, or from -f FILE.`

func newDecideCommand() *cobra.Command {
	var archivePath, kubeconfig, operator, choose, reason, file string
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "decide NAMESPACE/NAME [--choose STATE --reason TEXT]",
		Short: "Answer an object that waits for a person (a state that needsPerson)",
		Long:  decideLong,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, out := cmd.Context(), cmd.OutOrStdout()
			ns, name := splitObjectRef(args[0])
			if choose == "" && reason != "" {
				return fmt.Errorf("--reason without --choose: name the state to go to with --choose")
			}
			if choose != "" && strings.TrimSpace(reason) == "" {
				return fmt.Errorf("--reason is required with --choose: say why, in your words; it is recorded with the decision")
			}
			gvk, op, err := objectKind(cmd, archivePath, kubeconfig, archive.Query{Namespace: ns, Name: name, Operator: operator, Handler: v1alpha1.TransitionHandler}, args[0],
				"is it an object of an Operator that declares states, run with this archive (--archive)?")
			if err != nil {
				return err
			}
			cfg, c, err := kubeClient(kubeconfig)
			if err != nil {
				return err
			}
			obj := &unstructured.Unstructured{}
			obj.SetGroupVersionKind(gvk)
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj); err != nil {
				return fmt.Errorf("reading %s %s: %w", gvk.Kind, args[0], err)
			}
			st, err := objectState(obj)
			if err != nil {
				return fmt.Errorf("%s %s: %w", gvk.Kind, args[0], err)
			}
			descriptions := choiceDescriptions(ctx, c, op, file, st.Name)
			if obj.GetDeletionTimestamp() != nil {
				return fmt.Errorf("%s %s is being deleted: its state does not move any more; nothing was written", gvk.Kind, args[0])
			}
			if st.Question == "" {
				return fmt.Errorf("%s %s is in state %s (since %s), which does not wait for a person: there is nothing to decide", gvk.Kind, args[0], st.Name, st.Since)
			}
			if choose == "" {
				printQuestion(out, gvk.Kind, args[0], st, descriptions)
				return nil
			}
			if !slices.Contains(st.Choices, choose) {
				var b strings.Builder
				printQuestion(&b, gvk.Kind, args[0], st, descriptions)
				return fmt.Errorf("%s is not a choice of %s.\n%s", choose, st.Name, strings.TrimRight(b.String(), "\n"))
			}
			if raw, ok := obj.GetAnnotations()[v1alpha1.DecisionAnnotation]; ok {
				var sent v1alpha1.Decision
				_ = json.Unmarshal([]byte(raw), &sent)
				return fmt.Errorf("a decision is already sent for %s %s (by %s: choose %s) and not taken yet; nothing was written: "+
					"its Events say what it waits for (kubectl get events%s --field-selector involvedObject.name=%s), or remove it (kubectl annotate %s %s%s %s-) and decide again",
					gvk.Kind, args[0], cmp.Or(sent.By, "someone"), cmp.Or(sent.Choose, "?"), nsFlag(ns), name, strings.ToLower(gvk.Kind), name, nsFlag(ns), v1alpha1.DecisionAnnotation)
			}
			by, err := requester(ctx, cmd.ErrOrStderr(), cfg, kubeconfig)
			if err != nil {
				return err
			}
			d := v1alpha1.Decision{State: st.Name, Seq: st.Seq, Choose: choose, Reason: reason, By: by, At: time.Now().UTC().Format(time.RFC3339)}
			// Over the resourceVersion read: the decision is on the state seen.
			patch := d.Patch(obj.GetResourceVersion())
			if err := c.Patch(ctx, obj, client.RawPatch(types.MergePatchType, patch)); err != nil {
				return fmt.Errorf("writing the decision on %s %s: %w (if it changed since it was read, run opkit decide again)", gvk.Kind, args[0], err)
			}
			fmt.Fprintf(out, "%s %s: %s decided %s -> %s (%s)\n", gvk.Kind, args[0], by, st.Name, choose, reason)
			verdict, says := awaitAnswer(ctx, c, obj, d, wait)
			if verdict == statemachine.Refused {
				return errors.New(says)
			}
			fmt.Fprintln(out, says)
			fmt.Fprintf(out, "follow it with: kubectl get %s %s%s -w   (the State column), and opkit runs --object %s\n", strings.ToLower(gvk.Kind), name, nsFlag(ns), args[0])
			return nil
		},
	}
	runSourceFlags(cmd, &archivePath, &kubeconfig)
	cmd.Flags().StringVar(&operator, "operator", "", "the operator, when several have an object of that name")
	cmd.Flags().StringVar(&choose, "choose", "", "the state to go to: one of the choices of the object's state")
	cmd.Flags().StringVar(&reason, "reason", "", "why, in your words (required with --choose)")
	cmd.Flags().StringVarP(&file, "file", "f", "", "the Operator's definition, for the choices' descriptions (default: the Operator in the cluster)")
	cmd.Flags().DurationVar(&wait, "wait", 10*time.Second, "how long to wait for the engine to take or refuse the decision, or say what it waits for; 0: do not wait")
	return cmd
}

// answerPoll is how often opkit decide reads the object for the engine's
// answer.
const answerPoll = 250 * time.Millisecond

// awaitAnswer reads, for up to wait, what became of the decision d just
// written on obj (statemachine.Answer over the object and its Events), and
// returns the engine's answer as soon as it gives one; else what is known
// when wait is over.
func awaitAnswer(ctx context.Context, c client.Client, obj *unstructured.Unstructured, d v1alpha1.Decision, wait time.Duration) (statemachine.Verdict, string) {
	if wait <= 0 {
		return statemachine.Unanswered, "written: the engine takes it or refuses it when it reads it (an Event on the object says which)"
	}
	deadline := time.Now().Add(wait)
	cur := obj.DeepCopy()
	var verdict statemachine.Verdict
	var says string
	for {
		if err := c.Get(ctx, client.ObjectKeyFromObject(obj), cur); err != nil {
			says = fmt.Sprintf("it cannot be read back (%v): whether the engine took it is not known", err)
		} else {
			verdict, says = statemachine.Answer(d, cur.Object, objectEvents(ctx, c, cur))
		}
		if verdict != statemachine.Unanswered || !time.Now().Add(answerPoll).Before(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return verdict, says
		case <-time.After(answerPoll):
		}
	}
	if verdict == statemachine.Unanswered {
		says = fmt.Sprintf("within %s, %s", wait, says)
	}
	return verdict, says
}

// objectEvents are the Events about obj, as Answer reads them; none when
// they cannot be listed.
func objectEvents(ctx context.Context, c client.Client, obj *unstructured.Unstructured) []statemachine.Event {
	var list corev1.EventList
	if err := c.List(ctx, &list, client.InNamespace(obj.GetNamespace()), client.MatchingFields{"involvedObject.uid": string(obj.GetUID())}); err != nil {
		return nil
	}
	out := make([]statemachine.Event, 0, len(list.Items))
	for _, e := range list.Items {
		out = append(out, statemachine.Event{Reason: e.Reason, Message: e.Message})
	}
	return out
}

// nsFlag is kubectl's flag for the namespace ns; "" for none.
func nsFlag(ns string) string {
	if ns == "" {
		return ""
	}
	return " -n " + ns
}

// objectState reads status.state.
func objectState(obj *unstructured.Unstructured) (*v1alpha1.ObjectState, error) {
	st, err := v1alpha1.ReadObjectState(obj.Object)
	switch {
	case err != nil:
		return nil, fmt.Errorf("its status.state cannot be read: %w", err)
	case st == nil:
		return nil, fmt.Errorf("it has no status.state yet: is its operator running?")
	case st.Name == "":
		return nil, fmt.Errorf("its status.state names no state")
	}
	return st, nil
}

// choiceDescriptions are the descriptions of the transitions of state, by
// target, from the definition file, else the Operator op in the cluster;
// none when neither can be read.
func choiceDescriptions(ctx context.Context, c client.Client, op, file, state string) map[string]string {
	var o v1alpha1.Operator
	switch {
	case file != "":
		data, err := os.ReadFile(file)
		if err != nil || yaml.Unmarshal(data, &o) != nil {
			return nil
		}
	default:
		read, err := getOperator(ctx, c, op)
		if err != nil {
			return nil
		}
		o = *read
	}
	out := map[string]string{}
	for _, s := range o.Spec.States {
		if s.Name == state {
			for _, t := range s.Transitions {
				out[t.To] = t.Description
			}
		}
	}
	return out
}

// printQuestion prints a state's question and its choices.
func printQuestion(w io.Writer, kind, arg string, st *v1alpha1.ObjectState, descriptions map[string]string) {
	fmt.Fprintf(w, "%s %s is in %s (since %s): %s\n", kind, arg, st.Name, st.Since, st.Question)
	if descriptions == nil {
		fmt.Fprintln(w, "choices (their descriptions are in the Operator's definition: pass it with -f FILE):")
	} else {
		fmt.Fprintln(w, "choices:")
	}
	for _, c := range st.Choices {
		if d := descriptions[c]; d != "" {
			fmt.Fprintf(w, "  %s: %s\n", c, d)
		} else {
			fmt.Fprintf(w, "  %s\n", c)
		}
	}
	fmt.Fprintf(w, "answer with: opkit decide %s --choose STATE --reason \"...\"\n", arg)
}

// getOperator reads the Operator name from the cluster. The client's
// scheme does not know opkit's types: it is read unstructured, then
// converted. A Get's error is returned as it is (apierrors.IsNotFound,
// meta.IsNoMatchError tell an Operator, or its CRD, absent).
func getOperator(ctx context.Context, c client.Client, name string) (*v1alpha1.Operator, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(v1alpha1.SchemeGroupVersion.WithKind(v1alpha1.Kind))
	if err := c.Get(ctx, client.ObjectKey{Name: name}, u); err != nil {
		return nil, err
	}
	op := &v1alpha1.Operator{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, op); err != nil {
		return nil, err
	}
	return op, nil
}

// kubeClient is the kubeconfig's REST config and a client of it.
func kubeClient(kubeconfig string) (*rest.Config, client.Client, error) {
	cfg, err := loadKubeconfig(kubeconfig)
	if err != nil {
		return nil, nil, err
	}
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return nil, nil, err
	}
	return cfg, c, nil
}

// newClient is a client of cfg that knows the types add registers.
func newClient(cfg *rest.Config, add func(*runtime.Scheme) error) (client.Client, error) {
	scheme := runtime.NewScheme()
	if err := add(scheme); err != nil {
		return nil, err
	}
	return client.New(cfg, client.Options{Scheme: scheme})
}

// requester is who asks what the command writes: whoAmI's user, its note
// (when it is the kubeconfig's user) written to stderr.
func requester(ctx context.Context, stderr io.Writer, cfg *rest.Config, kubeconfig string) (string, error) {
	by, note, err := whoAmI(ctx, cfg, kubeconfig)
	if err != nil {
		return "", err
	}
	if note != "" {
		fmt.Fprintln(stderr, note)
	}
	return by, nil
}

// whoAmI is the user the API server at cfg knows the caller as (a
// SelfSubjectReview); when the API refuses to say, the user of the
// kubeconfig cfg was loaded from, with a note saying so.
func whoAmI(ctx context.Context, cfg *rest.Config, kubeconfig string) (by, note string, err error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", "", err
	}
	review, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err == nil && review.Status.UserInfo.Username != "" {
		return review.Status.UserInfo.Username, "", nil
	}
	why := "its SelfSubjectReview named no user"
	if err != nil {
		why = "SelfSubjectReview: " + err.Error()
	}
	raw, err := kubeconfigLoader(kubeconfig).RawConfig()
	if err != nil {
		return "", "", fmt.Errorf("the API server did not say who you are (%s), and the kubeconfig cannot be read: %w", why, err)
	}
	current := raw.CurrentContext
	if kctx := raw.Contexts[current]; kctx != nil && kctx.AuthInfo != "" {
		return kctx.AuthInfo, fmt.Sprintf("the API server did not say who you are (%s): the decision names the kubeconfig's user, %s", why, kctx.AuthInfo), nil
	}
	return "", "", fmt.Errorf("the API server did not say who you are (%s), and the kubeconfig's context %q names no user: a decision must say who decided", why, current)
}
