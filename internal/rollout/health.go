package rollout

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/cause"
	"github.com/opkit-dev/opkit/internal/compare"
)

// health is how the moved objects are: the first that pauses the
// rollout, or the first not healthy yet.
type health struct {
	failed, waiting string
}

// health looks at each moved object as the cache shows it. Accepted
// objects that are healthy again are dropped from st.Accepted.
func (ro *Rollout) health(ctx context.Context, st *v1alpha1.RolloutStatus) health {
	var h health
	was := map[string]bool{}
	for _, name := range st.Accepted {
		was[name] = true
	}
	var accepted []string
	for _, name := range st.Moved {
		failed, waiting := ro.objectHealth(ctx, objectKey(name), st.To.Hash)
		isAccepted := was[name]
		if isAccepted && (failed != "" || waiting != "") {
			accepted = append(accepted, name)
		}
		switch {
		case failed != "" && !isAccepted && h.failed == "":
			h.failed = name + ": " + failed
		case (waiting != "" || failed != "") && h.waiting == "":
			h.waiting = name + ": " + cmp.Or(waiting, failed)
		}
	}
	st.Accepted = accepted
	return h
}

// unhealthy returns the moved objects that would pause the rollout.
func (ro *Rollout) unhealthy(ctx context.Context, st *v1alpha1.RolloutStatus) []string {
	var out []string
	for _, name := range st.Moved {
		if failed, _ := ro.objectHealth(ctx, objectKey(name), st.To.Hash); failed != "" {
			out = append(out, name)
		}
	}
	return out
}

// objectHealth says why an object pauses the rollout (failed), or why it
// is not healthy yet (waiting); both empty when it is healthy. An object
// gone is healthy: it holds nothing up.
func (ro *Rollout) objectHealth(ctx context.Context, key types.NamespacedName, hash string) (failed, waiting string) {
	cr := &unstructured.Unstructured{}
	cr.SetGroupVersionKind(ro.def.GVK)
	if err := ro.cfg.Client.Get(ctx, key, cr); err != nil {
		if apierrors.IsNotFound(err) {
			return "", ""
		}
		return "", "cannot be read: " + err.Error()
	}
	cr = ro.newest(cr)
	if on, _, _ := unstructured.NestedString(cr.Object, "status", "opkit", "definition"); on != hash {
		return "", "not reconciled by the new definition yet"
	}
	conds := compare.Conditions(cr)
	for _, t := range []string{v1alpha1.ConditionDegraded, v1alpha1.ConditionStalled} {
		if c := meta.FindStatusCondition(conds, t); c != nil && c.Status == metav1.ConditionTrue {
			return fmt.Sprintf("%s: %s", t, c.Message), ""
		}
	}
	st := cause.Read(cr)
	for _, name := range slices.Sorted(maps.Keys(st.Handlers)) {
		if hs := st.Handlers[name]; hs.Attempt > 0 {
			return fmt.Sprintf("handler %s failed (%d attempts since its last success)", name, hs.Attempt), ""
		}
	}
	if h := st.Pending(ro.def.Handlers, cr.GetGeneration()); h != nil {
		// Its run has not ended yet (a handler slower than settle, or
		// waiting for a slot): healthy is judged on its outcome.
		return "", fmt.Sprintf("handler %s not done with generation %d yet", h.Name, cr.GetGeneration())
	}
	if c := meta.FindStatusCondition(conds, v1alpha1.ConditionReady); c == nil || c.Status != metav1.ConditionTrue {
		msg := "not Ready"
		if c != nil {
			msg = "not Ready: " + c.Message
		}
		return "", msg
	}
	return "", ""
}
