package plan

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/cause"
	"github.com/opkit-dev/opkit/internal/compare"
	"github.com/opkit-dev/opkit/internal/converge"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/inventory"
)

// planner plans the objects of one operator; object is safe to call from
// several goroutines.
type planner struct {
	c        client.Client
	old, def *definition.Definition
	now      time.Time
	// paused: the whole operator is paused (Options.Paused).
	paused bool

	mu sync.Mutex
	// live holds the children of the operator's objects, read by one
	// List per kind (readChildren) and by a Get for a kind not listed.
	live map[objKey]*unstructured.Unstructured
	// listedKinds are the kinds live holds every object of.
	listedKinds map[schema.GroupVersionKind]bool
}

type objKey struct {
	gvk             schema.GroupVersionKind
	namespace, name string
}

// list lists the objects of gvk in namespace ("" for all), matching
// labels when not nil, in pages.
func (pl *planner) list(ctx context.Context, gvk schema.GroupVersionKind, namespace string, labels client.MatchingLabels) ([]unstructured.Unstructured, error) {
	var out []unstructured.Unstructured
	opts := []client.ListOption{client.InNamespace(namespace), client.Limit(500)}
	if labels != nil {
		opts = append(opts, labels)
	}
	cont := ""
	for {
		l := &unstructured.UnstructuredList{}
		l.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		if err := pl.c.List(ctx, l, append(opts, client.Continue(cont))...); err != nil {
			return nil, err
		}
		out = append(out, l.Items...)
		if cont = l.GetContinue(); cont == "" {
			return out, nil
		}
	}
}

// readChildren lists, once per kind, the children the old and the new
// definition make: those labelled with the operator's name.
func (pl *planner) readChildren(ctx context.Context, namespace string) error {
	pl.live = map[objKey]*unstructured.Unstructured{}
	pl.listedKinds = map[schema.GroupVersionKind]bool{}
	for _, d := range []*definition.Definition{pl.old, pl.def} {
		for _, child := range d.Children {
			if pl.listedKinds[child.GVK] {
				continue
			}
			ns := namespace
			if namespaced, err := pl.namespaced(child.GVK); err != nil {
				if meta.IsNoMatchError(err) {
					continue // not served: nothing of it lives, and its dry-run says why
				}
				return fmt.Errorf("child %s: kind %s: %w", child.ID, child.GVK, err)
			} else if !namespaced {
				ns = ""
			}
			items, err := pl.list(ctx, child.GVK, ns, client.MatchingLabels{definition.OperatorLabel: pl.def.Operator.Name})
			if err != nil {
				return fmt.Errorf("listing the %s children: %w", child.GVK.Kind, err)
			}
			pl.listedKinds[child.GVK] = true
			for i := range items {
				pl.live[objKey{child.GVK, items[i].GetNamespace(), items[i].GetName()}] = &items[i]
			}
		}
	}
	return nil
}

// namespaced says whether the objects of gvk are namespaced.
func (pl *planner) namespaced(gvk schema.GroupVersionKind) (bool, error) {
	return apiutil.IsGVKNamespaced(gvk, pl.c.RESTMapper())
}

// liveObject is the live object of gvk named so, nil when there is none.
// A child is labelled with its operator's name unless someone removed
// the label: a kind listed does not hold it, and it is read.
func (pl *planner) liveObject(ctx context.Context, gvk schema.GroupVersionKind, namespace, name string) (*unstructured.Unstructured, error) {
	key := objKey{gvk, namespace, name}
	pl.mu.Lock()
	obj, ok := pl.live[key]
	pl.mu.Unlock()
	if ok {
		return obj, nil
	}
	obj = &unstructured.Unstructured{}
	obj.SetGroupVersionKind(gvk)
	err := pl.c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, obj)
	switch {
	case err == nil:
	case notFound(err) || meta.IsNoMatchError(err):
		obj = nil
	default:
		return nil, err
	}
	pl.mu.Lock()
	pl.live[key] = obj
	pl.mu.Unlock()
	return obj, nil
}

// object plans one custom resource: its children in order, what is
// pruned, its status, its handlers and its state.
func (pl *planner) object(ctx context.Context, cr *unstructured.Unstructured) (Object, Summary) {
	o := Object{Namespace: cr.GetNamespace(), Name: cr.GetName()}
	var s Summary
	fail := func(format string, args ...any) { o.Errors = append(o.Errors, fmt.Sprintf(format, args...)) }
	vars := definition.Vars{Self: cr.Object, Children: map[string]map[string]any{}, Related: map[string]any{}}
	if cr.GetDeletionTimestamp() == nil {
		if err := pl.readRelated(ctx, cr, vars.Related); err != nil {
			fail("related objects: %v", err)
			vars.Related = nil
		}
		listed := inventory.Read(cr)
		var keep []inventory.Ref
		for _, child := range pl.def.Children {
			planned, live, err := pl.child(ctx, cr, child, vars)
			if err != nil {
				fail("child %s: %v", child.ID, err)
			}
			if planned != nil {
				ref := inventory.Ref{ID: child.ID, APIVersion: planned.APIVersion, Kind: planned.Kind, Namespace: planned.Namespace, Name: planned.Name}
				keep = inventory.Append(keep, ref)
				count(&s, planned.Action)
				if planned.Action != Unchanged {
					o.Children = append(o.Children, *planned)
				}
			}
			if err != nil || planned != nil && planned.Action == Waiting {
				// What it rendered to before is unknown now: kept, as the
				// engine keeps it.
				for _, ref := range listed {
					if ref.ID == child.ID {
						keep = inventory.Append(keep, ref)
					}
				}
			}
			if live != nil {
				vars.Children[child.ID] = live
			}
		}
		for _, ref := range listed {
			if slices.Contains(keep, ref) {
				continue
			}
			gvk := schema.FromAPIVersionAndKind(ref.APIVersion, ref.Kind)
			live, err := pl.liveObject(ctx, gvk, ref.Namespace, ref.Name)
			switch {
			case err != nil:
				fail("pruning %s: %v", ref, err)
				continue
			case live == nil || !metav1.IsControlledBy(live, cr):
				continue // gone, or someone else's: the engine deletes nothing
			}
			o.Children = append(o.Children, Child{ID: ref.ID, APIVersion: ref.APIVersion, Kind: ref.Kind, Namespace: ref.Namespace, Name: ref.Name, Action: Prune})
			s.Pruned++
		}
		o.Status = pl.status(cr, vars, fail)
		s.StatusChanges = len(o.Status)
	}
	o.Handlers = pl.handlers(cr, vars, fail)
	s.HandlerRuns = len(o.Handlers)
	o.States = pl.states(cr, vars, cause.Read(cr))
	s.StateEffects = len(o.States)
	return o, s
}

// count counts a child's action.
func count(s *Summary, action string) {
	switch action {
	case Create:
		s.Created++
	case Update:
		s.Updated++
	case Recreate:
		s.Recreated++
	case Unchanged:
		s.Unchanged++
	}
}

// child plans one child of cr: what happens to it (nil when includeWhen
// excludes it), and the object the children after it and the status read
// as it (nil when it is not there).
func (pl *planner) child(ctx context.Context, cr *unstructured.Unstructured, child *definition.Child, vars definition.Vars) (*Child, map[string]any, error) {
	obj, err := converge.Desired(pl.def.Operator.Name, cr, child, vars, pl.namespaced)
	if errors.Is(err, definition.ErrChildMissing) {
		return &Child{ID: child.ID, APIVersion: child.GVK.GroupVersion().String(), Kind: child.GVK.Kind, Action: Waiting}, nil, nil
	}
	if err != nil || obj == nil {
		return nil, nil, err
	}
	planned := &Child{ID: child.ID, APIVersion: obj.GetAPIVersion(), Kind: obj.GetKind(), Namespace: obj.GetNamespace(), Name: obj.GetName()}
	live, err := pl.liveObject(ctx, child.GVK, obj.GetNamespace(), obj.GetName())
	if err != nil {
		return nil, nil, fmt.Errorf("reading %s %s: %w", child.GVK.Kind, obj.GetName(), err)
	}
	hash := obj.GetAnnotations()[v1alpha1.AppliedHashAnnotation]
	if live != nil {
		if live.GetAnnotations()[v1alpha1.AppliedHashAnnotation] == hash && compare.Contains(live.Object, obj.Object) {
			planned.Action = Unchanged // the engine writes nothing
			return planned, live.Object, nil
		}
		if !metav1.IsControlledBy(live, cr) {
			return nil, nil, fmt.Errorf("%s %s exists and is not controlled by this %s; opkit does not take over objects it did not make", child.GVK.Kind, obj.GetName(), cr.GetKind())
		}
		if child.Recreate {
			planned.Action, planned.Changes = Recreate, setChanges(clean(live.Object), clean(obj.Object))
			return planned, unknownAfter(obj.Object, true), nil
		}
	}
	dry := obj.DeepCopy()
	data, err := obj.MarshalJSON()
	if err != nil {
		return nil, nil, err
	}
	err = pl.c.Patch(ctx, dry, client.RawPatch(types.ApplyPatchType, data), client.DryRunAll, client.FieldOwner(converge.FieldManager), client.ForceOwnership)
	switch {
	case err != nil && live != nil && converge.Immutable(err):
		planned.Action, planned.Changes = Recreate, setChanges(clean(live.Object), clean(obj.Object))
		return planned, unknownAfter(obj.Object, true), nil
	case err != nil:
		return nil, nil, fmt.Errorf("dry-run of %s %s: %w", child.GVK.Kind, obj.GetName(), err)
	case live == nil:
		planned.Action = Create
		return planned, unknownAfter(dry.Object, true), nil
	}
	planned.Changes = diff(clean(live.Object), clean(dry.Object))
	if len(planned.Changes) == 0 {
		// Only the applied hash differs (a field written as the server
		// defaults it): the object stays as it is.
		planned.Action = Unchanged
		return planned, live.Object, nil
	}
	planned.Action = Update
	return planned, unknownAfter(dry.Object, false), nil
}

// unknownAfter is obj as what reads it after the apply sees it: its
// resourceVersion (and, created, its uid and creation time) Unknown.
func unknownAfter(obj map[string]any, created bool) map[string]any {
	out := (&unstructured.Unstructured{Object: obj}).DeepCopy()
	out.SetResourceVersion(Unknown)
	if created {
		out.SetUID(types.UID(Unknown))
		_ = unstructured.SetNestedField(out.Object, Unknown, "metadata", "creationTimestamp")
	}
	return out.Object
}

// readRelated reads the related objects cr refers to into vars, as the
// engine's reconcile does (a missing named object is left out).
func (pl *planner) readRelated(ctx context.Context, cr *unstructured.Unstructured, into map[string]any) error {
	for _, rel := range pl.def.Related {
		ns, name, sel, err := rel.Target(cr.Object, cr.GetNamespace())
		if err != nil {
			return fmt.Errorf("%s: %w", rel.Field, err)
		}
		if namespaced, err := pl.namespaced(rel.GVK); err != nil {
			return fmt.Errorf("%s: kind %s is not served: %w", rel.Field, rel.GVK, err)
		} else if !namespaced {
			ns = ""
		}
		if err := converge.ReadRelated(ctx, pl.c, rel, ns, name, sel, into); err != nil {
			return err
		}
	}
	return nil
}
