package watch

import (
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/opkit-dev/opkit/internal/cause"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/informer"
	"github.com/opkit-dev/opkit/internal/packed"
)

// updates decides which updates of a watched object are worth a
// reconcile: those that may change what a step of the object decides.
//
// A step reads of the object its uid, its deletion and finalizers, opkit's
// annotations (opkit.dev/retry, paused, resumed, rerun, traceparent) and
// its projection (cause.Projection: its labels, every top-level field but
// metadata and status, and the metadata and status fields its handlers
// name), whose hash counts its changes (cause.Observe). An update that
// changes none of them (a controller writing the status of a Deployment,
// an annotation of someone else's) would be reconciled to find nothing
// to do: the decode, the state's clone, the projection's hash. Its event
// is dropped instead. The object's later reconciles read it as the cache
// has it, so nothing of it is lost: a run started later sees the object
// as it is then, status included.
//
// An operator with expressions (a filter, a when, a schedule's template)
// gets every update: an expression may read any field. So does every
// resync (the same resourceVersion), and an update whose objects cannot
// be read.
type updates struct {
	handlers []*definition.Handler
	// skipped counts the updates not reconciled.
	skipped prometheus.Counter
	// all: every update is reconciled.
	all bool
	// plain: the projection reads no metadata but the labels and no
	// status, so two compact objects are compared on their packed fields
	// but status, without decoding them.
	plain bool
}

// opkitAnnotations is the prefix of the annotations a step reads.
const opkitAnnotations = "opkit.dev/"

// skippedUpdates is opkit_watch_updates_skipped_total, registered in
// controller-runtime's registry once per process (docs/metrics.md).
var skippedUpdates = sync.OnceValue(func() *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "opkit_watch_updates_skipped_total",
		Help: "Updates of watched objects not reconciled: they changed nothing a handler reads (a status write, another's annotation).",
	}, []string{"operator"})
	metrics.Registry.MustRegister(c)
	return c
})

// newUpdates decides for operator with handlers hs; expressions: it has
// some (definition.Definition.HasExpressions).
func newUpdates(operator string, hs []*definition.Handler, expressions bool) updates {
	return updates{handlers: hs, all: expressions, plain: !cause.ProjectsMoreThanLabels(hs), skipped: skippedUpdates().WithLabelValues(operator)}
}

// reconciled reports whether the update of a watched object from old to
// updated is reconciled, and counts it when it is not.
func (u updates) reconciled(old, updated client.Object) bool {
	if u.changed(old, updated) {
		return true
	}
	u.skipped.Inc()
	return false
}

// changed reports whether the update of a watched object from old to
// updated may change what its step decides (see updates).
func (u updates) changed(old, updated client.Object) (changed bool) {
	if u.all || old.GetResourceVersion() == updated.GetResourceVersion() {
		return true
	}
	defer func() {
		if recover() != nil {
			changed = true // the object could not be read: reconciled
		}
	}()
	oldLabels, labels := old.GetLabels(), updated.GetLabels() // an unstructured object's are copies
	if old.GetUID() != updated.GetUID() ||
		!old.GetDeletionTimestamp().Equal(updated.GetDeletionTimestamp()) ||
		!slices.Equal(old.GetFinalizers(), updated.GetFinalizers()) ||
		!maps.Equal(oldLabels, labels) || (oldLabels == nil) != (labels == nil) ||
		!sameOpkitAnnotations(old.GetAnnotations(), updated.GetAnnotations()) {
		return true
	}
	if u.plain {
		// Neither apiVersion nor kind is in the projection, and a built-in
		// kind's list gives its items neither, where its watch events do.
		if same, known := informer.SameWithout(old, updated, "status", "apiVersion", "kind"); known {
			return !same
		}
	}
	a, ok1 := informer.Fields(old)
	b, ok2 := informer.Fields(updated)
	if !ok1 || !ok2 {
		return true
	}
	return !packed.Equal(cause.Projection(a, u.handlers), cause.Projection(b, u.handlers))
}

// sameOpkitAnnotations reports whether a and b hold the same annotations
// of opkit's.
func sameOpkitAnnotations(a, b map[string]string) bool {
	n := 0
	for k, v := range a {
		if strings.HasPrefix(k, opkitAnnotations) {
			if w, ok := b[k]; !ok || w != v {
				return false
			}
			n++
		}
	}
	for k := range b {
		if strings.HasPrefix(k, opkitAnnotations) {
			n--
		}
	}
	return n == 0
}
