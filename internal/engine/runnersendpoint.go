package engine

import (
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// With several replicas, runners must pull their runs from the one that
// acts: a standby runs no operator, so a runner polling it would wait
// for nothing while the leader's runs wait for it. Every replica serves
// the runner API from its start (its certificate and CA ready before any
// runner starts), but the runners' Service selects no Pods, and the
// acting engine writes its EndpointSlice as it writes the hooks'
// (hooksendpoint.go): its Pod's address and the runner API's port. A new
// leader writes its own; the runners' next calls reach it.

// RunnersEndpoint names the EndpointSlice of the runners Service, which
// the acting engine writes, and the runner API's address.
type RunnersEndpoint struct {
	// HooksEndpoint names the slice (of the runners Service, not the
	// hooks') and the Pod, as for the hooks. Required.
	HooksEndpoint
	// Addr is the address the runner API listens on (runners.Serving's
	// Addr): its port is written. Required.
	Addr string
}

// runnersPortName is the name of the runner API's port in the runners
// Service and its EndpointSlice.
const runnersPortName = "runners"

// publishRunners has the acting engine write the runners EndpointSlice,
// when Options.RunnersEndpoint names one.
func (e *Engine) publishRunners() error {
	r := e.opts.RunnersEndpoint
	if r == nil {
		return nil
	}
	if err := r.check(); err != nil {
		return fmt.Errorf("the runners EndpointSlice: %w", err)
	}
	if r.Addr == "" {
		return fmt.Errorf("engine: the runners EndpointSlice %s/%s needs the runner API's address", r.Namespace, r.Name)
	}
	// A runnable that needs leadership: only the acting engine writes it.
	return e.mgr.Add(manager.RunnableFunc(e.publishEndpoint(&r.HooksEndpoint, runnersPortName, "runner API calls", r.Addr)))
}
