package runner

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/internal/definition"
)

// CleanUp deletes the custom resources of defs in namespace while their
// engine still runs, so that delete handlers run, waiting up to within
// for them to go; then it calls stopEngine and removes the finalizers
// still on those left, so that the namespace can be deleted. A test
// harness calls it at a test's end, before deleting the namespace.
func CleanUp(c client.Client, defs []*definition.Definition, namespace string, within time.Duration, stopEngine func()) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var left []*unstructured.Unstructured
	for _, d := range defs {
		if !d.Owns() {
			continue
		}
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(d.GVK.GroupVersion().WithKind(d.GVK.Kind + "List"))
		if err := c.List(ctx, list, client.InNamespace(namespace)); err != nil {
			continue
		}
		for i := range list.Items {
			obj := &list.Items[i]
			_ = c.Delete(ctx, obj)
			left = append(left, obj)
		}
	}
	wctx, wcancel := context.WithTimeout(ctx, within)
	defer wcancel()
	for _, obj := range left {
		for wctx.Err() == nil {
			if err := c.Get(wctx, client.ObjectKeyFromObject(obj), obj); apierrors.IsNotFound(err) {
				break
			}
			select {
			case <-wctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	stopEngine()
	fctx, fcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer fcancel()
	for _, obj := range left {
		if err := c.Get(fctx, client.ObjectKeyFromObject(obj), obj); err != nil || len(obj.GetFinalizers()) == 0 {
			continue
		}
		_ = c.Patch(fctx, obj, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
	}
}
