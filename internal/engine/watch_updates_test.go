package engine_test

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
)

// TestAWatchReconcilesNoUpdateThatChangesNothingAHandlerReads writes the
// status of a watched Service, as a controller does, and an annotation of
// someone else's: neither is reconciled (the engine counts each as
// skipped, and its reconcile count does not move), for an operator whose
// handler reads the spec (its objects compared packed) and for one whose
// handler names a status field (compared by their projections). The
// status field that handler names still runs it, and a new port still
// runs both port handlers. (A Service: no controller of the plane writes
// its status, which kube-controller-manager does for a Deployment.)
func TestAWatchReconcilesNoUpdateThatChangesNothingAHandlerReads(t *testing.T) {
	t.Parallel()
	a := clustertest.New(t)
	ctx := t.Context()
	out := filepath.Join(t.TempDir(), "records.jsonl")
	e := startEngine(t, a)
	exec := recorderExec(t, out)
	spec, status := "spec-"+a.Namespace, "status-"+a.Namespace
	// Each handler on update of the Service's field, recording its runs.
	watch := func(operator string, fields map[string]string) string {
		var hs strings.Builder
		for _, h := range slices.Sorted(maps.Keys(fields)) {
			fmt.Fprintf(&hs, "  - name: %s\n    on: [update]\n    fields: [%s]\n    %s\n", h, fields[h], exec)
		}
		return fmt.Sprintf("apiVersion: opkit.dev/v1alpha1\nkind: Operator\nmetadata: {name: %s}\nspec:\n  watch: {apiVersion: v1, kind: Service, namespaces: [%s]}\n  handlers:\n%s",
			operator, a.Namespace, hs.String())
	}
	for _, op := range []string{
		watch(spec, map[string]string{"spec-ports": "spec.ports"}),
		watch(status, map[string]string{"status-ports": "spec.ports", "status-balancer": "status.loadBalancer"}),
	} {
		if err := e.Apply(ctx, compileYAML(t, op)); err != nil {
			t.Fatal(err)
		}
	}
	name := "web-" + a.Namespace[len(a.Namespace)-6:]
	create(t, a, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: a.Namespace, Name: name},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": name}, Ports: []corev1.ServicePort{{Port: 80}}},
	})
	// Both operators have reconciled the new Service, and nothing more is
	// due.
	eventually(t, time.Minute, "both operators reconciled the Service", func(context.Context) (bool, error) {
		return reconciles(t, spec) > 0 && reconciles(t, status) > 0, nil
	})
	time.Sleep(time.Second)
	skipped := map[string]float64{spec: watchSkipped(t, spec), status: watchSkipped(t, status)}
	before := map[string]float64{spec: reconciles(t, spec), status: reconciles(t, status)}

	const writes = 5
	for i := range writes {
		writeService(t, a, name, true, func(s *corev1.Service) {
			s.Status.Conditions = []metav1.Condition{{Type: "Checked", Status: metav1.ConditionTrue, Reason: fmt.Sprintf("Check%d", i), LastTransitionTime: metav1.Now()}}
		})
		time.Sleep(100 * time.Millisecond) // each its own event, not one reconcile of all
	}
	writeService(t, a, name, false, func(s *corev1.Service) {
		s.Annotations = map[string]string{"example.com/owner": "team-a"}
	})
	eventually(t, time.Minute, "both operators saw the updates", func(context.Context) (bool, error) {
		return watchSkipped(t, spec) == skipped[spec]+writes+1 && watchSkipped(t, status) == skipped[status]+writes+1, nil
	})
	time.Sleep(500 * time.Millisecond) // a reconcile the updates wrongly queued
	for _, op := range []string{spec, status} {
		if got := reconciles(t, op); got != before[op] {
			t.Errorf("operator %s reconciled %v times for %d status writes and another's annotation; want none", op, got-before[op], writes)
		}
	}
	if recs := records(t, out, name); len(recs) > 0 {
		t.Errorf("runs %v for status writes and another's annotation; want none", triggers(recs))
	}

	writeService(t, a, name, true, func(s *corev1.Service) {
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.7"}}
	})
	waitRecords(t, out, name, 1, "the run of the handler on status.loadBalancer")
	writeService(t, a, name, false, func(s *corev1.Service) { s.Spec.Ports[0].Port = 8080 })
	waitRecords(t, out, name, 3, "the runs of both port handlers")
	time.Sleep(time.Second)
	got := triggers(records(t, out, name))
	slices.Sort(got)
	if want := []string{"spec-ports/update", "status-balancer/update", "status-ports/update"}; !slices.Equal(got, want) {
		t.Errorf("runs %v; want %v", got, want)
	}
	if n := watchSkipped(t, spec); n != skipped[spec]+writes+2 {
		t.Errorf("operator %s skipped %v updates; want %d: the status writes, another's annotation, the load balancer (it reads no status)", spec, n-skipped[spec], writes+2)
	}
}

// writeService changes the Service name, its status (the status
// subresource) or the rest, retrying on conflicts.
func writeService(t *testing.T, env *clustertest.Env, name string, status bool, change func(*corev1.Service)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s := &corev1.Service{}
		if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: env.Namespace, Name: name}, s); err != nil {
			return err
		}
		change(s)
		if status {
			return env.Client.Status().Update(t.Context(), s)
		}
		return env.Client.Update(t.Context(), s)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// reconciles is the number of reconciles of the watch of operator, as
// controller-runtime counts them.
func reconciles(t *testing.T, operator string) float64 {
	return counterSum(t, "controller_runtime_reconcile_total", "controller", "operator-"+operator)
}

// watchSkipped is the number of updates the watch of operator skipped.
func watchSkipped(t *testing.T, operator string) float64 {
	return counterSum(t, "opkit_watch_updates_skipped_total", "operator", operator)
}

// counterSum sums the counter name's series whose label is value.
func counterSum(t *testing.T, name, label, value string) float64 {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					sum += m.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}
