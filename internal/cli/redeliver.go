package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
)

func newEventsRedeliverCommand() *cobra.Command {
	var kubeconfig, namespace, reason string
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "redeliver DELIVERY_ID [--reason TEXT]",
		Short: "Handle a webhook delivery again, on purpose",
		Long: `Handle a delivery of the archive again (opkit events lists them): one
handled, failed, turned down by a handler, or refused as filtered out or
as a replay. Its source's object is created or patched again and its
handlers on event run again, under keys of their own. The archive
records it as a redelivery of the original, with who asked (the
Kubernetes user this command runs as) and --reason.

It creates a Redelivery object (redeliveries.opkit.dev) in --namespace
(the kubeconfig's namespace by default): RBAC says who may (create on
redeliveries), and the engine that acts answers it in its status. Then it
waits up to --wait for the answer and prints it: accepted, with the new
delivery's id; or refused, with why (an unknown id, a source no longer in
the definition, a delivery still being handled, one refused before its
sender was verified), and exits 1.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, out := cmd.Context(), cmd.OutOrStdout()
			id := args[0]
			if !archive.ValidID(id) {
				return fmt.Errorf("%q is not a delivery id: opkit events lists them (the ID column of -o json's id)", id)
			}
			cfg, c, err := kubeClient(kubeconfig)
			if err != nil {
				return err
			}
			if namespace == "" {
				namespace = kubeconfigNamespace(kubeconfig)
			}
			by, err := requester(ctx, cmd.ErrOrStderr(), cfg, kubeconfig)
			if err != nil {
				return err
			}
			obj := v1alpha1.NewRedelivery(namespace, v1alpha1.RedeliverySpec{Delivery: id, By: by, Reason: strings.TrimSpace(reason)})
			if err := c.Create(ctx, obj); err != nil {
				return fmt.Errorf("asking for the redelivery of %s (a Redelivery in namespace %s): %w", id, namespace, err)
			}
			fmt.Fprintf(out, "redelivery of %s asked by %s (Redelivery %s/%s)\n", id, by, namespace, obj.GetName())
			status, err := awaitRedelivery(ctx, c, obj, wait)
			if err != nil {
				return err
			}
			switch status.Outcome {
			case v1alpha1.RedeliveryRefused:
				return fmt.Errorf("refused: %s", status.Reason)
			case v1alpha1.RedeliveryAccepted:
				fmt.Fprintf(out, "accepted as delivery %s: follow it with opkit events show %s\n", status.Redelivery, status.Redelivery)
				return nil
			}
			fmt.Fprintf(out, "not answered within %s: does an engine run the operator of delivery %s, in namespace %s or every one? kubectl get redeliveries -n %s %s shows the answer once given\n",
				wait, id, namespace, namespace, obj.GetName())
			return nil
		},
	}
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
	cmd.Flags().StringVarP(&namespace, "namespace", "n", "", "the namespace of the Redelivery object (default: the kubeconfig's); an engine with a namespace of its own answers there only")
	cmd.Flags().StringVar(&reason, "reason", "", "why, in your words; recorded with the redelivery")
	cmd.Flags().DurationVar(&wait, "wait", 30*time.Second, "how long to wait for the engine's answer; 0: do not wait")
	return cmd
}

// awaitRedelivery reads a Redelivery until the engine answers it, for up
// to wait; an empty status when it does not.
func awaitRedelivery(ctx context.Context, c client.Client, obj *unstructured.Unstructured, wait time.Duration) (v1alpha1.RedeliveryStatus, error) {
	deadline := time.Now().Add(wait)
	cur := &unstructured.Unstructured{}
	cur.SetGroupVersionKind(obj.GroupVersionKind())
	for time.Now().Before(deadline) {
		err := c.Get(ctx, client.ObjectKeyFromObject(obj), cur)
		if err == nil {
			_, status, err := v1alpha1.ReadRedelivery(cur)
			if err != nil || status.Outcome != "" {
				return status, err
			}
		}
		select {
		case <-ctx.Done():
			return v1alpha1.RedeliveryStatus{}, errors.Join(ctx.Err(), err)
		case <-time.After(answerPoll):
		}
	}
	return v1alpha1.RedeliveryStatus{}, nil
}
