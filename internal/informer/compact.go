package informer

import (
	"fmt"
	"maps"
	"slices"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/opkit-dev/opkit/internal/packed"
)

// compactObject is how the engine's cache keeps an unstructured object (a
// custom resource or a child): its metadata typed, which the informer's
// keys and indexes and the owner lookups of the watches read, and the rest
// of the object packed (see package packed).
//
// An object decoded into nested maps takes three to four times the bytes of
// its JSON, and more of its packed form: every map, key and boxed value is
// an allocation of its own. The cache holds every object of every watched
// kind for as long as the engine runs, so this is most of its memory.
//
// DeepCopyObject returns an *unstructured.Unstructured, not a
// *compactObject: the cache's reader copies every object it hands out, and
// the copy is where the object is decoded again. Reads through the cache
// therefore return the same unstructured objects as before, less their
// managedFields.
type compactObject struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	// rest is the object without its metadata, packed.
	rest string
}

// DeepCopyObject decodes the object; see [compactObject].
func (c *compactObject) DeepCopyObject() runtime.Object {
	u, err := c.decode()
	if err != nil {
		// rest is what packed.AppendMapWithout wrote.
		panic(fmt.Sprintf("informer: a cached %s %s/%s does not decode: %v", c.Kind, c.Namespace, c.Name, err))
	}
	return u
}

func (c *compactObject) decode() (*unstructured.Unstructured, error) {
	v, err := packed.Unpack(c.rest)
	if err != nil {
		return nil, err
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("a packed %T, not an object", v)
	}
	u := &unstructured.Unstructured{Object: obj}
	// The items of a built-in kind's list come without their kind, which
	// packedListWatch kept beside.
	if _, ok := obj["kind"]; !ok && c.Kind != "" {
		u.SetAPIVersion(c.APIVersion)
		u.SetKind(c.Kind)
	}
	if md := metadataMap(&c.ObjectMeta); len(md) > 0 {
		u.Object["metadata"] = md
	}
	return u, nil
}

// metadataMap is m as an unstructured object has it: what
// [unstructured.Unstructured]'s setters would write, built directly.
func metadataMap(m *metav1.ObjectMeta) map[string]any {
	md := make(map[string]any, 12)
	set := func(key, value string) {
		if value != "" {
			md[key] = value
		}
	}
	set("name", m.Name)
	set("generateName", m.GenerateName)
	set("namespace", m.Namespace)
	set("uid", string(m.UID))
	set("resourceVersion", m.ResourceVersion)
	if m.Generation != 0 {
		md["generation"] = m.Generation
	}
	if !m.CreationTimestamp.IsZero() {
		set("creationTimestamp", timestamp(m.CreationTimestamp))
	}
	if m.DeletionTimestamp != nil {
		md["deletionTimestamp"] = timestamp(*m.DeletionTimestamp)
	}
	if m.DeletionGracePeriodSeconds != nil {
		md["deletionGracePeriodSeconds"] = *m.DeletionGracePeriodSeconds
	}
	if m.Labels != nil {
		md["labels"] = stringMap(m.Labels)
	}
	if m.Annotations != nil {
		md["annotations"] = stringMap(m.Annotations)
	}
	if m.OwnerReferences != nil {
		refs := make([]any, len(m.OwnerReferences))
		for i, r := range m.OwnerReferences {
			ref := map[string]any{"apiVersion": r.APIVersion, "kind": r.Kind, "name": r.Name, "uid": string(r.UID)}
			if r.Controller != nil {
				ref["controller"] = *r.Controller
			}
			if r.BlockOwnerDeletion != nil {
				ref["blockOwnerDeletion"] = *r.BlockOwnerDeletion
			}
			refs[i] = ref
		}
		md["ownerReferences"] = refs
	}
	if m.Finalizers != nil {
		fs := make([]any, len(m.Finalizers))
		for i, f := range m.Finalizers {
			fs[i] = f
		}
		md["finalizers"] = fs
	}
	return md
}

func timestamp(t metav1.Time) string {
	s, _ := t.MarshalQueryParameter()
	return s
}

func stringMap(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// Transform is the engine's cache transform: unstructured objects are
// kept as compactObjects, others without their managedFields. It is
// idempotent, as the informers require.
func Transform(obj any) (any, error) {
	if c, ok := obj.(*compactObject); ok {
		c.Labels = sharedLabels.intern(c.Labels)
		return c, nil
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return stripManagedFields(obj)
	}
	data, err := packed.AppendMapWithout(make([]byte, 0, 512), u.Object, "metadata")
	if err != nil {
		// Not from a decoder: keep it as it came.
		u.SetManagedFields(nil)
		return u, nil //nolint:nilerr // the object is kept whole instead
	}
	return &compactObject{
		TypeMeta: metav1.TypeMeta{APIVersion: u.GetAPIVersion(), Kind: u.GetKind()},
		ObjectMeta: metav1.ObjectMeta{
			Name:                       u.GetName(),
			GenerateName:               u.GetGenerateName(),
			Namespace:                  u.GetNamespace(),
			UID:                        u.GetUID(),
			ResourceVersion:            u.GetResourceVersion(),
			Generation:                 u.GetGeneration(),
			CreationTimestamp:          u.GetCreationTimestamp(),
			DeletionTimestamp:          u.GetDeletionTimestamp(),
			DeletionGracePeriodSeconds: u.GetDeletionGracePeriodSeconds(),
			Labels:                     sharedLabels.intern(u.GetLabels()),
			Annotations:                u.GetAnnotations(),
			OwnerReferences:            u.GetOwnerReferences(),
			Finalizers:                 u.GetFinalizers(),
		},
		rest: string(data),
	}, nil
}

var stripManagedFields toolscache.TransformFunc = cache.TransformStripManagedFields()

// sharedLabels are the label sets of the cached objects.
var sharedLabels = &labelSets{}

// labelSets shares equal label sets among the cached objects: an
// operator's children carry the same labels, and each set is a map of a
// few hundred bytes, held once per object otherwise. The cache's objects
// are read-only (DeepCopyObject builds new maps), so one map can serve
// them all. At most maxLabelSets sets are kept; when a new one would pass
// that, the table starts again empty, so that labels unique to each object
// do not grow it without bound (the maps already shared stay valid).
type labelSets struct {
	mu   sync.Mutex
	sets map[string]map[string]string
}

// maxLabelSets bounds a labelSets; sets of more than maxSharedLabels
// labels are not shared.
const (
	maxLabelSets    = 4096
	maxSharedLabels = 8
)

// intern returns a map equal to labels, shared when one was seen before.
func (t *labelSets) intern(labels map[string]string) map[string]string {
	if len(labels) == 0 || len(labels) > maxSharedLabels {
		return labels
	}
	var key []byte
	if len(labels) == 1 {
		for k, v := range labels {
			key = append(append(append(key, k...), 0), v...)
		}
	} else {
		keys := slices.Sorted(maps.Keys(labels))
		for _, k := range keys {
			key = append(append(append(append(key, k...), 0), labels[k]...), 0)
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if shared, ok := t.sets[string(key)]; ok {
		return shared
	}
	if t.sets == nil || len(t.sets) >= maxLabelSets {
		t.sets = make(map[string]map[string]string, 64)
	}
	t.sets[string(key)] = labels
	return labels
}

// SameWithout reports whether two cached states of an object, both kept
// as compact objects, hold the same fields but for their metadata and
// their top-level fields skip (see packed.EqualWithout). known is false
// when they are not both compact objects, or their packed forms do not
// read: the caller compares them itself.
func SameWithout(old, updated runtime.Object, skip ...string) (same, known bool) {
	a, ok1 := old.(*compactObject)
	b, ok2 := updated.(*compactObject)
	if !ok1 || !ok2 {
		return false, false
	}
	same, err := packed.EqualWithout(a.rest, b.rest, skip...)
	return same, err == nil
}

// Fields gives a cached object's fields to read: a compact object's
// decoded, an unstructured object's own map, which the caller must not
// write. ok is false for any other object, or a compact object whose
// packed form does not read.
func Fields(obj runtime.Object) (fields map[string]any, ok bool) {
	switch o := obj.(type) {
	case *compactObject:
		u, err := o.decode()
		if err != nil {
			return nil, false
		}
		return u.Object, true
	case *unstructured.Unstructured:
		return o.Object, o.Object != nil
	}
	return nil, false
}
