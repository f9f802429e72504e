package engine

import (
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/opkit-dev/opkit/internal/endpoint"
)

// The hooks, the webhook server and the runner API are each routed to the
// acting engine by an EndpointSlice it writes (package endpoint).

// HooksEndpoint names the EndpointSlice the acting engine writes, and the
// Pod it runs in (package endpoint's Slice).
type HooksEndpoint = endpoint.Slice

// HooksEndpointManager is the field manager of the endpoints and ports
// the engine writes to the hooks EndpointSlice.
const HooksEndpointManager = endpoint.Manager

// The names of the hooks', the webhook server's and the runner API's
// ports in their Services and EndpointSlices: each Service's and its
// slice's must match.
const (
	hooksPortName   = "hooks"
	webhookPortName = "webhook"
	runnersPortName = "runners"
)

// publish adds to mgr a runnable of the acting engine that writes the
// EndpointSlice h with this engine's address and the port listenAddr
// bound, and empties it once the engine stops (endpoint.Publish). what
// says what is routed.
func publish(mgr manager.Manager, h *HooksEndpoint, portName, what, listenAddr string) error {
	return mgr.Add(manager.RunnableFunc(endpoint.Publish(mgr.GetClient(), mgr.GetAPIReader(), mgr.GetLogger(), h, portName, what, listenAddr)))
}

// RunnersEndpoint names the EndpointSlice of the runners Service, which
// the acting engine writes, and the runner API's address: every replica
// serves the runner API from its start (its certificate and CA ready
// before any runner starts), but only the acting one runs operators, so
// only its address is in the slice.
type RunnersEndpoint struct {
	// HooksEndpoint names the slice (of the runners Service, not the
	// hooks') and the Pod, as for the hooks. Required.
	HooksEndpoint
	// Addr is the address the runner API listens on (runners.Serving's
	// Addr): its port is written. Required.
	Addr string
}

// publishRunners has the acting engine write the runners EndpointSlice,
// when Options.RunnersEndpoint names one.
func (e *Engine) publishRunners() error {
	r := e.opts.RunnersEndpoint
	if r == nil {
		return nil
	}
	if err := r.Check("the runners EndpointSlice " + r.Namespace + "/" + r.Name); err != nil {
		return err
	}
	if r.Addr == "" {
		return fmt.Errorf("engine: the runners EndpointSlice %s/%s needs the runner API's address", r.Namespace, r.Name)
	}
	// A runnable that needs leadership: only the acting engine writes it.
	return publish(e.mgr, &r.HooksEndpoint, runnersPortName, "runner API calls", r.Addr)
}
