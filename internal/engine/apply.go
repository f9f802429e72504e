package engine

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"k8s.io/apiserver/pkg/cel/openapi/resolver"
	"k8s.io/client-go/discovery/cached/memory"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/internal/compat"
	"github.com/opkit-dev/opkit/internal/converge"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/delivery"
	"github.com/opkit-dev/opkit/internal/watch"
)

// Apply installs or updates the definition's CRD, waits until it is
// established, and (re)starts its controller. A definition compiled
// without schemas is first compiled again with the children typed by the
// schemas the cluster publishes; an expression that reads a field a child's
// kind does not have is an error then. A CRD change that would break the
// installed CRD's clients or lose its data is refused with a
// *BreakingChangeError, before anything is changed, unless
// Options.AllowBreaking.
func (e *Engine) Apply(ctx context.Context, d *definition.Definition) error {
	if err := e.waitStarted(ctx); err != nil {
		return err
	}
	if err := checkScope(d, e.opts.Namespace, e.mgr.GetRESTMapper()); err != nil {
		return err
	}
	// Refuse a definition whose children the cluster cannot hold before
	// changing anything.
	for _, child := range d.Children {
		if _, err := e.mgr.GetRESTMapper().RESTMapping(child.GVK.GroupKind(), child.GVK.Version); err != nil {
			return fmt.Errorf("operator %s: child %s: kind %s is not served by the cluster: %w", d.Operator.Name, child.ID, child.GVK, err)
		}
	}
	if err := converge.CheckRelated(ctx, d, e.mgr.GetRESTMapper(), e.clientset.AuthorizationV1().SelfSubjectAccessReviews(), e.opts.Namespace); err != nil {
		return err
	}
	if (len(d.Handlers) > 0 || len(d.Admission) > 0) && e.opts.Archive == nil {
		return fmt.Errorf("operator %s: handlers need a run archive, and the engine has none", d.Operator.Name)
	}
	if d.States != nil && e.opts.Archive == nil {
		return fmt.Errorf("operator %s: states need a run archive, which records every transition, and the engine has none", d.Operator.Name)
	}
	if len(d.Admission) > 0 && e.webhooks.Server == nil {
		return fmt.Errorf("operator %s: admission handlers (on validate or mutate) are served by the engine's webhook server, and it runs none: give it an address (opkit run --webhook-addr)", d.Operator.Name)
	}
	if len(d.Sources) > 0 {
		if e.opts.Archive == nil {
			return fmt.Errorf("operator %s: sources need a run archive, which records every delivery before it is acknowledged, and the engine has none", d.Operator.Name)
		}
		if slices.ContainsFunc(d.Sources, func(s *definition.EventSource) bool { return !s.Consumed() }) {
			if err := e.ensureHooks(d); err != nil {
				return err
			}
		}
		if err := e.redeliveries.Start(ctx, e.ctx); err != nil {
			return fmt.Errorf("operator %s: %w", d.Operator.Name, err)
		}
	}
	if d.Watch != nil || d.Calendar() {
		return e.applyUnowned(ctx, d)
	}
	// The CRD's conversion is the webhook server's: without one, every
	// read at a version other than the stored one would fail.
	if err := e.webhooks.CheckConversion(ctx, d); err != nil {
		return err
	}
	d, err := e.typed(d)
	if err != nil {
		return err
	}
	crd := e.webhooks.CRD(d)
	// Never take over a CRD that another Operator, or someone else, made.
	var existing apiextensionsv1.CustomResourceDefinition
	err = e.mgr.GetAPIReader().Get(ctx, client.ObjectKey{Name: crd.Name}, &existing)
	switch {
	case err == nil && definition.OperatorName(&existing) == "":
		return fmt.Errorf("operator %s: CRD %s exists and was not installed by opkit; opkit will not take it over", d.Operator.Name, crd.Name)
	case err == nil && definition.OperatorName(&existing) != d.Operator.Name:
		return fmt.Errorf("operator %s: CRD %s belongs to operator %s", d.Operator.Name, crd.Name, definition.OperatorName(&existing))
	case err != nil && !apierrors.IsNotFound(err):
		return fmt.Errorf("operator %s: reading CRD %s: %w", d.Operator.Name, crd.Name, err)
	case err == nil:
		// A version still stored cannot be dropped (docs/migration.md),
		// whatever AllowBreaking says: the API server would refuse it.
		if err := d.CheckStoredVersions(existing.Status.StoredVersions); err != nil {
			return err
		}
		if !e.opts.AllowBreaking {
			if err := compat.RefuseBreaking(d, &existing, crd); err != nil {
				return err
			}
		}
	}
	if err := e.webhooks.InstallCRD(ctx, d); err != nil {
		return fmt.Errorf("operator %s: installing CRD %s: %w", d.Operator.Name, crd.Name, err)
	}
	if err := e.crds.WaitEstablished(ctx, crd.Name); err != nil {
		return fmt.Errorf("operator %s: CRD %s: %w", d.Operator.Name, crd.Name, err)
	}
	if e.opts.MigrateStorage {
		if err := e.migrateStorage(ctx, d.Operator.Name, crd.Name); err != nil {
			return fmt.Errorf("operator %s: %w", d.Operator.Name, err)
		}
	}
	if err := e.finalizers.Sync(ctx, d); err != nil {
		return fmt.Errorf("operator %s: the admission policy that adds its finalizer: %w", d.Operator.Name, err)
	}
	if err := e.admission.Set(d); err != nil {
		return err
	}
	if err := e.restart(ctx, d, nil); err != nil {
		return err
	}
	return e.webhooks.Admit(ctx, d)
}

// restart stops the running operator of d's name, if any, and starts d;
// a watch on opened (nil: one it opens), which it closes when it fails.
func (e *Engine) restart(ctx context.Context, d *definition.Definition, opened *watch.Opened) error {
	old := e.running.take(d.Operator.Name, true)
	defer e.running.restarted(d.Operator.Name) // not running, if it did not start
	if old != nil {
		old.stop()
	}
	if old != nil && old.def.Owns() {
		// Watches opened before a CRD's schema changed go on decoding with
		// the old schema (dropping new fields) until the API server closes
		// them, up to a minute later: list and watch again. (A watch
		// operator's watch is its own, and stopped with it.)
		if err := removeInformer(ctx, e.mgr.GetCache(), old.def.GVK); err != nil {
			if opened != nil {
				opened.Close()
			}
			return fmt.Errorf("operator %s: restarting the watch of %s: %w", d.Operator.Name, old.def.GVK.Kind, err)
		}
	}
	started, err := e.start(d, opened)
	if err != nil {
		return err
	}
	if len(d.Sources) > 0 {
		if started.events, err = delivery.Start(e.ctx, d, started.runner, delivery.Options{Archive: e.opts.Archive, Client: e.client, Namespace: e.opts.Namespace, Logger: e.mgr.GetLogger()}); err != nil {
			started.stop()
			return err
		}
		// A consumer for each consumed source, its messages queued on
		// the operator's queue; none with Options.ConsumeNothing.
		if !e.opts.ConsumeNothing {
			if started.consumers, err = e.receiver.StartConsumers(e.ctx, d, started.events); err != nil {
				started.stop()
				return err
			}
		}
	}
	e.running.put(d.Operator.Name, started)
	if len(d.Sources) > 0 {
		go e.redeliveries.Wake(e.ctx) // those left while it did not run
	}
	return nil
}

// applyUnowned (re)starts an operator without a custom resource: a watch
// (package watch) or a calendar (package calendar). No CRD is installed.
func (e *Engine) applyUnowned(ctx context.Context, d *definition.Definition) error {
	var opened *watch.Opened
	if d.Watch != nil {
		// The access checks and the schemas' reads are round trips to
		// the API server that do not wait for each other, nor for the
		// watch's first list, which its first handling waits for.
		var typed *definition.Definition
		var typedErr error
		done := make(chan struct{})
		go func() {
			defer close(done)
			typed, typedErr = e.typed(d)
		}()
		var openErr error
		opened, openErr = watch.Open(e.drivers.watchConfig(d), d)
		err := watch.Check(ctx, e.drivers.watchConfig(d), d)
		<-done
		// The access checks' error first: it names what is missing (a
		// kind not served, a verb not granted), which the watch's or the
		// schemas' would say less well.
		if err = cmp.Or(err, openErr, typedErr); err != nil {
			if opened != nil {
				opened.Close()
			}
			return err
		}
		d = typed
	}
	return e.restart(ctx, d, opened)
}

// typed returns d with the schemas of the kinds it reads, resolved from
// the schemas the API server publishes (/openapi/v3, each group-version
// fetched once per call: a new one sees the kinds installed since),
// unless it has them already or they would not change it (a watch
// without expressions: the schemas would type none).
func (e *Engine) typed(d *definition.Definition) (*definition.Definition, error) {
	if d.Typed() || !d.NeedsSchemas() {
		return d, nil
	}
	return d.WithSchemas(&resolver.ClientDiscoveryResolver{Discovery: memory.NewMemCacheClient(e.discovery)})
}
