package engine_test

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
)

// create creates obj, retrying while its kind is not served yet (a CRD
// just installed).
func create(t *testing.T, env *clustertest.Env, obj client.Object) {
	t.Helper()
	eventually(t, 30*time.Second, "create "+obj.GetObjectKind().GroupVersionKind().Kind+" "+obj.GetName(), func(ctx context.Context) (bool, error) {
		return env.Client.Create(ctx, obj) == nil, nil
	})
}

// objectState reads obj (a name and kind) and its state machine's
// status.state, empty when it has none yet.
func objectState(ctx context.Context, env *clustertest.Env, obj *unstructured.Unstructured) (*unstructured.Unstructured, *v1alpha1.ObjectState, error) {
	u := obj.DeepCopy()
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(u), u); err != nil {
		return nil, nil, err
	}
	s, err := v1alpha1.ReadObjectState(u.Object)
	if s == nil {
		s = &v1alpha1.ObjectState{}
	}
	return u, s, err
}

// writeDecision writes ana's decision on obj's current state, as opkit
// decide writes it: against the object as read, read again when the
// engine wrote it meanwhile.
func writeDecision(t *testing.T, env *clustertest.Env, obj *unstructured.Unstructured, choose, reason string) {
	t.Helper()
	eventually(t, 30*time.Second, "the decision on "+obj.GetName()+" written", func(ctx context.Context) (bool, error) {
		u, s, err := objectState(ctx, env, obj)
		if err != nil {
			return false, err
		}
		d := v1alpha1.Decision{State: s.Name, Seq: s.Seq, Choose: choose, Reason: reason, By: "ana", At: time.Now().UTC().Format(time.RFC3339)}
		err = env.Client.Patch(ctx, u, client.RawPatch(types.MergePatchType, d.Patch(u.GetResourceVersion())))
		if apierrors.IsConflict(err) {
			return false, nil
		}
		return err == nil, err
	})
}

// waitGone waits until obj no longer exists.
func waitGone(t *testing.T, env *clustertest.Env, obj client.Object, within time.Duration, what string) {
	t.Helper()
	eventually(t, within, what, func(ctx context.Context) (bool, error) {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj)
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
}

// setSpec sets spec.<field> of obj and waits until the API server keeps
// it: a field new to a CRD's schema is dropped until that schema is served.
func setSpec(t *testing.T, env *clustertest.Env, obj *unstructured.Unstructured, field string, value any) {
	t.Helper()
	eventually(t, 30*time.Second, "set spec."+field, func(ctx context.Context) (bool, error) {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return false, err
		}
		if err := unstructured.SetNestedField(obj.Object, value, "spec", field); err != nil {
			return false, err
		}
		if env.Client.Update(ctx, obj) != nil {
			return false, nil
		}
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj)
		got, _, _ := unstructured.NestedFieldNoCopy(obj.Object, "spec", field)
		return err == nil && reflect.DeepEqual(got, value), nil
	})
}

// updateDeployment applies change to the Deployment name in the test's
// namespace and updates it, getting it afresh and changing it again on a
// conflict (the Deployment's controller writes it too). It returns the
// Deployment as updated.
func updateDeployment(t *testing.T, env *clustertest.Env, name string, change func(*appsv1.Deployment)) *appsv1.Deployment {
	t.Helper()
	var dep *appsv1.Deployment
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		dep = &appsv1.Deployment{}
		if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: env.Namespace, Name: name}, dep); err != nil {
			return err
		}
		change(dep)
		return env.Client.Update(t.Context(), dep)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dep
}

// recorderExec is the exec block of a handler under spec.handlers that
// runs this test binary as the recording handler: it records each run to
// the file out, events only, with the extra environment variables env,
// given as NAME=value. Its first line is "exec:", to be placed after the
// handler's indent of four spaces; the lines after it carry their own.
func recorderExec(t *testing.T, out string, env ...string) string {
	t.Helper()
	bin := clustertest.HandlerBinary(t)
	vars := []string{
		fmt.Sprintf(`{name: %s, value: "1"}`, handlerEnv),
		fmt.Sprintf(`{name: OUT, value: %q}`, out),
		`{name: EVENTS_ONLY, value: "1"}`,
	}
	for _, kv := range env {
		name, value, ok := strings.Cut(kv, "=")
		if !ok {
			t.Fatalf("recorderExec: %q is not NAME=value", kv)
		}
		vars = append(vars, fmt.Sprintf(`{name: %s, value: %q}`, name, value))
	}
	return fmt.Sprintf(`exec:
      command: [%q]
      env: [%s]`, bin, strings.Join(vars, ", "))
}

// waitConfigMapData waits until the ConfigMap name in the test's namespace
// holds every key of want.
func waitConfigMapData(t *testing.T, env *clustertest.Env, name, what string, want map[string]string) {
	t.Helper()
	eventually(t, 30*time.Second, what, func(ctx context.Context) (bool, error) {
		cm := &corev1.ConfigMap{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: env.Namespace, Name: name}, cm); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		for k, v := range want {
			if cm.Data[k] != v {
				return false, nil
			}
		}
		return true, nil
	})
}

// logData is a run's stored log, as bytes.
func logData(l *archive.Log, err error) ([]byte, error) {
	if err != nil {
		return nil, err
	}
	return l.Data, nil
}
