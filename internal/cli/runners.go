package cli

import (
	"context"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/opkit-dev/opkit/internal/executor"
	"github.com/opkit-dev/opkit/internal/runners"
)

// runnersFlags are opkit run's flags of the runner API, which runner Pods
// pull the runs of exec handlers with an image from.
type runnersFlags struct {
	addr, service string
}

func (f *runnersFlags) register(cmd *cobra.Command) {
	addr := "0"
	if env := os.Getenv("OPKIT_RUNNERS_ADDR"); env != "" {
		addr = env
	}
	cmd.Flags().StringVar(&f.addr, "runners-addr", addr, `serve the runner API over HTTPS on this address, e.g. :7384: exec handlers with exec.image then run in runner Pods (see docs/production.md); "0" serves none, and they run on the engine's host (env OPKIT_RUNNERS_ADDR)`)
	cmd.Flags().StringVar(&f.service, "runners-service", "", "the Service runner Pods reach the runner API through, in $POD_NAMESPACE: its certificate names NAME.NAMESPACE.svc (default: --runners-addr's host, for an engine outside the cluster)")
}

// serve starts the runner API when --runners-addr asks for it, until ctx
// ends; nil when it does not.
func (f *runnersFlags) serve(ctx context.Context, cfg *rest.Config, namespace string) (executor.Dispatcher, error) {
	if f.addr == "0" || f.addr == "" {
		return nil, nil
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("--runners-addr: %w", err)
	}
	s, err := runners.Serve(ctx, runners.ServeOptions{
		Addr: f.addr, Namespace: namespace, Service: f.service, Client: client,
		Log: ctrllog.Log.WithName("runners"),
	})
	if err != nil {
		return nil, fmt.Errorf("--runners-addr: %w", err)
	}
	return s, nil
}
