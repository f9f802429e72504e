package engine

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// PackedListWatch is the shared cache's list-watch of gvk in namespace
// (all namespaces: ""), for the tests.
func PackedListWatch(cfg *rest.Config, gvk schema.GroupVersionKind, namespace string) (toolscache.ListerWatcherWithContext, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	mapper, err := apiutil.NewDynamicRESTMapper(cfg, hc)
	if err != nil {
		return nil, err
	}
	p := &packedInformers{config: cfg, http: hc, scopes: &scopes{mapper: mapper}, namespace: namespace}
	return p.listWatch(gvk)
}

// CachedObjects gives a packed list-watch's list items, or its event's
// object, as the cache's reads give them.
func CachedObjects(obj runtime.Object) (items []*unstructured.Unstructured, listMeta metav1.ListMeta) {
	switch o := obj.(type) {
	case *compactList:
		for i := range o.Items {
			items = append(items, o.Items[i].DeepCopyObject().(*unstructured.Unstructured))
		}
		return items, o.ListMeta
	case *compactObject:
		return []*unstructured.Unstructured{o.DeepCopyObject().(*unstructured.Unstructured)}, metav1.ListMeta{}
	}
	return nil, metav1.ListMeta{}
}
