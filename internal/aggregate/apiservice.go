package aggregate

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// fieldManager owns what Register applies.
const fieldManager = "opkit"

// apiServices is the resource of APIService objects.
var apiServices = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

// API is an aggregated API as it is registered: an APIService for
// Group/Version whose requests go to Service's Port.
type API struct {
	// Group is the API group, e.g. runs.opkit.dev. Required.
	Group string
	// Version is the group's version, e.g. v1alpha1. Required.
	Version string
	// Service is the Service the aggregator proxies to: its namespace and
	// name. Required.
	Service types.NamespacedName
	// Port is the Service's port; with ExternalName, the port the server
	// listens on. Required, but for NewServer's API with an ExternalName,
	// which defaults it to the server's port.
	Port int32
	// GroupPriorityMinimum orders the group among all groups in discovery
	// (higher first). Defaults to 1000.
	GroupPriorityMinimum int32
	// VersionPriority orders the version within its group (higher first).
	// Defaults to 15.
	VersionPriority int32
	// ExternalName, when set, makes Register also apply Service as a
	// Service of type ExternalName pointing at this host or address, for
	// a server that runs outside the cluster: on the local plane,
	// "127.0.0.1". Defaults to "": the Service is the caller's (a
	// manifest's ClusterIP Service in front of the engine's Pods) and
	// Register leaves it alone.
	ExternalName string
}

// Name is the APIService's name, <version>.<group>.
func (a API) Name() string { return a.Version + "." + a.Group }

// ServingName is the name the aggregator verifies the server's
// certificate against (the TLS ServerName it sends),
// <service>.<namespace>.svc, whatever address it reaches the server at.
func (a API) ServingName() string { return ServingName(a.Service) }

// ServingName is <name>.<namespace>.svc for a Service.
func ServingName(svc types.NamespacedName) string {
	return svc.Name + "." + svc.Namespace + ".svc"
}

// check says what is wrong with a, naming the field.
func (a API) check() error {
	var errs []error
	if msgs := validation.IsDNS1123Subdomain(a.Group); a.Group == "" || len(msgs) > 0 || !strings.Contains(a.Group, ".") {
		errs = append(errs, fmt.Errorf("API.Group %q: want a DNS subdomain with a dot, e.g. runs.opkit.dev", a.Group))
	}
	if msgs := validation.IsDNS1035Label(a.Version); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("API.Version %q: %s", a.Version, strings.Join(msgs, "; ")))
	}
	if a.Service.Namespace == "" || a.Service.Name == "" {
		errs = append(errs, fmt.Errorf("API.Service %q: want a namespace and a name", a.Service))
	}
	if a.Port < 1 || a.Port > 65535 {
		errs = append(errs, fmt.Errorf("API.Port %d: want 1 to 65535", a.Port))
	}
	if a.ExternalName != "" {
		if msgs := validation.IsDNS1123Subdomain(a.ExternalName); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("API.ExternalName %q: %s", a.ExternalName, strings.Join(msgs, "; ")))
		}
	}
	return errors.Join(errs...)
}

// Registrar registers, checks and removes aggregated APIs.
type Registrar struct {
	dyn  dynamic.Interface
	core kubernetes.Interface
}

// NewRegistrar returns a Registrar that talks to the API server of cfg,
// whose user may write APIServices (cluster-wide) and, for an API with
// an ExternalName, Services in its namespace.
func NewRegistrar(cfg *rest.Config) (*Registrar, error) {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("aggregate: %w", err)
	}
	core, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("aggregate: %w", err)
	}
	return &Registrar{dyn: dyn, core: core}, nil
}

// Register applies the APIService of api, with caBundle (PEM) as the CAs
// that sign the server's certificate, and, when api.ExternalName is set,
// its Service of type ExternalName.
func (r *Registrar) Register(ctx context.Context, api API, caBundle []byte) error {
	if err := api.check(); err != nil {
		return fmt.Errorf("aggregate: %w", err)
	}
	if len(caBundle) == 0 {
		return fmt.Errorf("aggregate: registering %s: the caBundle is empty; the aggregator would trust no certificate", api.Name())
	}
	if api.ExternalName != "" {
		svc := corev1ac.Service(api.Service.Name, api.Service.Namespace).
			WithLabels(map[string]string{"app.kubernetes.io/managed-by": "opkit"}).
			WithSpec(corev1ac.ServiceSpec().
				WithType(corev1.ServiceTypeExternalName).
				WithExternalName(api.ExternalName).
				WithPorts(corev1ac.ServicePort().WithName("https").WithPort(api.Port)))
		if _, err := r.core.CoreV1().Services(api.Service.Namespace).Apply(ctx, svc, metav1.ApplyOptions{FieldManager: fieldManager, Force: true}); err != nil {
			return fmt.Errorf("aggregate: applying Service %s of type ExternalName: %w", api.Service, err)
		}
	}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1",
		"kind":       "APIService",
		"metadata": map[string]any{
			"name":   api.Name(),
			"labels": map[string]any{"app.kubernetes.io/managed-by": "opkit"},
		},
		"spec": map[string]any{
			"group":                api.Group,
			"version":              api.Version,
			"groupPriorityMinimum": int64(cmp.Or(api.GroupPriorityMinimum, 1000)),
			"versionPriority":      int64(cmp.Or(api.VersionPriority, 15)),
			"caBundle":             base64.StdEncoding.EncodeToString(caBundle),
			"service": map[string]any{
				"namespace": api.Service.Namespace,
				"name":      api.Service.Name,
				"port":      int64(api.Port),
			},
		},
	}}
	if _, err := r.dyn.Resource(apiServices).Apply(ctx, api.Name(), obj, metav1.ApplyOptions{FieldManager: fieldManager, Force: true}); err != nil {
		return fmt.Errorf("aggregate: applying APIService %s: %w", api.Name(), err)
	}
	return nil
}

// Unregister removes the APIService of api and, when api.ExternalName is
// set, its Service. What does not exist is no error.
func (r *Registrar) Unregister(ctx context.Context, api API) error {
	if err := r.dyn.Resource(apiServices).Delete(ctx, api.Name(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("aggregate: deleting APIService %s: %w", api.Name(), err)
	}
	if api.ExternalName == "" {
		return nil
	}
	if err := r.core.CoreV1().Services(api.Service.Namespace).Delete(ctx, api.Service.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("aggregate: deleting Service %s: %w", api.Service, err)
	}
	return nil
}

// Availability is the Available condition of an APIService.
type Availability struct {
	// Available is true when the condition's status is True.
	Available bool
	// Reason and Message are the condition's; both are empty before the
	// aggregator has checked the APIService.
	Reason, Message string
}

// String is the condition as a message names it.
func (a Availability) String() string {
	switch {
	case a.Available:
		return "Available"
	case a.Reason == "" && a.Message == "":
		return "not checked by the aggregator yet"
	}
	return "not Available: " + a.Reason + ": " + a.Message
}

// Status reads the Available condition of api's APIService.
func (r *Registrar) Status(ctx context.Context, api API) (Availability, error) {
	obj, err := r.dyn.Resource(apiServices).Get(ctx, api.Name(), metav1.GetOptions{})
	if err != nil {
		return Availability{}, fmt.Errorf("aggregate: reading APIService %s: %w", api.Name(), err)
	}
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range conds {
		m, ok := c.(map[string]any)
		if !ok || m["type"] != "Available" {
			continue
		}
		reason, _ := m["reason"].(string)
		msg, _ := m["message"].(string)
		return Availability{Available: m["status"] == "True", Reason: reason, Message: msg}, nil
	}
	return Availability{}, nil
}

// WaitAvailable waits until api's APIService reports Available, at most
// timeout. Its error names the APIService and the condition's reason and
// message last read, e.g. the aggregator's failure to reach the server.
func (r *Registrar) WaitAvailable(ctx context.Context, api API, timeout time.Duration) error {
	var last Availability
	var lastErr error
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		a, err := r.Status(ctx, api)
		if ctx.Err() != nil {
			return false, nil // cut by the timeout: the answer before it is the news
		}
		last, lastErr = a, err
		return err == nil && a.Available, nil
	})
	if err == nil {
		return nil
	}
	if lastErr != nil {
		return fmt.Errorf("aggregate: APIService %s is not Available after %s: %w", api.Name(), timeout, lastErr)
	}
	return fmt.Errorf("aggregate: APIService %s is not Available after %s: %s", api.Name(), timeout, last)
}
