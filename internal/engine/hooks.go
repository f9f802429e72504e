package engine

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/delivery"
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
		if err := e.mgr.Add(manager.RunnableFunc(e.publishEndpoint(e.opts.HooksEndpoint, hooksPortName, "webhook deliveries", e.hooksAddr))); err != nil {
			return err
		}
	}
	return nil
}

// runningOperator is delivery.Receiver.Running: the operator of that name
// running here, and its queue of deliveries.
func (e *Engine) runningOperator(operator string) (*definition.Definition, *delivery.Queue, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	op, restarting := e.running[operator], e.restarting[operator]
	if op == nil {
		return nil, nil, restarting
	}
	return op.def, op.events, restarting
}

// Inject hands a message to a running operator's consumed source as its
// consumer would (delivery.Receiver.Inject). opkit test's send steps use
// it in place of a GitHub, NATS or Kafka.
func (e *Engine) Inject(ctx context.Context, operator, sourceName string, m source.Message) (*archive.Delivery, int, error) {
	return e.receiver.Inject(ctx, operator, sourceName, m)
}

// startConsumers starts a consumer for each consumed source of op, its
// messages queued on op.events; none with Options.ConsumeNothing.
func (e *Engine) startConsumers(op *operator) error {
	if e.opts.ConsumeNothing {
		return nil
	}
	cs, err := e.receiver.StartConsumers(e.ctx, op.def, op.events)
	if err != nil {
		return err
	}
	op.consumers = cs
	return nil
}

// sourcesReady is /readyz's check "sources": it fails while a consumer
// of a running operator cannot reach its source, naming each.
func (e *Engine) sourcesReady(*http.Request) error {
	e.mu.Lock()
	var failing []string
	for _, op := range e.running {
		failing = append(failing, op.consumers.Failing()...)
	}
	e.mu.Unlock()
	if len(failing) == 0 {
		return nil
	}
	sort.Strings(failing)
	return errors.New(strings.Join(failing, "; "))
}

// readSecret reads a source's Secret key from the API server: a
// consumer's credentials at each of its connections (a rotated one is
// picked up by the next), the hooks' shared secret behind the receiver's
// cache.
func (e *Engine) readSecret(ctx context.Context, ref v1alpha1.SecretKeySelector) ([]byte, error) {
	s, err := e.clientset.CoreV1().Secrets(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading the source's Secret %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	v, ok := secretKey(s, ref.Key)
	if !ok {
		return nil, fmt.Errorf("the source's Secret %s/%s has no key %q", ref.Namespace, ref.Name, ref.Key)
	}
	return v, nil
}

// secretKey returns a Secret's value for key, without surrounding space
// (a secret written with a trailing newline is the same secret).
func secretKey(s *corev1.Secret, key string) ([]byte, bool) {
	v, ok := s.Data[key]
	if !ok {
		return nil, false
	}
	return []byte(strings.TrimSpace(string(v))), true
}
