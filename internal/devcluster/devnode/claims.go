package devnode

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

// A cluster's PersistentVolumeClaims are bound by a provisioner of its
// storage; the local plane has none, so the node is one: a claim of no
// storage class (none is default on the plane) gets a PersistentVolume of
// its own, a directory under the node's (Options.Dir/claims), which the
// claim's Pods mount. The directory outlives the Pods, as a volume does:
// a Deployment's Pod replaced finds what the one before wrote. When the
// claim is deleted, its volume and directory go with it.

// claimsVolumePrefix names the PersistentVolumes the node makes.
const claimsVolumePrefix = "opkit-dev-"

// claimsDir is the directory of a claim's volume.
func (n *Node) claimsDir(c *corev1.PersistentVolumeClaim) string {
	return filepath.Join(n.opts.Dir, "claims", c.Namespace+"_"+c.Name+"_"+string(c.UID))
}

// provisionClaims binds, until ctx ends, each pending claim of no storage
// class to a new volume of its own, and removes the volumes of claims
// deleted.
func (n *Node) provisionClaims(ctx context.Context, factory informers.SharedInformerFactory) {
	claims := factory.Core().V1().PersistentVolumeClaims().Informer()
	volumes := factory.Core().V1().PersistentVolumes().Informer()
	_, _ = claims.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { n.provision(ctx, obj) },
		UpdateFunc: func(_, obj any) { n.provision(ctx, obj) },
	})
	_, _ = volumes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { n.release(ctx, obj) },
		UpdateFunc: func(_, obj any) { n.release(ctx, obj) },
	})
}

func (n *Node) provision(ctx context.Context, obj any) {
	c, ok := obj.(*corev1.PersistentVolumeClaim)
	if !ok || c.Spec.VolumeName != "" || c.Status.Phase != corev1.ClaimPending || c.DeletionTimestamp != nil ||
		(c.Spec.StorageClassName != nil && *c.Spec.StorageClassName != "") {
		return
	}
	size, ok := c.Spec.Resources.Requests[corev1.ResourceStorage]
	if !ok {
		size = resource.MustParse("1Gi")
	}
	dir := n.claimsDir(c)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		fmt.Fprintf(n.opts.Log, "dev node: the volume of claim %s/%s: %v\n", c.Namespace, c.Name, err)
		return
	}
	modes := c.Spec.AccessModes
	if len(modes) == 0 {
		modes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: claimsVolumePrefix + string(c.UID), Labels: map[string]string{"app.kubernetes.io/managed-by": "opkit-dev-node"}},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: size},
			AccessModes:                   modes,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir}},
			ClaimRef:                      &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: c.Namespace, Name: c.Name, UID: c.UID},
			VolumeMode:                    c.Spec.VolumeMode,
		},
	}
	if _, err := n.client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) && ctx.Err() == nil {
		fmt.Fprintf(n.opts.Log, "dev node: a volume for claim %s/%s: %v\n", c.Namespace, c.Name, err)
	}
}

// release deletes a volume the node made once its claim is gone
// (Released: the claim was deleted), and its directory.
func (n *Node) release(ctx context.Context, obj any) {
	pv, ok := obj.(*corev1.PersistentVolume)
	if !ok || !strings.HasPrefix(pv.Name, claimsVolumePrefix) || pv.Status.Phase != corev1.VolumeReleased || pv.Spec.HostPath == nil {
		return
	}
	if dir := pv.Spec.HostPath.Path; strings.HasPrefix(dir, filepath.Join(n.opts.Dir, "claims")+string(filepath.Separator)) {
		_ = os.RemoveAll(dir)
	}
	if err := n.client.CoreV1().PersistentVolumes().Delete(ctx, pv.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
		fmt.Fprintf(n.opts.Log, "dev node: deleting volume %s of a deleted claim: %v\n", pv.Name, err)
	}
}

// claimDir is the directory of the volume bound to a Pod's claim, for
// materialize: an error, retried, until the claim is bound.
func (w *podWorker) claimDir(ctx context.Context, namespace, claim string) (string, error) {
	c, err := w.node.client.CoreV1().PersistentVolumeClaims(namespace).Get(ctx, claim, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("persistentVolumeClaim %q: %w", claim, err)
	}
	if c.Spec.VolumeName == "" || c.Status.Phase != corev1.ClaimBound {
		return "", fmt.Errorf("persistentVolumeClaim %q is not bound yet", claim)
	}
	pv, err := w.node.client.CoreV1().PersistentVolumes().Get(ctx, c.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("persistentVolumeClaim %q: its volume: %w", claim, err)
	}
	if pv.Spec.HostPath == nil {
		return "", fmt.Errorf("persistentVolumeClaim %q is bound to volume %s, which is not a hostPath: the dev node mounts only the volumes it makes and hostPath ones", claim, pv.Name)
	}
	return pv.Spec.HostPath.Path, os.MkdirAll(pv.Spec.HostPath.Path, 0o700)
}
