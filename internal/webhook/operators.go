package webhook

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"sync"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/definition"
)

// The operators' admission handlers (on validate or mutate) are served by
// the webhook server on POST /validate/<operator>/<handler> and
// /mutate/<operator>/<handler> (package admission answers them). For each
// operator with such handlers, Operators applies a
// ValidatingWebhookConfiguration and a MutatingWebhookConfiguration named
// opkit.dev.<operator> (.<namespace> for an engine of one namespace, bound
// to it), one webhook per handler, with the server's caBundle, and applies
// them again whenever the bundle changes (a rotation); an operator that
// no longer has them, or is removed, has its configurations deleted. The
// API server reaches the server by URL (an engine outside the cluster:
// Operators.Host) or through a Service (Operators.Service).
//
// An update that changes nothing of the spec (a label, a finalizer, the
// status) is not sent to the handlers: opkit adds a match condition
// saying so, so that the engine's own metadata writes never wait for, or
// are refused by, a handler.

// Operators tells the API server to call the webhook server for the
// operators an engine runs: their admission webhook configurations and
// the conversion webhook of their CRDs (conversions.go), and answers the
// conversion calls. Server is nil for an engine without a webhook
// server: it then serves no admission and no conversion, and installs
// CRDs without a conversion webhook. The zero value is not ready: set
// the fields, then use it; it is safe for concurrent use.
type Operators struct {
	Server *Server
	Client client.Client
	// Reader reads CRDs from the API (the cache does not watch them).
	Reader client.Reader
	// Namespace is the engine's one namespace ("" for all): its
	// configurations are its own, bound to it.
	Namespace string
	// Service is the Service the API server reaches the server through;
	// nil: by URL, at Host (or the server's address's host).
	Service *Service
	Host    string
	// FieldManager applies the configurations; ApplyCRD a CRD, as the
	// engine installs every CRD.
	FieldManager string
	ApplyCRD     func(context.Context, *apiextensionsv1.CustomResourceDefinition) error
	Log          logr.Logger

	// mu orders the writes of the configurations and of the CRDs' CA
	// bundle.
	mu sync.Mutex
	// converters answer the operators' conversion calls, by Operator
	// name, replaced whole when a definition is installed.
	convMu     sync.Mutex
	converters map[string]*converter
}

// Service is a Service in front of the webhook server.
type Service struct {
	Namespace, Name string
	// Port is the Service's port. Defaults to 443.
	Port int32
}

// port is the Service's port, defaulted.
func (s *Service) port() int32 {
	if s.Port == 0 {
		return 443
	}
	return s.Port
}

// specChangedCondition is opkit's match condition: an update that leaves
// the spec alone is not sent to admission handlers.
var specChangedCondition = admissionregistrationv1.MatchCondition{
	Name:       "opkit.dev/spec-changed",
	Expression: `request.operation != "UPDATE" || !has(object.spec) || !has(oldObject.spec) || object.spec != oldObject.spec`,
}

// ConfigName is the name of the Validating and Mutating
// WebhookConfigurations of an operator, for an engine of namespace ns
// ("" for every namespace).
func ConfigName(operator, ns string) string {
	if ns != "" {
		return "opkit.dev." + operator + "." + ns
	}
	return "opkit.dev." + operator
}

// url is the base URL of the server, when it is reached by URL.
func (o *Operators) url() string {
	host, port, _ := net.SplitHostPort(o.Server.Addr())
	if o.Host != "" {
		host = o.Host
	}
	return (&url.URL{Scheme: "https", Host: net.JoinHostPort(host, port)}).String()
}

// waitReady waits, up to a minute, until the server has its certificate.
func (o *Operators) waitReady(ctx context.Context, operator string) error {
	wait, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := o.Server.WaitReady(wait); err != nil {
		return fmt.Errorf("operator %s: the webhook server has no certificate yet (is the Secret %s readable and writable?): %w", operator, o.Server.Secret(), err)
	}
	return nil
}

// Admit readies d's admission handlers: the webhook server must serve
// (its certificate made), then the configurations are applied; an
// operator without them has its configurations deleted.
func (o *Operators) Admit(ctx context.Context, d *definition.Definition) error {
	if len(d.Admission) == 0 {
		if o.Server == nil {
			return nil
		}
		return o.deleteConfigs(ctx, d.Operator.Name)
	}
	if err := o.waitReady(ctx, d.Operator.Name); err != nil {
		return err
	}
	if err := o.applyConfigs(ctx, d); err != nil {
		return fmt.Errorf("operator %s: applying its admission webhooks: %w", d.Operator.Name, err)
	}
	return nil
}

// Remove deletes a removed operator's configurations: with failurePolicy
// Fail, nothing of its kind could be written. The log says what failed.
func (o *Operators) Remove(ctx context.Context, operator string) {
	if o.Server == nil {
		return
	}
	if err := o.deleteConfigs(ctx, operator); err != nil {
		o.Log.Error(err, "deleting the removed operator's admission webhooks; delete them by hand", "operator", operator, "name", ConfigName(operator, o.Namespace))
	}
}

// Stop is called as the engine stops, with the operators it answered
// admission calls for. An engine of one namespace (a test's) takes its
// webhooks with it: their configurations are its own, and would otherwise
// point at a port nothing serves. An engine of every namespace leaves
// them, so that a restart does not open a window without them.
func (o *Operators) Stop(ctx context.Context, operators []string) {
	if o.Server == nil || o.Namespace == "" {
		return
	}
	stop, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	for _, name := range operators {
		if err := o.deleteConfigs(stop, name); err != nil {
			o.Log.Error(err, "deleting the admission webhooks of a stopped engine", "operator", name)
		}
	}
}

// OnBundle gives the server's new CA bundle to the configurations of
// defs with admission handlers, and to the CRDs whose conversion is
// answered here (the server's Options.OnBundle).
func (o *Operators) OnBundle(ctx context.Context, defs []*definition.Definition) error {
	var errs []error
	if err := o.injectConversionBundle(ctx); err != nil {
		errs = append(errs, err)
	}
	for _, d := range defs {
		if len(d.Admission) == 0 {
			continue
		}
		if err := o.applyConfigs(ctx, d); err != nil {
			errs = append(errs, fmt.Errorf("operator %s: %w", d.Operator.Name, err))
		}
	}
	return errors.Join(errs...)
}

// clientConfig is how the API server reaches path on the server: its
// Service, or its URL.
func (o *Operators) clientConfig(path string) (svc *Service, u *string) {
	if o.Service != nil {
		return o.Service, nil
	}
	return nil, ptr.To(o.url() + path)
}

// applyConfigs applies (or deletes) the webhook configurations of d with
// the server's current bundle.
func (o *Operators) applyConfigs(ctx context.Context, d *definition.Definition) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(d.Admission) == 0 {
		return o.deleteConfigsLocked(ctx, d.Operator.Name)
	}
	name := ConfigName(d.Operator.Name, o.Namespace)
	var validating []admissionregistrationv1.ValidatingWebhook
	var mutating []admissionregistrationv1.MutatingWebhook
	for _, h := range d.Admission {
		wh := o.admissionWebhook(d, h)
		if h.Admission.Mutate {
			mutating = append(mutating, admissionregistrationv1.MutatingWebhook{
				Name: wh.Name, ClientConfig: wh.ClientConfig, Rules: wh.Rules, FailurePolicy: wh.FailurePolicy,
				MatchPolicy: wh.MatchPolicy, NamespaceSelector: wh.NamespaceSelector, SideEffects: wh.SideEffects,
				TimeoutSeconds: wh.TimeoutSeconds, AdmissionReviewVersions: wh.AdmissionReviewVersions,
				ReinvocationPolicy: ptr.To(admissionregistrationv1.NeverReinvocationPolicy), MatchConditions: wh.MatchConditions,
			})
			continue
		}
		validating = append(validating, wh)
	}
	meta := metav1.ObjectMeta{Name: name, Labels: map[string]string{definition.OperatorLabel: d.Operator.Name}}
	var objs, gone []client.Object
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
		if err := o.Client.Apply(ctx, apply, client.FieldOwner(o.FieldManager), client.ForceOwnership); err != nil {
			return fmt.Errorf("%s %s: %w", obj.GetObjectKind().GroupVersionKind().Kind, name, err)
		}
	}
	return deleteAll(ctx, o.Client, gone...)
}

// admissionWebhook is the webhook of one admission handler of d, as a
// validating one (a mutating one has the same fields and one more).
func (o *Operators) admissionWebhook(d *definition.Definition, h *definition.Handler) admissionregistrationv1.ValidatingWebhook {
	a := h.Admission
	path := "/" + a.Trigger() + "/" + d.Operator.Name + "/" + h.Name
	cc := admissionregistrationv1.WebhookClientConfig{CABundle: o.Server.CABundle()}
	if s, u := o.clientConfig(path); s != nil {
		cc.Service = &admissionregistrationv1.ServiceReference{Namespace: s.Namespace, Name: s.Name, Path: &path, Port: ptr.To(s.port())}
	} else {
		cc.URL = u
	}
	ops := make([]admissionregistrationv1.OperationType, len(a.Operations))
	for i, op := range a.Operations {
		ops[i] = admissionregistrationv1.OperationType(op)
	}
	conds := []admissionregistrationv1.MatchCondition{specChangedCondition}
	for _, c := range a.MatchConditions {
		conds = append(conds, admissionregistrationv1.MatchCondition{Name: c.Name, Expression: c.Expression})
	}
	var nsSel *metav1.LabelSelector
	if ns := o.Namespace; ns != "" {
		nsSel = &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}}
	}
	policy := admissionregistrationv1.Fail
	if a.FailurePolicy == v1alpha1.FailurePolicyIgnore {
		policy = admissionregistrationv1.Ignore
	}
	return admissionregistrationv1.ValidatingWebhook{
		Name: h.Name + "." + d.Operator.Name + ".opkit.dev", ClientConfig: cc,
		Rules: []admissionregistrationv1.RuleWithOperations{{
			Operations: ops,
			// The version handlers read (docs/conversion.md): with the
			// Equivalent match policy, the API server converts a request
			// made at another version to it before calling, so that a
			// handler's object is always of the version its types are.
			Rule: admissionregistrationv1.Rule{APIGroups: []string{d.GVK.Group}, APIVersions: []string{d.GVK.Version}, Resources: []string{d.Plural}},
		}},
		FailurePolicy: &policy, MatchPolicy: ptr.To(admissionregistrationv1.Equivalent), NamespaceSelector: nsSel,
		SideEffects: ptr.To(admissionregistrationv1.SideEffectClassNone), TimeoutSeconds: ptr.To(int32(a.Timeout / time.Second)),
		AdmissionReviewVersions: []string{"v1"}, MatchConditions: conds,
	}
}

// deleteConfigs deletes an operator's webhook configurations, if any.
func (o *Operators) deleteConfigs(ctx context.Context, operator string) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.deleteConfigsLocked(ctx, operator)
}

func (o *Operators) deleteConfigsLocked(ctx context.Context, operator string) error {
	name := ConfigName(operator, o.Namespace)
	return deleteAll(ctx, o.Client,
		&admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}},
		&admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}})
}

// deleteAll deletes each of objs in turn, those already gone included,
// and stops at the first other error.
func deleteAll(ctx context.Context, c client.Client, objs ...client.Object) error {
	for _, obj := range objs {
		if err := c.Delete(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}
