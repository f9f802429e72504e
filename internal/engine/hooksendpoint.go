package engine

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	discoveryv1ac "k8s.io/client-go/applyconfigurations/discovery/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// With several replicas, webhook deliveries must reach the one that acts:
// only it binds the hooks listener. A Service that selects the engine's
// Pods would send some to standbys, refused at the connection, and a
// sender such as GitHub does not deliver them again. So the hooks have a
// Service of their own without a selector, and the engine that acts
// writes its one EndpointSlice: its own Pod's address and the listener's
// port. A new leader writes its own over it; a leader that stops
// gracefully empties it, unless another has written it since.
//
// The EndpointSlice is made by the manifests with no endpoints and no
// ports, so that applying them again never takes those fields back from
// the engine (they are the engine's alone, field manager
// HooksEndpointManager), and the engine's RBAC names it: get and patch of
// that one object, nothing else of the namespace's traffic.

// HooksEndpoint names the EndpointSlice the acting engine writes, and the
// Pod it runs in.
type HooksEndpoint struct {
	// Namespace and Name of the EndpointSlice (and of its Service, named
	// in its kubernetes.io/service-name label). Required.
	Namespace, Name string
	// IP is the Pod's address (the downward API's status.podIP). Required.
	IP string
	// Pod and Node name the Pod and its node, for the endpoint's
	// targetRef and nodeName; optional.
	Pod, Node string
}

// HooksEndpointManager is the field manager of the endpoints and ports
// the engine writes to the hooks EndpointSlice.
const HooksEndpointManager = "opkit-hooks"

// hooksPortName and webhookPortName are the names of the hooks' and the
// webhook server's ports in their Services and EndpointSlices: each
// Service's and its slice's must match.
const (
	hooksPortName   = "hooks"
	webhookPortName = "webhook"
)

// check says what is missing from a HooksEndpoint.
func (h *HooksEndpoint) check() error {
	switch {
	case h.Namespace == "" || h.Name == "":
		return errors.New("engine: the hooks EndpointSlice needs a namespace and a name")
	case net.ParseIP(h.IP) == nil:
		return fmt.Errorf("engine: the hooks EndpointSlice needs the Pod's IP address, and %q is none (set it from the downward API's status.podIP)", h.IP)
	}
	return nil
}

// publishHooks is a runnable of the acting engine: it writes the hooks
// EndpointSlice with this engine's address and the port the listener
// bound, retrying until it succeeds, and empties it once ctx ends.
func (e *Engine) publishHooks(listenAddr string) func(ctx context.Context) error {
	return e.publishEndpoint(e.opts.HooksEndpoint, hooksPortName, "webhook deliveries", listenAddr)
}

// publishEndpoint is publishHooks for any EndpointSlice h of the same
// kind: the webhook server's (WebhookOptions.Endpoint) too. portName is
// the Service's port; what says what is routed, in the log.
func (e *Engine) publishEndpoint(h *HooksEndpoint, portName, what, listenAddr string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		_, p, err := net.SplitHostPort(listenAddr)
		if err != nil {
			return err
		}
		port, err := strconv.ParseInt(p, 10, 32)
		if err != nil {
			return err
		}
		log := e.mgr.GetLogger().WithValues("endpointslice", h.Namespace+"/"+h.Name)
		backoff := wait.Backoff{Duration: time.Second, Factor: 2, Cap: 30 * time.Second, Steps: 1 << 30}
		for {
			err := e.client.Apply(ctx, hooksSlice(h, portName, int32(port)), client.FieldOwner(HooksEndpointManager), client.ForceOwnership)
			if err == nil {
				log.Info(what+" are routed to this engine", "address", net.JoinHostPort(h.IP, p))
				break
			}
			log.Error(err, "cannot route "+what+" to this engine: writing the EndpointSlice failed; retrying")
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(backoff.Step()):
			}
		}
		<-ctx.Done()
		stop, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := e.withdrawEndpoint(stop, h); err != nil {
			log.Error(err, "emptying the EndpointSlice; the next leader writes it")
		}
		return nil
	}
}

// hooksSlice is what the acting engine applies.
func hooksSlice(h *HooksEndpoint, portName string, port int32) *discoveryv1ac.EndpointSliceApplyConfiguration {
	addressType := discoveryv1.AddressTypeIPv4
	if net.ParseIP(h.IP).To4() == nil {
		addressType = discoveryv1.AddressTypeIPv6
	}
	ep := discoveryv1ac.Endpoint().WithAddresses(h.IP).
		WithConditions(discoveryv1ac.EndpointConditions().WithReady(true).WithServing(true).WithTerminating(false))
	if h.Pod != "" {
		ep.WithTargetRef(corev1ac.ObjectReference().WithKind("Pod").WithNamespace(h.Namespace).WithName(h.Pod))
	}
	if h.Node != "" {
		ep.WithNodeName(h.Node)
	}
	return discoveryv1ac.EndpointSlice(h.Name, h.Namespace).
		WithLabels(map[string]string{discoveryv1.LabelServiceName: h.Name, discoveryv1.LabelManagedBy: "opkit.dev"}).
		WithAddressType(addressType).
		WithEndpoints(ep).
		WithPorts(discoveryv1ac.EndpointPort().WithName(portName).WithPort(port).WithProtocol(corev1.ProtocolTCP))
}

// withdrawEndpoint empties the EndpointSlice h if it still names this
// engine: a new leader may have written its own address since, which an
// update made from an older read cannot overwrite.
func (e *Engine) withdrawEndpoint(ctx context.Context, h *HooksEndpoint) error {
	var slice discoveryv1.EndpointSlice
	if err := e.mgr.GetAPIReader().Get(ctx, client.ObjectKey{Namespace: h.Namespace, Name: h.Name}, &slice); err != nil {
		return client.IgnoreNotFound(err)
	}
	if len(slice.Endpoints) != 1 || len(slice.Endpoints[0].Addresses) != 1 || slice.Endpoints[0].Addresses[0] != h.IP {
		return nil
	}
	slice.Endpoints = nil
	if err := e.client.Update(ctx, &slice, client.FieldOwner(HooksEndpointManager)); err != nil && !apierrors.IsConflict(err) {
		return err
	}
	return nil
}
