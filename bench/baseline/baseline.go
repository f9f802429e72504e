// Package baseline is the hand-written controller-runtime operator that the
// benchmarks measure opkit against. It is written the way a careful
// kubebuilder user would write it, without markers or code generation:
// a typed Printer, a reconciler that creates the Printer's ConfigMap with a
// controller ownerReference and then sets the status, the manager's
// defaults otherwise (cached reads, typed objects, no managedFields
// stripping), and an unlimited client rate.
//
// It serves the CRD that opkit's definition of the same workload installs
// (bench/printer.yaml): group bench.opkit.dev, kind Printer, spec.text, and
// status.configMap naming the child once it exists.
//
// The package also holds the counterpart of a watch operator (watch.go,
// bench/watch.yaml): Deployments of one namespace selected by label,
// handled once when first seen and once per change of their containers,
// with no write.
package baseline

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

// GroupVersion is the Printer's API version.
var GroupVersion = schema.GroupVersion{Group: "bench.opkit.dev", Version: "v1"}

// PrinterSpec is what the user asks for.
type PrinterSpec struct {
	Text string `json:"text"`
}

// PrinterStatus is what the operator reports.
type PrinterStatus struct {
	ObservedGeneration int64  `json:"observedGeneration,omitempty"`
	ConfigMap          string `json:"configMap,omitempty"`
}

// Printer is the custom resource.
type Printer struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   PrinterSpec   `json:"spec"`
	Status PrinterStatus `json:"status,omitempty"`
}

// PrinterList is a list of Printers.
type PrinterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Printer `json:"items"`
}

// DeepCopy returns a deep copy.
func (p *Printer) DeepCopy() *Printer {
	out := *p
	p.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return &out
}

// DeepCopyObject implements runtime.Object.
func (p *Printer) DeepCopyObject() runtime.Object { return p.DeepCopy() }

// DeepCopyObject implements runtime.Object.
func (l *PrinterList) DeepCopyObject() runtime.Object {
	out := *l
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	out.Items = make([]Printer, len(l.Items))
	for i := range l.Items {
		out.Items[i] = *l.Items[i].DeepCopy()
	}
	return &out
}

// NewScheme returns a scheme with the built-in kinds and Printer.
func NewScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	s.AddKnownTypes(GroupVersion, &Printer{}, &PrinterList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return s, nil
}

// ChildName is the name of a Printer's ConfigMap.
func ChildName(printer string) string { return printer + "-text" }

// Reconciler converges one Printer.
type Reconciler struct {
	client.Client
}

// Reconcile creates or updates the Printer's ConfigMap, then the status.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var p Printer
	if err := r.Get(ctx, req.NamespacedName, &p); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !p.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil // the ConfigMap goes by garbage collection
	}
	var cm corev1.ConfigMap
	key := client.ObjectKey{Namespace: p.Namespace, Name: ChildName(p.Name)}
	switch err := r.Get(ctx, key, &cm); {
	case apierrors.IsNotFound(err):
		cm = corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
			Data:       map[string]string{"text": p.Spec.Text},
		}
		if err := controllerutil.SetControllerReference(&p, &cm, r.Scheme()); err != nil {
			return ctrl.Result{}, err
		}
		if err := r.Create(ctx, &cm); err != nil && !apierrors.IsAlreadyExists(err) {
			return ctrl.Result{}, fmt.Errorf("creating ConfigMap %s: %w", key.Name, err)
		}
	case err != nil:
		return ctrl.Result{}, err
	case !metav1.IsControlledBy(&cm, &p):
		return ctrl.Result{}, fmt.Errorf("ConfigMap %s exists and is not controlled by Printer %s", key.Name, p.Name)
	case cm.Data["text"] != p.Spec.Text:
		cm.Data = map[string]string{"text": p.Spec.Text}
		if err := r.Update(ctx, &cm); err != nil {
			return ctrl.Result{}, fmt.Errorf("updating ConfigMap %s: %w", key.Name, err)
		}
	}
	if p.Status.ConfigMap == key.Name && p.Status.ObservedGeneration == p.Generation {
		return ctrl.Result{}, nil
	}
	patch := client.MergeFrom(p.DeepCopy())
	p.Status.ConfigMap, p.Status.ObservedGeneration = key.Name, p.Generation
	return ctrl.Result{}, client.IgnoreNotFound(r.Status().Patch(ctx, &p, patch))
}

// Setup registers the controller with mgr, with workers concurrent
// reconciles.
func Setup(mgr ctrl.Manager, workers int) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&Printer{}).
		Owns(&corev1.ConfigMap{}).
		WithOptions(controller.Options{MaxConcurrentReconciles: workers}).
		Complete(&Reconciler{Client: mgr.GetClient()})
}
