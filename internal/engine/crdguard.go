package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/definition"
)

// ReasonCRDDeleted is the reason of an Operator's Ready=False while the
// engine re-installs the CRD someone deleted under it.
const ReasonCRDDeleted = "CRDDeleted"

// guardCRDs re-installs the CRD of a running operator when someone deletes
// it, until ctx ends.
//
// Deleting a CRD deletes its custom resources first (the API server's
// cleanup finalizer), so the operator's delete handlers run as for any
// deletion; then the CRD is gone, and the operator's watch would fail
// until the engine restarted. The guard watches the metadata of every CRD
// and, when a running operator's CRD is gone, says so (a log line, the
// Operator's Ready=False with reason CRDDeleted when the Operator is in the
// cluster, and Events on it and on the new CRD), installs the CRD again and
// restarts the operator's controller, retrying with back-off while the API
// refuses. A CRD still terminating is waited for: its custom resources are
// still being deleted.
func (e *Engine) guardCRDs(ctx context.Context) error {
	crds := &metav1.PartialObjectMetadata{}
	crds.SetGroupVersionKind(apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition"))
	informer, err := e.mgr.GetCache().GetInformer(ctx, crds)
	if err != nil && ctx.Err() != nil {
		return nil // the engine stopped while it started (an operator refused)
	}
	if err != nil {
		return fmt.Errorf("watching CRDs: %w", err)
	}
	queue := workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](500*time.Millisecond, 30*time.Second),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "opkit-crds"})
	go func() {
		<-ctx.Done()
		queue.ShutDown()
	}()
	reg, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if m, ok := obj.(client.Object); ok {
				if name := m.GetLabels()[definition.OperatorLabel]; name != "" {
					queue.Add(name)
				}
			}
		},
	})
	if err != nil {
		return fmt.Errorf("watching CRDs: %w", err)
	}
	defer func() { _ = informer.RemoveEventHandler(reg) }()
	for {
		name, shutdown := queue.Get()
		if shutdown {
			return nil
		}
		if err := e.reinstall(ctx, name); err != nil && ctx.Err() == nil {
			e.mgr.GetLogger().Info("re-installing a deleted CRD failed; retrying", "operator", name, "error", err.Error())
			queue.AddRateLimited(name)
		} else {
			queue.Forget(name)
		}
		queue.Done(name)
	}
}

// reinstall installs the CRD of a running operator again, if it is gone,
// and restarts its controller.
func (e *Engine) reinstall(ctx context.Context, name string) error {
	d := e.running.definition(name)
	if d == nil {
		return nil // not run here, or removed since
	}
	crd := e.webhooks.CRD(d)
	var live apiextensionsv1.CustomResourceDefinition
	err := e.mgr.GetAPIReader().Get(ctx, client.ObjectKey{Name: crd.Name}, &live)
	switch {
	case err == nil && live.DeletionTimestamp == nil:
		return nil // installed again already
	case err == nil:
		return fmt.Errorf("CRD %s is still being deleted", crd.Name)
	case client.IgnoreNotFound(err) != nil:
		return fmt.Errorf("reading CRD %s: %w", crd.Name, err)
	}
	msg := fmt.Sprintf("CRD %s was deleted while operator %s ran (its custom resources with it); re-installing it", crd.Name, name)
	e.mgr.GetLogger().Info(msg, "operator", name, "crd", crd.Name)
	op := e.clusterOperator(ctx, name)
	if op != nil {
		e.mgr.GetEventRecorder("opkit").Eventf(op, nil, corev1.EventTypeWarning, ReasonCRDDeleted, "Reinstall", "%s", msg)
		ready := metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: ReasonCRDDeleted, Message: msg}
		if err := (&operatorReconciler{engine: e}).setStatus(ctx, op, ready, crd.Name); err != nil {
			e.mgr.GetLogger().Info("recording the deleted CRD on the Operator failed", "operator", name, "error", err.Error())
		}
	}
	if err := e.Apply(ctx, d); err != nil {
		return err
	}
	if err := e.mgr.GetAPIReader().Get(ctx, client.ObjectKey{Name: crd.Name}, &live); err == nil {
		e.mgr.GetEventRecorder("opkit").Eventf(&live, nil, corev1.EventTypeNormal, "Reinstalled", "Reinstall",
			"re-installed by operator %s after it was deleted", name)
	}
	e.mgr.GetLogger().Info(fmt.Sprintf("CRD %s re-installed; operator %s runs again", crd.Name, name), "operator", name, "crd", crd.Name)
	if op := e.clusterOperator(ctx, name); op != nil {
		ready := metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: ReasonRunning,
			Message: "the controller of " + crd.Name + " is running"}
		if err := (&operatorReconciler{engine: e}).setStatus(ctx, op, ready, crd.Name); err != nil {
			return errors.Join(errors.New("recording the re-installed CRD on the Operator"), err)
		}
	}
	return nil
}

// clusterOperator returns the Operator object of a running operator when
// it was read from the cluster (not from a file), else nil.
func (e *Engine) clusterOperator(ctx context.Context, name string) *v1alpha1.Operator {
	d := e.running.definition(name)
	if d == nil || d.Source != "" {
		return nil
	}
	op := &v1alpha1.Operator{}
	if err := e.mgr.GetAPIReader().Get(ctx, client.ObjectKey{Name: name}, op); err != nil || op.UID != d.Operator.UID {
		return nil
	}
	return op
}
