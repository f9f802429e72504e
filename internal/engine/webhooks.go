package engine

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/webhook"
)

// The operators' admission handlers (on validate or mutate) are served by
// the engine's webhook server (package webhook) on
// POST /validate/<operator>/<handler> and /mutate/<operator>/<handler>
// (package admission). For each operator with such handlers the engine applies a
// ValidatingWebhookConfiguration and a MutatingWebhookConfiguration named
// opkit.dev.<operator> (.<namespace> for an engine of one namespace, bound
// to it), one webhook per handler, with the server's caBundle, and applies
// them again whenever the bundle changes (a rotation); an operator that
// no longer has them, or is removed, has its configurations deleted. The
// API server reaches the server by URL (an engine outside the cluster:
// WebhookOptions.Host) or through a Service (WebhookOptions.Service).
//
// An update that changes nothing of the spec (a label, a finalizer, the
// status) is not sent to the handlers: opkit adds a match condition
// saying so, so that the engine's own metadata writes never wait for, or
// are refused by, a handler.

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
type WebhookService struct {
	Namespace, Name string
	// Port is the Service's port. Defaults to 443.
	Port int32
}

// port is the Service's port, defaulted.
func (s *WebhookService) port() int32 {
	if s.Port == 0 {
		return 443
	}
	return s.Port
}

// DefaultWebhookSecret is the default name of the certificates' Secret.
const DefaultWebhookSecret = "opkit-webhook-certs"

// specChangedCondition is opkit's match condition: an update that leaves
// the spec alone is not sent to admission handlers.
var specChangedCondition = admissionregistrationv1.MatchCondition{
	Name:       "opkit.dev/spec-changed",
	Expression: `request.operation != "UPDATE" || !has(object.spec) || !has(oldObject.spec) || object.spec != oldObject.spec`,
}

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
		OnBundle: e.injectBundle, Log: e.mgr.GetLogger().WithName("webhook"),
	})
	if err != nil {
		return nil, err
	}
	e.admission.MaxBodyBytes = srv.MaxBodyBytes()
	srv.Handle("/validate/", e.admission.Handler())
	srv.Handle("/mutate/", e.admission.Handler())
	srv.Handle(definition.ConversionPath(""), e.conversionHandler())
	if h := w.Endpoint; h != nil {
		if err := h.Check("the webhook server's EndpointSlice"); err != nil {
			return nil, err
		}
		// Added as a runnable that needs leadership: only the acting
		// engine writes it.
		if err := e.mgr.Add(manager.RunnableFunc(e.publishEndpoint(h, webhookPortName, "admission calls", srv.Addr()))); err != nil {
			return nil, err
		}
	}
	return srv, nil
}

// WebhookAddr is the address the webhook server listens on, or "".
func (e *Engine) WebhookAddr() string {
	if e.webhook == nil {
		return ""
	}
	return e.webhook.Addr()
}

// webhookURL is the base URL of the server, when it is reached by URL.
func (e *Engine) webhookURL() string {
	host, port, _ := net.SplitHostPort(e.webhook.Addr())
	if h := e.opts.Webhook.Host; h != "" {
		host = h
	}
	return (&url.URL{Scheme: "https", Host: net.JoinHostPort(host, port)}).String()
}

// webhookConfigName names an operator's webhook configurations.
func (e *Engine) webhookConfigName(operator string) string {
	if e.opts.Namespace != "" {
		return "opkit.dev." + operator + "." + e.opts.Namespace
	}
	return "opkit.dev." + operator
}

// WebhookConfigName is the name of the Validating and Mutating
// WebhookConfigurations of an operator, for an engine of namespace ns
// ("" for every namespace).
func WebhookConfigName(operator, ns string) string {
	if ns != "" {
		return "opkit.dev." + operator + "." + ns
	}
	return "opkit.dev." + operator
}

// applyWebhooks applies (or deletes) the webhook configurations of d with
// the server's current bundle.
func (e *Engine) applyWebhooks(ctx context.Context, d *definition.Definition) error {
	e.webhookMu.Lock()
	defer e.webhookMu.Unlock()
	return e.applyWebhooksLocked(ctx, d)
}

func (e *Engine) applyWebhooksLocked(ctx context.Context, d *definition.Definition) error {
	if len(d.Admission) == 0 {
		return e.deleteWebhooksLocked(ctx, d.Operator.Name)
	}
	bundle := e.webhook.CABundle()
	name := e.webhookConfigName(d.Operator.Name)
	labels := map[string]string{definition.OperatorLabel: d.Operator.Name}
	var validating []admissionregistrationv1.ValidatingWebhook
	var mutating []admissionregistrationv1.MutatingWebhook
	for _, h := range d.Admission {
		a := h.Admission
		path := "/" + a.Trigger() + "/" + d.Operator.Name + "/" + h.Name
		cc := admissionregistrationv1.WebhookClientConfig{CABundle: bundle}
		if s := e.opts.Webhook.Service; s != nil {
			cc.Service = &admissionregistrationv1.ServiceReference{Namespace: s.Namespace, Name: s.Name, Path: &path, Port: ptr.To(s.port())}
		} else {
			cc.URL = ptr.To(e.webhookURL() + path)
		}
		ops := make([]admissionregistrationv1.OperationType, len(a.Operations))
		for i, op := range a.Operations {
			ops[i] = admissionregistrationv1.OperationType(op)
		}
		rules := []admissionregistrationv1.RuleWithOperations{{
			Operations: ops,
			Rule:       admissionregistrationv1.Rule{APIGroups: []string{d.GVK.Group}, APIVersions: []string{"*"}, Resources: []string{d.Plural}},
		}}
		conds := []admissionregistrationv1.MatchCondition{specChangedCondition}
		for _, c := range a.MatchConditions {
			conds = append(conds, admissionregistrationv1.MatchCondition{Name: c.Name, Expression: c.Expression})
		}
		var nsSel *metav1.LabelSelector
		if ns := e.opts.Namespace; ns != "" {
			nsSel = &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}}
		}
		policy := admissionregistrationv1.Fail
		if a.FailurePolicy == v1alpha1.FailurePolicyIgnore {
			policy = admissionregistrationv1.Ignore
		}
		whName := h.Name + "." + d.Operator.Name + ".opkit.dev"
		timeout := int32(a.Timeout / time.Second)
		if a.Mutate {
			mutating = append(mutating, admissionregistrationv1.MutatingWebhook{
				Name: whName, ClientConfig: cc, Rules: rules, FailurePolicy: &policy,
				MatchPolicy: ptr.To(admissionregistrationv1.Equivalent), NamespaceSelector: nsSel,
				SideEffects: ptr.To(admissionregistrationv1.SideEffectClassNone), TimeoutSeconds: &timeout,
				AdmissionReviewVersions: []string{"v1"}, ReinvocationPolicy: ptr.To(admissionregistrationv1.NeverReinvocationPolicy),
				MatchConditions: conds,
			})
			continue
		}
		validating = append(validating, admissionregistrationv1.ValidatingWebhook{
			Name: whName, ClientConfig: cc, Rules: rules, FailurePolicy: &policy,
			MatchPolicy: ptr.To(admissionregistrationv1.Equivalent), NamespaceSelector: nsSel,
			SideEffects: ptr.To(admissionregistrationv1.SideEffectClassNone), TimeoutSeconds: &timeout,
			AdmissionReviewVersions: []string{"v1"}, MatchConditions: conds,
		})
	}
	meta := metav1.ObjectMeta{Name: name, Labels: labels}
	var objs []client.Object
	var gone []client.Object
	if len(validating) > 0 {
		objs = append(objs, &admissionregistrationv1.ValidatingWebhookConfiguration{
			TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingWebhookConfiguration"},
			ObjectMeta: meta, Webhooks: validating,
		})
	} else {
		gone = append(gone, &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}})
	}
	if len(mutating) > 0 {
		objs = append(objs, &admissionregistrationv1.MutatingWebhookConfiguration{
			TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "MutatingWebhookConfiguration"},
			ObjectMeta: meta, Webhooks: mutating,
		})
	} else {
		gone = append(gone, &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}})
	}
	for _, obj := range objs {
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		if err != nil {
			return err
		}
		apply := client.ApplyConfigurationFromUnstructured(&unstructured.Unstructured{Object: u})
		if err := e.client.Apply(ctx, apply, client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
			return fmt.Errorf("%s %s: %w", obj.GetObjectKind().GroupVersionKind().Kind, name, err)
		}
	}
	return deleteAll(ctx, e.client, gone...)
}

// deleteWebhooks deletes an operator's webhook configurations, if any.
func (e *Engine) deleteWebhooks(ctx context.Context, operator string) error {
	e.webhookMu.Lock()
	defer e.webhookMu.Unlock()
	return e.deleteWebhooksLocked(ctx, operator)
}

func (e *Engine) deleteWebhooksLocked(ctx context.Context, operator string) error {
	name := e.webhookConfigName(operator)
	return deleteAll(ctx, e.client,
		&admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}},
		&admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}})
}

// injectBundle is the server's OnBundle: every running operator's
// configurations, and the CRDs whose conversion the engine answers, get
// the new bundle.
func (e *Engine) injectBundle(ctx context.Context, _ []byte) error {
	var errs []error
	if err := e.injectConversionBundle(ctx); err != nil {
		errs = append(errs, err)
	}
	for _, d := range e.Definitions() {
		if len(d.Admission) == 0 {
			continue
		}
		if err := e.applyWebhooks(ctx, d); err != nil {
			errs = append(errs, fmt.Errorf("operator %s: %w", d.Operator.Name, err))
		}
	}
	return errors.Join(errs...)
}

// serveAdmission readies an operator with admission handlers: the
// webhook server must serve (its certificate made), then the
// configurations are applied; an operator without them has its
// configurations deleted.
func (e *Engine) serveAdmission(ctx context.Context, d *definition.Definition) error {
	if len(d.Admission) == 0 {
		if e.webhook == nil {
			return nil
		}
		return e.deleteWebhooks(ctx, d.Operator.Name)
	}
	wait, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := e.webhook.WaitReady(wait); err != nil {
		return fmt.Errorf("operator %s: the webhook server has no certificate yet (is the Secret %s readable and writable?): %w", d.Operator.Name, e.webhook.Secret(), err)
	}
	if err := e.applyWebhooks(ctx, d); err != nil {
		return fmt.Errorf("operator %s: applying its admission webhooks: %w", d.Operator.Name, err)
	}
	return nil
}

// removeAdmission stops answering a removed operator's admission calls
// and deletes its webhooks: with failurePolicy Fail, nothing of its kind
// could be written.
func (e *Engine) removeAdmission(ctx context.Context, name string) {
	e.admission.Remove(name)
	if e.webhook == nil {
		return
	}
	if err := e.deleteWebhooks(ctx, name); err != nil {
		e.mgr.GetLogger().Error(err, "deleting the removed operator's admission webhooks; delete them by hand", "operator", name, "name", e.webhookConfigName(name))
	}
}

// stopAdmission ends the admitters as the engine stops. An engine of one
// namespace (a test's) takes its webhooks with it: their configurations
// are its own, and would otherwise point at a port nothing serves. An
// engine of every namespace leaves them, so that a restart does not open
// a window without them.
func (e *Engine) stopAdmission(ctx context.Context) {
	admitters := e.admission.Stop()
	if e.webhook == nil || e.opts.Namespace == "" {
		return
	}
	stop, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	for _, name := range admitters {
		if err := e.deleteWebhooks(stop, name); err != nil {
			e.mgr.GetLogger().Error(err, "deleting the admission webhooks of a stopped engine", "operator", name)
		}
	}
}
