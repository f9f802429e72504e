// Package endpoint routes a Service to the acting replica of the engine:
// the hooks' (webhook deliveries), the admission webhook server's and the
// runner API's.
//
// With several replicas, only the one that acts (the holder of the
// leader election's Lease) may take these calls: a Service that selects
// the engine's Pods would send some to standbys, refused at the
// connection (a sender such as GitHub does not deliver them again), or
// left waiting (a runner polling a standby waits for runs it never
// gets). So each has a Service of its own without a selector, and the
// engine that acts writes its one EndpointSlice: its own Pod's address
// and the listener's port. A new leader writes its own over it; a leader
// that stops gracefully empties it, unless another has written it since.
//
// Contract: the EndpointSlice is made by the manifests with no endpoints
// and no ports, so that applying them again never takes those fields
// back from the engine (they are the engine's alone, field manager
// [Manager]), and the engine's RBAC names it: get and patch of that one
// object, nothing else of the namespace's traffic. [Publish] is a
// runnable of the acting engine only.
package endpoint

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	discoveryv1ac "k8s.io/client-go/applyconfigurations/discovery/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Slice names an EndpointSlice the acting engine writes, and the Pod it
// runs in.
type Slice struct {
	// Namespace and Name of the EndpointSlice (and of its Service, named
	// in its kubernetes.io/service-name label). Required.
	Namespace, Name string
	// IP is the Pod's address (the downward API's status.podIP). Required.
	IP string
	// Pod and Node name the Pod and its node, for the endpoint's
	// targetRef and nodeName; optional.
	Pod, Node string
}

// Manager is the field manager of the endpoints and ports the engine
// writes.
const Manager = "opkit-hooks"

// Check says what is missing from s; what names the slice in the error
// ("the hooks EndpointSlice").
func (s *Slice) Check(what string) error {
	switch {
	case s.Namespace == "" || s.Name == "":
		return fmt.Errorf("engine: %s needs a namespace and a name", what)
	case net.ParseIP(s.IP) == nil:
		return fmt.Errorf("engine: %s needs the Pod's IP address, and %q is none (set it from the downward API's status.podIP)", what, s.IP)
	}
	return nil
}

// Publish returns a runnable of the acting engine: it writes s with the
// Pod's address and the port listenAddr bound (portName, the Service's
// port), retrying until it succeeds, and empties it once ctx ends. what
// says what is routed, in the log. reader reads past the cache.
func Publish(c client.Client, reader client.Reader, log logr.Logger, s *Slice, portName, what, listenAddr string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		_, p, err := net.SplitHostPort(listenAddr)
		if err != nil {
			return err
		}
		port, err := strconv.ParseInt(p, 10, 32)
		if err != nil {
			return err
		}
		log := log.WithValues("endpointslice", s.Namespace+"/"+s.Name)
		backoff := wait.Backoff{Duration: time.Second, Factor: 2, Cap: 30 * time.Second, Steps: 1 << 30}
		for {
			err := c.Apply(ctx, apply(s, portName, int32(port)), client.FieldOwner(Manager), client.ForceOwnership)
			if err == nil {
				log.Info(what+" are routed to this engine", "address", net.JoinHostPort(s.IP, p))
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
		if err := withdraw(stop, c, reader, s); err != nil {
			log.Error(err, "emptying the EndpointSlice; the next leader writes it")
		}
		return nil
	}
}

// apply is what the acting engine applies.
func apply(s *Slice, portName string, port int32) *discoveryv1ac.EndpointSliceApplyConfiguration {
	addressType := discoveryv1.AddressTypeIPv4
	if net.ParseIP(s.IP).To4() == nil {
		addressType = discoveryv1.AddressTypeIPv6
	}
	ep := discoveryv1ac.Endpoint().WithAddresses(s.IP).
		WithConditions(discoveryv1ac.EndpointConditions().WithReady(true).WithServing(true).WithTerminating(false))
	if s.Pod != "" {
		ep.WithTargetRef(corev1ac.ObjectReference().WithKind("Pod").WithNamespace(s.Namespace).WithName(s.Pod))
	}
	if s.Node != "" {
		ep.WithNodeName(s.Node)
	}
	return discoveryv1ac.EndpointSlice(s.Name, s.Namespace).
		WithLabels(map[string]string{discoveryv1.LabelServiceName: s.Name, discoveryv1.LabelManagedBy: "opkit.dev"}).
		WithAddressType(addressType).
		WithEndpoints(ep).
		WithPorts(discoveryv1ac.EndpointPort().WithName(portName).WithPort(port).WithProtocol(corev1.ProtocolTCP))
}

// withdraw empties the EndpointSlice s if it still names this engine: a
// new leader may have written its own address since, which an update
// made from an older read cannot overwrite.
func withdraw(ctx context.Context, c client.Client, reader client.Reader, s *Slice) error {
	var slice discoveryv1.EndpointSlice
	if err := reader.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: s.Name}, &slice); err != nil {
		return client.IgnoreNotFound(err)
	}
	if len(slice.Endpoints) != 1 || len(slice.Endpoints[0].Addresses) != 1 || slice.Endpoints[0].Addresses[0] != s.IP {
		return nil
	}
	slice.Endpoints = nil
	if err := c.Update(ctx, &slice, client.FieldOwner(Manager)); err != nil && !apierrors.IsConflict(err) {
		return err
	}
	return nil
}
