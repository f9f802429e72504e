package informer

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// CachedObjects gives what a list-watch of [Informers.ListWatch] returns
// (a list, or a watch event's object) as the cache's reads give it: the
// list's items and metadata, or the one object. It is for tests, which
// check the list-watch against the API server's own answers.
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
