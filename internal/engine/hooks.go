package engine

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/source"
)

// Deliveries are package delivery's: its Receiver checks and records what
// the hooks listener receives, what the consumed sources bring and a
// person's redeliveries, and queues each on its operator's Queue. The
// engine binds the listener, starts an operator's queue and consumers
// with it (apply.go), and tells the receiver which operators run here.

// HooksAddr returns the address the hooks listener is bound to (with the
// port chosen when Options.HooksAddr's is 0), or "" before an operator
// with a source is applied.
func (e *Engine) HooksAddr() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.hooksAddr
}

// ensureHooks binds the hooks listener, once.
func (e *Engine) ensureHooks(d *definition.Definition) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.hooksAddr != "" {
		return nil
	}
	addr := e.opts.HooksAddr
	if addr == "" || addr == "0" {
		return fmt.Errorf("operator %s: spec.sources: webhook sources need the engine's hooks listener, and it serves none: give it an address (opkit run --hooks-addr)", d.Operator.Name)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("operator %s: spec.sources: serving webhook deliveries: %w", d.Operator.Name, err)
	}
	shutdown := 5 * time.Second
	if err := e.mgr.Add(&manager.Server{
		Name: "webhook deliveries",
		Server: &http.Server{
			Handler:           e.receiver,
			ReadHeaderTimeout: 10 * time.Second,
			ReadTimeout:       30 * time.Second,
			WriteTimeout:      30 * time.Second,
			MaxHeaderBytes:    64 << 10,
		},
		Listener:        ln,
		ShutdownTimeout: &shutdown,
	}); err != nil {
		_ = ln.Close()
		return err
	}
	e.hooksAddr = ln.Addr().String()
	if e.opts.HooksEndpoint != nil {
		// Added once the engine acts: it runs at once, and stops with
		// the operators.
		if err := publish(e.mgr, e.opts.HooksEndpoint, hooksPortName, "webhook deliveries", e.hooksAddr); err != nil {
			return err
		}
	}
	return nil
}

// Inject hands a message to a running operator's consumed source as its
// consumer would (delivery.Receiver.Inject). opkit test's send steps use
// it in place of a GitHub, NATS or Kafka.
func (e *Engine) Inject(ctx context.Context, operator, sourceName string, m source.Message) (*archive.Delivery, int, error) {
	return e.receiver.Inject(ctx, operator, sourceName, m)
}

// sourceSecret reads a source's Secret key with reader, from the API
// server: a consumer's credentials at each of its connections (a rotated
// one is picked up by the next), the hooks' shared secret behind the
// receiver's cache.
func sourceSecret(reader client.Reader) func(context.Context, v1alpha1.SecretKeySelector) ([]byte, error) {
	return func(ctx context.Context, ref v1alpha1.SecretKeySelector) ([]byte, error) {
		v, err := secretValue(ctx, reader, ref.Namespace, ref.Name, ref.Key)
		if err != nil {
			return nil, fmt.Errorf("the source's Secret %s/%s: %w", ref.Namespace, ref.Name, err)
		}
		return v, nil
	}
}
