package converge

import (
	"context"
	"fmt"
	"sort"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	authorizationv1client "k8s.io/client-go/kubernetes/typed/authorization/v1"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/informer"
	"github.com/opkit-dev/opkit/internal/related"
)

// Related objects (definition.Related) are read from a cache and never
// written. Each reconcile records what its custom resource refers to in
// the operator's related.Index; a change of a related object then
// reconciles the custom resources that refer to it, found by name in a map
// or by selector among those of its kind and namespace, never by a scan of
// every custom resource.
//
// A kind is read from the engine's shared cache, which lists and watches it
// in every namespace (or in Options.Namespace alone), unless every
// reference of the kind lists its namespaces: the operator then has a
// cache of its own for the kind, which lists and watches it in those
// namespaces only, as the engine's permissions may allow no more. Either
// way, a reference that names a namespace its list does not hold is an
// error of its custom resource, and nothing there is read.
// readRelated reads the related objects cr refers to into vars (a missing
// named object is left out: what reads it waits) and records the
// references in the index.
func (r *reconciler) readRelated(ctx context.Context, cr *unstructured.Unstructured, into map[string]any) error {
	if len(r.def.Related) == 0 {
		return nil
	}
	var refs []related.Ref
	defer func() {
		r.related.Set(types.NamespacedName{Namespace: cr.GetNamespace(), Name: cr.GetName()}, refs)
	}()
	for _, rel := range r.def.Related {
		ns, name, sel, err := rel.Target(cr.Object, cr.GetNamespace())
		if err != nil {
			return fmt.Errorf("%s: %w", rel.Field, err)
		}
		namespaced, err := r.scopes.Namespaced(rel.GVK)
		if err != nil {
			return fmt.Errorf("%s: kind %s is not served: %w", rel.Field, rel.GVK, err)
		}
		if !namespaced {
			ns = ""
		} else if ns == "" {
			return fmt.Errorf("%s: %s is namespaced: give the related object a namespace (the custom resource has none)", rel.Field, rel.GVK.Kind)
		} else if why := outside(r.namespace, ns); why != "" {
			return fmt.Errorf("%s: %s: %s", rel.Field, rel.GVK.Kind, why)
		} else if !rel.Allows(ns) {
			return fmt.Errorf("%s: %s in namespace %s: not among %s.namespaces (%s), where alone it is read", rel.Field, rel.GVK.Kind, ns, rel.Field, strings.Join(rel.Namespaces, ", "))
		}
		refs = append(refs, related.Ref{GVK: rel.GVK, Namespace: ns, Name: name, Selector: sel})
		if err := ReadRelated(ctx, r.related.Reader(rel.GVK, r.client), rel, ns, name, sel, into); err != nil {
			return err
		}
	}
	return nil
}

// ReadRelated reads the related objects of rel in namespace ns with
// reader into into[rel.ID]: the object named name (one missing is left
// out: what reads it waits), or for a list those sel selects, by name.
// opkit plan reads them with it too, as the reconcile does.
func ReadRelated(ctx context.Context, reader client.Reader, rel *definition.Related, ns, name string, sel labels.Selector, into map[string]any) error {
	if !rel.List() {
		obj := &unstructured.Unstructured{}
		obj.SetGroupVersionKind(rel.GVK)
		err := reader.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj)
		switch {
		case err == nil:
			into[rel.ID] = obj.Object
		case client.IgnoreNotFound(err) != nil:
			return fmt.Errorf("%s: reading %s %s: %w", rel.Field, rel.GVK.Kind, name, err)
		}
		return nil
	}
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(rel.GVK.GroupVersion().WithKind(rel.GVK.Kind + "List"))
	if err := reader.List(ctx, list, client.InNamespace(ns), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return fmt.Errorf("%s: listing %s: %w", rel.Field, rel.GVK.Kind, err)
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].GetName() < list.Items[j].GetName() })
	items := make([]any, len(list.Items))
	for i := range list.Items {
		items[i] = list.Items[i].Object
	}
	into[rel.ID] = items
	return nil
}

// watchRelated has c reconcile the custom resources that refer to a
// related object when it changes, and gives r the caches it reads related
// objects from: the shared cache, or, for a kind whose every reference
// lists its namespaces, a cache of the operator's own that lists and
// watches it there alone, which lives until ctx ends.
func (cfg Config) watchRelated(ctx context.Context, c controller.TypedController[reconcile.Request], r *reconciler) error {
	for _, k := range r.def.RelatedKinds() {
		from := cfg.Cache
		if len(k.Namespaces) > 0 && cfg.Namespace == "" {
			opts := cache.Options{
				Scheme: cfg.Scheme, Mapper: cfg.Mapper,
				DefaultTransform:  informer.Transform,
				DefaultNamespaces: map[string]cache.Config{},
			}
			for _, ns := range k.Namespaces {
				opts.DefaultNamespaces[ns] = cache.Config{}
			}
			own, err := cache.New(cfg.REST, opts)
			if err != nil {
				return fmt.Errorf("operator %s: the cache of its related %s: %w", r.def.Operator.Name, k.GVK.Kind, err)
			}
			go func() {
				if err := own.Start(ctx); err != nil && ctx.Err() == nil {
					cfg.Log.Error(err, "the cache of related objects stopped", "operator", r.def.Operator.Name, "kind", k.GVK.Kind)
				}
			}()
			r.related.SetReader(k.GVK, own)
			from = own
		}
		gvk := k.GVK
		obj := &unstructured.Unstructured{}
		obj.SetGroupVersionKind(gvk)
		h := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			return r.related.Requests(gvk, o)
		})
		if err := c.Watch(source.Kind[client.Object](from, obj, h)); err != nil {
			return err
		}
	}
	return nil
}

// outside says why an object in namespace ns is beyond an engine that
// acts in namespace only; "" when it is not ("" for namespace: all
// namespaces; ns "" is a cluster-scoped object).
func outside(namespace, ns string) string {
	if namespace == "" || ns == "" || ns == namespace {
		return ""
	}
	return fmt.Sprintf("namespace %s is outside the engine's namespace %s (Options.Namespace)", ns, namespace)
}

// CheckRelated refuses a definition whose related kinds the cluster does
// not serve or the engine may not list and watch where it reads them (the
// watch would never sync), and one that lists namespaces for a
// cluster-scoped kind, naming the field.
//
// mapper maps kinds; reviews asks the API server what the engine may do;
// namespace is the engine's one namespace ("" for all).
func CheckRelated(ctx context.Context, d *definition.Definition, mapper meta.RESTMapper, reviews authorizationv1client.SelfSubjectAccessReviewInterface, namespace string) error {
	for _, rel := range d.Related {
		mapping, err := mapper.RESTMapping(rel.GVK.GroupKind(), rel.GVK.Version)
		if err != nil {
			return fmt.Errorf("operator %s: %s: kind %s is not served by the cluster: %w", d.Operator.Name, rel.Field, rel.GVK, err)
		}
		namespaced := mapping.Scope.Name() == meta.RESTScopeNameNamespace
		if !namespaced && len(rel.Namespaces) > 0 {
			return fmt.Errorf("operator %s: %s.namespaces: %s is cluster-scoped: its objects are in no namespace; remove namespaces", d.Operator.Name, rel.Field, rel.GVK.Kind)
		}
		namespaces := []string{""} // all, or a cluster-scoped kind
		switch {
		case namespace != "" && namespaced:
			namespaces = []string{namespace} // the engine's cache's
		case len(rel.Namespaces) > 0:
			namespaces = rel.Namespaces // its own cache's (watchRelated)
		}
		for _, ns := range namespaces {
			where := "in all namespaces"
			if ns != "" {
				where = "in namespace " + ns
			}
			for _, verb := range []string{"list", "watch"} {
				review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
					ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: verb, Namespace: ns, Group: mapping.Resource.Group, Version: mapping.Resource.Version, Resource: mapping.Resource.Resource},
				}}
				got, err := reviews.Create(ctx, review, metav1.CreateOptions{})
				if err != nil {
					return fmt.Errorf("operator %s: %s: checking the engine may %s %s: %w", d.Operator.Name, rel.Field, verb, mapping.Resource.Resource, err)
				}
				if !got.Status.Allowed {
					return fmt.Errorf("operator %s: %s: the engine may not %s %s %s; grant it list and watch on %s there (related objects are watched wherever the engine acts, or in the namespaces %s.namespaces lists)", d.Operator.Name, rel.Field, verb, mapping.Resource.GroupResource(), where, mapping.Resource.GroupResource(), rel.Field)
				}
			}
		}
	}
	return nil
}
