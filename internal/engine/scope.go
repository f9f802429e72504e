package engine

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/definition"
)

// An engine with Options.Namespace acts in that namespace alone, so that
// engines running the same definitions can run side by side, one per
// namespace (opkit test runs each scenario in its own namespace, in
// parallel), and none acts on another's objects:
//
//   - the shared cache holds that namespace's objects of namespaced kinds
//     (custom resources, children, related objects), so no other
//     namespace's object is ever reconciled, nor its change seen;
//   - a child or a related object in another namespace is refused: its
//     custom resource's reconcile fails, naming it;
//   - a watch (spec.watch) watches that namespace whatever its namespaces
//     say, a definition written for namespace prod is tested in the
//     scenario's; the archive's records of watched objects elsewhere are
//     kept, not dropped: they are other engines';
//   - an operator whose custom resource or watched kind is cluster-scoped
//     is refused: every engine would see, and act on, the same objects;
//   - a webhook source's object elsewhere is refused, failing the delivery;
//   - what is cluster-wide and shared stays safe when several engines
//     apply the same definition at once: a CRD is server-side applied,
//     the same by every engine; with AdmissionFinalizers each engine has
//     its own admission policy, bound to its namespace, which it alone
//     removes.
//
// Operator-wide schedules are for no object: each engine runs them, and
// records them in its own archive.

// restrictCache restricts the engine's shared cache to Options.Namespace,
// if set.
func (o *Options) restrictCache(c *cache.Options) error {
	if o.Namespace == "" {
		return nil
	}
	if errs := validation.IsDNS1123Label(o.Namespace); len(errs) > 0 {
		return fmt.Errorf("engine: Options.Namespace %q is not a namespace name: %s", o.Namespace, strings.Join(errs, "; "))
	}
	c.DefaultNamespaces = map[string]cache.Config{o.Namespace: {}}
	return nil
}

// checkScope refuses an operator the engine cannot run in its namespace
// alone (Options.Namespace): one whose custom resource or watched kind is
// cluster-scoped.
func checkScope(d *definition.Definition, ns string, mapper meta.RESTMapper) error {
	if ns == "" {
		return nil
	}
	if d.Owns() && d.Operator.Spec.Resource.Scope == v1alpha1.ClusterScoped {
		return fmt.Errorf("operator %s: spec.resource.scope: Cluster: the engine acts in namespace %s only (Options.Namespace), and a cluster-scoped %s would be seen, and acted on, by every engine; run it with an engine for all namespaces", d.Operator.Name, ns, d.GVK.Kind)
	}
	if w := d.Watch; w != nil {
		mapping, err := mapper.RESTMapping(w.GVK.GroupKind(), w.GVK.Version)
		if err != nil {
			return fmt.Errorf("operator %s: spec.watch: kind %s is not served by the cluster: %w", d.Operator.Name, w.GVK, err)
		}
		if mapping.Scope.Name() != meta.RESTScopeNameNamespace {
			return fmt.Errorf("operator %s: spec.watch: %s is cluster-scoped, and the engine acts in namespace %s only (Options.Namespace): every engine would watch the same objects; run it with an engine for all namespaces", d.Operator.Name, w.GVK.Kind, ns)
		}
	}
	return nil
}
