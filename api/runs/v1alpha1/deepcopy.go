package v1alpha1

import (
	"slices"

	"k8s.io/apimachinery/pkg/runtime"
)

// The deep copies below are written by hand, as api/v1alpha1's are.

var (
	_ runtime.Object = &Run{}
	_ runtime.Object = &RunList{}
	_ runtime.Object = &Delivery{}
	_ runtime.Object = &DeliveryList{}
)

// DeepCopyObject implements runtime.Object.
func (r *Run) DeepCopyObject() runtime.Object { return r.DeepCopy() }

// DeepCopy returns a deep copy.
func (r *Run) DeepCopy() *Run {
	if r == nil {
		return nil
	}
	out := &Run{TypeMeta: r.TypeMeta, Spec: r.Spec, Status: r.Status}
	r.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Status.FinishedAt = r.Status.FinishedAt.DeepCopy()
	out.Status.NextRetryAt = r.Status.NextRetryAt.DeepCopy()
	return out
}

// DeepCopyObject implements runtime.Object.
func (l *RunList) DeepCopyObject() runtime.Object { return l.DeepCopy() }

// DeepCopy returns a deep copy.
func (l *RunList) DeepCopy() *RunList {
	if l == nil {
		return nil
	}
	out := &RunList{TypeMeta: l.TypeMeta}
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	if l.Items != nil {
		out.Items = make([]Run, len(l.Items))
		for i := range l.Items {
			out.Items[i] = *l.Items[i].DeepCopy()
		}
	}
	return out
}

// DeepCopyObject implements runtime.Object.
func (d *Delivery) DeepCopyObject() runtime.Object { return d.DeepCopy() }

// DeepCopy returns a deep copy.
func (d *Delivery) DeepCopy() *Delivery {
	if d == nil {
		return nil
	}
	out := &Delivery{TypeMeta: d.TypeMeta, Spec: d.Spec, Status: d.Status}
	d.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Status.HandledAt = d.Status.HandledAt.DeepCopy()
	out.Status.Runs = slices.Clone(d.Status.Runs)
	out.Status.Objects = slices.Clone(d.Status.Objects)
	return out
}

// DeepCopyObject implements runtime.Object.
func (l *DeliveryList) DeepCopyObject() runtime.Object { return l.DeepCopy() }

// DeepCopy returns a deep copy.
func (l *DeliveryList) DeepCopy() *DeliveryList {
	if l == nil {
		return nil
	}
	out := &DeliveryList{TypeMeta: l.TypeMeta}
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	if l.Items != nil {
		out.Items = make([]Delivery, len(l.Items))
		for i := range l.Items {
			out.Items[i] = *l.Items[i].DeepCopy()
		}
	}
	return out
}
