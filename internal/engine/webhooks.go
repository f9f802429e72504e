package engine

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/webhook"
)

// The operators' admission handlers (on validate or mutate) and the
// conversions of their CRDs are answered by the engine's webhook server
// (package webhook), which the API server is told to call by
// webhook.Operators: the admission webhook configurations and the CRDs'
// conversion webhooks, given the server's CA bundle again at each
// rotation. The engine makes the server from Options.Webhook and routes
// the admission calls to package admission.

// WebhookOptions configures the engine's webhook server.
type WebhookOptions struct {
	// Addr is the address the server listens on, e.g. 127.0.0.1:7383
	// (port 0: any free one). Required.
	Addr string
	// Host is the name or IP address the API server reaches the server
	// at, for an engine outside the cluster: the webhooks' URL is
	// https://<Host>:<the port bound>/..., and the serving certificate is
	// valid for Host. Defaults to Addr's host, which must then be one
	// address (127.0.0.1), not every one.
	Host string
	// Service is the Service the API server reaches the server through,
	// for an engine in the cluster; it replaces Host.
	Service *WebhookService
	// Endpoint, when set, names the EndpointSlice of Service, which the
	// engine that acts writes with its Pod's address and the server's
	// port (as the hooks', package endpoint): a standby runs no operator
	// and could answer no admission call, so the Service selects no Pods
	// and reaches the acting replica alone.
	Endpoint *HooksEndpoint
	// Secret names the Secret of the certificates, in SecretNamespace.
	// Defaults to DefaultWebhookSecret.
	Secret string
	// SecretNamespace is the engine's namespace. Defaults to the
	// Service's, else Options.Namespace, else "default".
	SecretNamespace string
	// Clock issues and rotates the certificates. Defaults to the real
	// clock.
	Clock clock.PassiveClock
	// CALifetime, ServingLifetime, Grace and CheckEvery tune the
	// rotation; their defaults are webhook.Options'.
	CALifetime, ServingLifetime, Grace, CheckEvery time.Duration
}

// WebhookService is a Service in front of the webhook server.
type WebhookService = webhook.Service

// DefaultWebhookSecret is the default name of the certificates' Secret.
const DefaultWebhookSecret = "opkit-webhook-certs"

// newWebhookServer makes the webhook server of opts.Webhook and registers
// the admission paths.
func (e *Engine) newWebhookServer() (*webhook.Server, error) {
	w := e.opts.Webhook
	if w.Addr == "" {
		return nil, errors.New("engine: WebhookOptions.Addr is required")
	}
	ns := w.SecretNamespace
	if ns == "" && w.Service != nil {
		ns = w.Service.Namespace
	}
	if ns == "" {
		ns = e.opts.Namespace
	}
	if ns == "" {
		ns = corev1.NamespaceDefault
	}
	name := w.Secret
	if name == "" {
		name = DefaultWebhookSecret
	}
	var names []string
	switch {
	case w.Service != nil:
		if w.Service.Namespace == "" || w.Service.Name == "" {
			return nil, errors.New("engine: WebhookOptions.Service needs a namespace and a name")
		}
		svc := w.Service.Name + "." + w.Service.Namespace + ".svc"
		names = []string{svc, svc + ".cluster.local"}
	case w.Host != "":
		names = []string{w.Host}
	default:
		host, _, err := net.SplitHostPort(w.Addr)
		if err != nil {
			return nil, fmt.Errorf("engine: the webhook address %q: %w", w.Addr, err)
		}
		if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
			return nil, fmt.Errorf("engine: the webhook server listens on %q, every address: say which one the API server reaches it at (opkit run --webhook-host)", w.Addr)
		}
		names = []string{host}
	}
	srv, err := webhook.New(webhook.Options{
		Addr: w.Addr, Names: names, Secret: types.NamespacedName{Namespace: ns, Name: name}, Secrets: e.clientset.CoreV1(),
		Clock: w.Clock, CALifetime: w.CALifetime, ServingLifetime: w.ServingLifetime, Grace: w.Grace, CheckEvery: w.CheckEvery,
		OnBundle: func(ctx context.Context, _ []byte) error { return e.webhooks.OnBundle(ctx, e.Definitions()) }, Log: e.mgr.GetLogger().WithName("webhook"),
	})
	if err != nil {
		return nil, err
	}
	e.admission.MaxBodyBytes = srv.MaxBodyBytes()
	srv.Handle("/validate/", e.admission.Handler())
	srv.Handle("/mutate/", e.admission.Handler())
	srv.Handle(definition.ConversionPath(""), e.webhooks.ConversionHandler())
	if h := w.Endpoint; h != nil {
		if err := h.Check("the webhook server's EndpointSlice"); err != nil {
			return nil, err
		}
		// Added as a runnable that needs leadership: only the acting
		// engine writes it.
		if err := publish(e.mgr, h, webhookPortName, "admission calls", srv.Addr()); err != nil {
			return nil, err
		}
	}
	return srv, nil
}

// WebhookAddr is the address the webhook server listens on, or "".
func (e *Engine) WebhookAddr() string {
	if e.webhooks.Server == nil {
		return ""
	}
	return e.webhooks.Server.Addr()
}

// WebhookConfigName is the name of the Validating and Mutating
// WebhookConfigurations of an operator, for an engine of namespace ns
// ("" for every namespace).
func WebhookConfigName(operator, ns string) string { return webhook.ConfigName(operator, ns) }
