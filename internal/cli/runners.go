package cli

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/opkit-dev/opkit/internal/engine"
	"github.com/opkit-dev/opkit/internal/runners"
)

// runnersFlags are opkit run's flags of the runner API, which runner Pods
// pull the runs of exec handlers with an image from.
type runnersFlags struct {
	addr, service, slice string
}

func (f *runnersFlags) register(cmd *cobra.Command) {
	addr := "0"
	if env := os.Getenv("OPKIT_RUNNERS_ADDR"); env != "" {
		addr = env
	}
	cmd.Flags().StringVar(&f.addr, "runners-addr", addr, `serve the runner API over HTTPS on this address, e.g. :7384: exec handlers with exec.image then run in runner Pods (see docs/production.md); "0" serves none, and they run on the engine's host (env OPKIT_RUNNERS_ADDR)`)
	cmd.Flags().StringVar(&f.service, "runners-service", "", "the Service runner Pods reach the runner API through, in $POD_NAMESPACE: its certificate names NAME.NAMESPACE.svc (default: --runners-addr's host, for an engine outside the cluster)")
	cmd.Flags().StringVar(&f.slice, "runners-endpointslice", "", "the EndpointSlice of --runners-service, in $POD_NAMESPACE: the replica that acts writes its address ($POD_IP) and the runner API's port there, so that runners pull runs from it and no standby (see docs/production.md)")
}

// serve starts the runner API when --runners-addr asks for it, until ctx
// ends, and sets opts.Runners (and opts.RunnersEndpoint with
// --runners-endpointslice); nothing when it does not.
func (f *runnersFlags) serve(ctx context.Context, cfg *rest.Config, namespace string, opts *engine.Options) error {
	if f.addr == "0" || f.addr == "" {
		if f.slice != "" {
			return errors.New("--runners-endpointslice: no runner API is served (give --runners-addr)")
		}
		return nil
	}
	var endpoint *engine.RunnersEndpoint
	if f.slice != "" {
		ip := os.Getenv("POD_IP")
		if ip == "" {
			return errors.New("--runners-endpointslice: the engine writes its Pod's address there, and $POD_IP does not give it (set it from the downward API's status.podIP)")
		}
		endpoint = &engine.RunnersEndpoint{HooksEndpoint: engine.HooksEndpoint{
			Namespace: namespace, Name: f.slice, IP: ip, Pod: os.Getenv("POD_NAME"), Node: os.Getenv("NODE_NAME"),
		}}
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("--runners-addr: %w", err)
	}
	s, err := runners.Serve(ctx, runners.ServeOptions{
		Addr: f.addr, Namespace: namespace, Service: f.service, Client: client,
		Log: ctrllog.Log.WithName("runners"),
	})
	if err != nil {
		return fmt.Errorf("--runners-addr: %w", err)
	}
	opts.Runners = s
	if endpoint != nil {
		endpoint.Addr = s.Addr()
		opts.RunnersEndpoint = endpoint
	}
	return nil
}
