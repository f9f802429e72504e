// Package finalizer is opkit's finalizer on the objects whose deletion it
// must see: the custom resources of an operator with delete handlers, and
// the watched objects of a watch with finalizer: true. Name is the
// finalizer of an operator; Patch adds or removes it with a JSON patch
// guarded by the resourceVersion read, so that other controllers'
// finalizers are never rewritten and a concurrent change is read again.
package finalizer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Name is the finalizer opkit holds for an operator: opkit.dev/<operator>,
// shortened with a hash when the Operator's name is too long for a
// finalizer.
func Name(operator string) string {
	if len(operator) <= 63 {
		return "opkit.dev/" + operator
	}
	sum := sha256.Sum256([]byte(operator))
	return "opkit.dev/" + operator[:50] + "-" + hex.EncodeToString(sum[:])[:12]
}

// Patch adds or removes the finalizer fin on obj, as read, with c: obj is
// the API's answer once patched. An object gone is no error; one changed
// since it was read is requeued to be read again.
func Patch(ctx context.Context, c client.Client, obj *unstructured.Unstructured, fin string, add bool) (reconcile.Result, error) {
	ops := []map[string]any{{"op": "test", "path": "/metadata/resourceVersion", "value": obj.GetResourceVersion()}}
	finalizers := obj.GetFinalizers()
	switch i := slices.Index(finalizers, fin); {
	case add && len(finalizers) == 0:
		ops = append(ops, map[string]any{"op": "add", "path": "/metadata/finalizers", "value": []string{fin}})
	case add:
		ops = append(ops, map[string]any{"op": "add", "path": "/metadata/finalizers/-", "value": fin})
	case i < 0:
		return reconcile.Result{}, nil
	default:
		path := fmt.Sprintf("/metadata/finalizers/%d", i)
		ops = append(ops, map[string]any{"op": "test", "path": path, "value": fin}, map[string]any{"op": "remove", "path": path})
	}
	patch, _ := json.Marshal(ops)
	err := c.Patch(ctx, obj, client.RawPatch(types.JSONPatchType, patch))
	switch {
	case apierrors.IsNotFound(err):
		return reconcile.Result{}, nil
	case apierrors.IsConflict(err) || (apierrors.IsInvalid(err) && strings.Contains(err.Error(), "test")):
		// The object changed since it was read: read it again.
		return reconcile.Result{RequeueAfter: 250 * time.Millisecond}, nil
	case err != nil:
		return reconcile.Result{}, fmt.Errorf("updating finalizer %s: %w", fin, err)
	}
	return reconcile.Result{}, nil
}
