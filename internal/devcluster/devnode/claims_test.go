package devnode_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
)

// A PersistentVolumeClaim of no storage class is bound to a volume the
// node makes: a Pod writes there, a Pod after it (the first deleted)
// reads what it wrote, as a Deployment's replaced Pod finds its data;
// the claim deleted, its volume goes too.
func TestAClaimOutlivesItsPodsAndItsVolumeGoesWithIt(t *testing.T) {
	env := clustertest.New(t)
	ctx := t.Context()
	claim := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: env.Namespace},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("64Mi")}},
		},
	}
	if err := env.Client.Create(ctx, claim); err != nil {
		t.Fatal(err)
	}
	withClaim := func(name string, argv ...string) *corev1.Pod {
		pod := devPod(env.Namespace, name, corev1.RestartPolicyNever, argv...)
		pod.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}}
		pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/var/lib/app"}}
		return pod
	}
	writer := withClaim("writer", "sh", "-c", `echo "written by the first Pod" > "$OPKIT_MOUNT_DATA/note"`)
	if err := env.Client.Create(ctx, writer); err != nil {
		t.Fatal(err)
	}
	waitPhase(t, env, writer, corev1.PodSucceeded)
	if err := env.Client.Delete(ctx, writer); err != nil {
		t.Fatal(err)
	}
	reader := withClaim("reader", "sh", "-c", `cat "$OPKIT_MOUNT_DATA/note"`)
	if err := env.Client.Create(ctx, reader); err != nil {
		t.Fatal(err)
	}
	waitPhase(t, env, reader, corev1.PodSucceeded)
	if out, err := kubectl(t, "logs", "-n", env.Namespace, "reader"); err != nil || out != "written by the first Pod\n" {
		t.Errorf("the second Pod read %q, %v; want what the first wrote", out, err)
	}

	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(claim), claim); err != nil {
		t.Fatal(err)
	}
	volume := claim.Spec.VolumeName
	if volume == "" || claim.Status.Phase != corev1.ClaimBound {
		t.Fatalf("the claim is %s, volume %q; want it bound", claim.Status.Phase, volume)
	}
	if err := env.Client.Delete(ctx, reader); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(ctx, claim); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "the deleted claim's volume "+volume+" is removed", func(ctx context.Context) (bool, error) {
		err := env.Client.Get(ctx, client.ObjectKey{Name: volume}, &corev1.PersistentVolume{})
		return apierrors.IsNotFound(err), nil
	})
}
