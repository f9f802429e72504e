package informer

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/watch"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/watchlist"
	sigsjson "sigs.k8s.io/json"

	"github.com/opkit-dev/opkit/internal/packed"
)

// Informers make the informers of the engine's shared cache. For an
// unstructured kind (a custom resource, a child, a related object) the
// informer lists and watches with a packedListWatch, which decodes each
// object's JSON straight into the cache's compactObject; any other kind
// gets the informer controller-runtime would make.
//
// Through controller-runtime's dynamic client, every watch event is
// decoded twice (once to find its kind, once into nested maps) and then
// packed by the cache's transform: the largest part of the engine's CPU
// on a drain, and garbage that sets its peak memory. Decoded here, the
// object's JSON is read once and the maps are never made.
//
// The shared cache has no label or field selector: what it holds is
// chosen by kind and by Options.Namespace alone. A watch operator's own
// cache (package watch) makes its informers with Informers of its own, of
// its one namespace (or all) and its label selector (LabelSelector);
// a watch of several namespaces keeps controller-runtime's informers,
// whose list-watch says nothing of the namespace it is for.
//
// Every informer's list and watch calls are held through an outage the
// engine knows of (heldListWatch), so that its reflector relists as soon
// as the API server is back, not after a back-off of its own.
type Informers struct {
	Config *rest.Config
	// HTTP is the client the list-watches use; set it before the first
	// informer is made (the manager's, once it exists).
	HTTP      *http.Client
	Scopes    *Scopes
	Namespace string // the engine's Options.Namespace: "" for all
	// LabelSelector selects the objects listed and watched (a watch
	// operator's spec.watch.selector, in its query form); "" for all.
	LabelSelector string
	// Outage, when set, holds the list and watch calls through the
	// outages it knows of (package health's Outage).
	Outage Outage
}

// Outage is what the informers ask of the API server's absence: Wait
// returns false at once unless the API server is known away, and then
// waits for its return (true) or for ctx's end (false).
type Outage interface {
	Wait(ctx context.Context) bool
}

// wait is o.Wait, false when o is nil.
func wait(ctx context.Context, o Outage) bool {
	return o != nil && o.Wait(ctx)
}

// NewInformer is the shared cache's cache.Options.NewInformer.
func (p *Informers) NewInformer(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, indexers toolscache.Indexers) toolscache.SharedIndexInformer {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return toolscache.NewSharedIndexInformer(p.Held(lw), obj, resync, indexers)
	}
	plw, err := p.listWatch(u.GroupVersionKind())
	if err != nil {
		// Not mapped yet: the dynamic client's list-watch reports it.
		return toolscache.NewSharedIndexInformer(p.Held(lw), obj, resync, indexers)
	}
	// The example object sets the type the reflector expects of every
	// event's object.
	return toolscache.NewSharedIndexInformer(p.Held(plw), &compactObject{TypeMeta: metav1.TypeMeta{APIVersion: u.GetAPIVersion(), Kind: u.GetKind()}}, resync, indexers)
}

// Held is lw with its calls held through the outages p.Outage knows of.
func (p *Informers) Held(lw toolscache.ListerWatcher) toolscache.ListerWatcher {
	return &heldListWatch{lw: toolscache.ToListerWatcherWithContext(lw), outer: lw, outage: p.Outage}
}

// heldListWatch is a list-watch whose calls that fail while the engine
// knows the API server away wait for its return and are made again at
// once, instead of failing: a reflector backs off after each failure
// (from 0.8 s, doubling up to 30 s, with jitter), and would relist up to
// half a minute after the API server's return. A call that fails while
// the API server is not known away fails as before.
type heldListWatch struct {
	lw     toolscache.ListerWatcherWithContext
	outer  toolscache.ListerWatcher // lw as given, for what it says of itself
	outage Outage
}

// List lists without a context; the reflector calls ListWithContext.
func (h *heldListWatch) List(opts metav1.ListOptions) (runtime.Object, error) {
	return h.ListWithContext(context.Background(), opts)
}

// Watch watches without a context; the reflector calls WatchWithContext.
func (h *heldListWatch) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	return h.WatchWithContext(context.Background(), opts)
}

// ListWithContext lists, held through a known outage.
func (h *heldListWatch) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	for {
		obj, err := h.lw.ListWithContext(ctx, opts)
		if err == nil || !wait(ctx, h.outage) {
			return obj, err
		}
	}
}

// WatchWithContext watches, held through a known outage.
func (h *heldListWatch) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	for {
		w, err := h.lw.WatchWithContext(ctx, opts)
		if err == nil || !wait(ctx, h.outage) {
			return w, err
		}
	}
}

// IsWatchListSemanticsUnSupported says what the list-watch held says of
// itself (client-go's watchlist.DoesClientNotSupportWatchListSemantics).
func (h *heldListWatch) IsWatchListSemanticsUnSupported() bool {
	return watchlist.DoesClientNotSupportWatchListSemantics(h.outer)
}

// ListWatch returns the list-watch the shared cache's informer of gvk
// uses, which decodes straight into compact objects (for tests; see
// CachedObjects).
func (p *Informers) ListWatch(gvk schema.GroupVersionKind) (toolscache.ListerWatcherWithContext, error) {
	lw, err := p.listWatch(gvk)
	if err != nil {
		return nil, err
	}
	return lw, nil
}

// listWatch returns the list-watch of gvk: in Options.Namespace if it is
// set and the kind namespaced, else everywhere.
func (p *Informers) listWatch(gvk schema.GroupVersionKind) (*packedListWatch, error) {
	k, err := p.Scopes.Of(gvk)
	if err != nil {
		return nil, err
	}
	cfg := rest.CopyConfig(p.Config)
	cfg.GroupVersion = &schema.GroupVersion{Group: gvk.Group, Version: gvk.Version}
	cfg.APIPath = "/apis"
	if gvk.Group == "" {
		cfg.APIPath = "/api"
	}
	cfg.ContentType = runtime.ContentTypeJSON
	cfg.AcceptContentTypes = runtime.ContentTypeJSON
	cfg.NegotiatedSerializer = clientgoscheme.Codecs.WithoutConversion()
	client, err := rest.RESTClientForConfigAndClient(cfg, p.HTTP)
	if err != nil {
		return nil, err
	}
	lw := &packedListWatch{client: client, resource: k.Resource.Resource, gvk: gvk, outage: p.Outage, selector: p.LabelSelector}
	if k.Namespaced {
		lw.namespace = p.Namespace
	}
	return lw, nil
}

// packedListWatch lists and watches one kind, decoding each object into a
// compactObject (see Informers).
type packedListWatch struct {
	client    rest.Interface
	resource  string
	namespace string // "": every namespace, or a cluster-scoped kind
	gvk       schema.GroupVersionKind
	outage    Outage
	selector  string // Informers.LabelSelector
}

func (lw *packedListWatch) request(opts *metav1.ListOptions) *rest.Request {
	if lw.selector != "" {
		opts.LabelSelector = lw.selector
	}
	return lw.client.Get().NamespaceIfScoped(lw.namespace, lw.namespace != "").Resource(lw.resource).SpecificallyVersionedParams(opts, metav1.ParameterCodec, metav1.SchemeGroupVersion)
}

// List lists without a context; the reflector calls ListWithContext.
func (lw *packedListWatch) List(opts metav1.ListOptions) (runtime.Object, error) {
	return lw.ListWithContext(context.Background(), opts)
}

// Watch watches without a context; the reflector calls WatchWithContext.
func (lw *packedListWatch) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	return lw.WatchWithContext(context.Background(), opts)
}

// ListWithContext lists one page.
func (lw *packedListWatch) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	body, err := lw.request(&opts).DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	var page struct {
		APIVersion string            `json:"apiVersion"`
		Kind       string            `json:"kind"`
		Metadata   metav1.ListMeta   `json:"metadata"`
		Items      []json.RawMessage `json:"items"`
	}
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(body, &page); err != nil {
		return nil, fmt.Errorf("listing %s: %w", lw.resource, err)
	}
	// The items of a built-in kind's list have no kind of their own: it
	// is the list's, less its List.
	itemType := metav1.TypeMeta{APIVersion: page.APIVersion, Kind: strings.TrimSuffix(page.Kind, "List")}
	list := &compactList{TypeMeta: metav1.TypeMeta{APIVersion: page.APIVersion, Kind: page.Kind}, ListMeta: page.Metadata, Items: make([]compactObject, len(page.Items))}
	for i, raw := range page.Items {
		obj, err := decodeCompact(raw, itemType)
		if err != nil {
			return nil, fmt.Errorf("listing %s: item %d: %w", lw.resource, i, err)
		}
		list.Items[i] = *obj
	}
	return list, nil
}

// WatchWithContext watches from opts.ResourceVersion.
func (lw *packedListWatch) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	body, err := lw.request(&opts).Stream(ctx)
	// A connection lost as the watch began (an API server going away or
	// behind a proxy) is tried again, as client-go's own watch does: ten
	// times, a second apart; then the watch ends at once, empty, and the
	// reflector watches again. Reported as an error, it would list
	// everything again for it, and log it. While the engine knows the API
	// server away, the watch waits for its return instead, and tries then.
	for retries := 0; err != nil && (utilnet.IsProbableEOF(err) || utilnet.IsHTTP2ConnectionLost(err)); retries++ {
		if wait(ctx, lw.outage) {
			retries = 0
		} else {
			if retries == 10 {
				return watch.NewEmptyWatch(), nil
			}
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(time.Second):
			}
		}
		body, err = lw.request(&opts).Stream(ctx)
	}
	if err != nil {
		return nil, err
	}
	w := &packedWatcher{body: body, result: make(chan watch.Event), done: make(chan struct{}), itemType: metav1.TypeMeta{APIVersion: lw.gvk.GroupVersion().String(), Kind: lw.gvk.Kind}}
	go w.receive()
	return w, nil
}

// packedWatcher reads a watch's events: JSON objects, one after another,
// each {"type": ..., "object": ...}.
type packedWatcher struct {
	body     io.ReadCloser
	result   chan watch.Event
	done     chan struct{}
	stopOnce sync.Once
	itemType metav1.TypeMeta
}

// Stop ends the watch; its result channel closes.
func (w *packedWatcher) Stop() {
	w.stopOnce.Do(func() {
		close(w.done)
		_ = w.body.Close()
	})
}

// ResultChan returns the events.
func (w *packedWatcher) ResultChan() <-chan watch.Event { return w.result }

func (w *packedWatcher) receive() {
	defer close(w.result)
	defer w.Stop()
	r := bufio.NewReaderSize(w.body, 64<<10)
	var line []byte
	for {
		var err error
		if line, err = readLine(r, line[:0]); err != nil {
			select {
			case <-w.done:
			default:
				// As client-go's stream watcher: a connection lost or timed
				// out ends the watch quietly, and the reflector watches
				// again from where it was.
				if !utilnet.IsProbableEOF(err) && !utilnet.IsTimeout(err) && !errors.Is(err, io.ErrUnexpectedEOF) && !isClosedBody(err) {
					w.send(watch.Event{Type: watch.Error, Object: internalError(fmt.Errorf("reading a watch event: %w", err))})
				}
			}
			return
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		ev, err := decodeEvent(line, w.itemType)
		if err != nil {
			w.send(watch.Event{Type: watch.Error, Object: internalError(err)})
			return
		}
		if !w.send(ev) {
			return
		}
	}
}

// maxEvent bounds a watch event's JSON: far above the largest object the
// API server stores.
const maxEvent = 64 << 20

// readLine reads the next line of r into line: the API server writes each
// watch event as one line of JSON (its encoder ends each with a newline,
// and JSON strings cannot hold one).
func readLine(r *bufio.Reader, line []byte) ([]byte, error) {
	for {
		frag, err := r.ReadSlice('\n')
		line = append(line, frag...)
		switch {
		case errors.Is(err, bufio.ErrBufferFull) && len(line) < maxEvent:
			continue
		case errors.Is(err, bufio.ErrBufferFull):
			return nil, fmt.Errorf("a watch event of more than %d bytes", maxEvent)
		case errors.Is(err, io.EOF) && len(bytes.TrimSpace(line)) > 0:
			return nil, io.ErrUnexpectedEOF
		}
		return line, err
	}
}

// decodeEvent decodes one line of a watch: an event whose object is a
// compactObject, or an ERROR event's Status.
func decodeEvent(line []byte, itemType metav1.TypeMeta) (watch.Event, error) {
	typ, raw, err := splitEvent(line, true)
	if err != nil {
		return watch.Event{}, err
	}
	switch typ {
	case watch.Added, watch.Modified, watch.Deleted, watch.Bookmark:
		c, err := decodeCompact(raw, itemType)
		if err != nil {
			// Cut where an object ended its envelope, it may have been
			// followed by more of the envelope: decode the envelope.
			if _, raw, err2 := splitEvent(line, false); err2 == nil {
				c, err = decodeCompact(raw, itemType)
			}
		}
		if err != nil {
			return watch.Event{}, fmt.Errorf("decoding a %s event: %w", typ, err)
		}
		return watch.Event{Type: typ, Object: c}, nil
	case watch.Error:
		status := &metav1.Status{}
		if err := json.Unmarshal(raw, status); err != nil {
			return watch.Event{}, fmt.Errorf("decoding an ERROR event: %w", err)
		}
		return watch.Event{Type: typ, Object: status}, nil
	}
	return watch.Event{}, fmt.Errorf("a watch event of unknown type %q", typ)
}

// splitEvent reads the type of a watch event and the raw JSON of its
// object. The API server writes {"type":"ADDED","object":{...}}, which
// with cut is cut there without decoding; any other spelling of the same
// is decoded.
func splitEvent(line []byte, cut bool) (watch.EventType, []byte, error) {
	line = bytes.TrimSpace(line)
	const typeKey, objectKey = `{"type":"`, `","object":`
	if rest, ok := bytes.CutPrefix(line, []byte(typeKey)); ok && cut {
		if typ, raw, ok := bytes.Cut(rest, []byte(objectKey)); ok && len(raw) > 0 && raw[len(raw)-1] == '}' &&
			!bytes.ContainsAny(typ, `"\`) {
			// The object's own JSON is checked as it is decoded.
			return watch.EventType(typ), raw[:len(raw)-1], nil
		}
	}
	var ev struct {
		Type   watch.EventType `json:"type"`
		Object json.RawMessage `json:"object"`
	}
	if err := json.Unmarshal(line, &ev); err != nil {
		return "", nil, fmt.Errorf("a watch event that is not one JSON object per line: %w", err)
	}
	return ev.Type, ev.Object, nil
}

// send sends ev unless the watch was stopped; it reports whether it sent.
func (w *packedWatcher) send(ev watch.Event) bool {
	select {
	case w.result <- ev:
		return true
	case <-w.done:
		return false
	}
}

// isClosedBody reports whether err comes from reading a body closed by
// Stop, or by the end of the request's context.
func isClosedBody(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, http.ErrBodyReadAfterClose) || strings.Contains(err.Error(), "use of closed network connection")
}

func internalError(err error) *metav1.Status {
	return &metav1.Status{Status: metav1.StatusFailure, Code: http.StatusInternalServerError, Reason: metav1.StatusReasonInternalError, Message: err.Error()}
}

// compactList is a page of a packedListWatch's list.
type compactList struct {
	metav1.TypeMeta
	metav1.ListMeta
	Items []compactObject
}

// DeepCopyObject copies the list; its items share their packed forms,
// which are immutable.
func (l *compactList) DeepCopyObject() runtime.Object {
	out := &compactList{TypeMeta: l.TypeMeta, Items: make([]compactObject, len(l.Items))}
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	for i := range l.Items {
		l.Items[i].ObjectMeta.DeepCopyInto(&out.Items[i].ObjectMeta)
		out.Items[i].TypeMeta, out.Items[i].rest = l.Items[i].TypeMeta, l.Items[i].rest
	}
	return out
}

// objectMeta is the metadata a compactObject keeps, as JSON has it:
// metav1.ObjectMeta without managedFields, which decoding then skips
// over instead of building.
type objectMeta struct {
	Name                       string                  `json:"name,omitempty"`
	GenerateName               string                  `json:"generateName,omitempty"`
	Namespace                  string                  `json:"namespace,omitempty"`
	UID                        types.UID               `json:"uid,omitempty"`
	ResourceVersion            string                  `json:"resourceVersion,omitempty"`
	Generation                 int64                   `json:"generation,omitempty"`
	CreationTimestamp          metav1.Time             `json:"creationTimestamp,omitempty"`
	DeletionTimestamp          *metav1.Time            `json:"deletionTimestamp,omitempty"`
	DeletionGracePeriodSeconds *int64                  `json:"deletionGracePeriodSeconds,omitempty"`
	Labels                     map[string]string       `json:"labels,omitempty"`
	Annotations                map[string]string       `json:"annotations,omitempty"`
	OwnerReferences            []metav1.OwnerReference `json:"ownerReferences,omitempty"`
	Finalizers                 []string                `json:"finalizers,omitempty"`
}

// decodeCompact decodes an object's JSON into the compactObject that
// Transform makes of the unstructured object the same JSON decodes
// to. An object without a kind has itemType's (a built-in list's items).
// What the direct decoding cannot take (a key given twice, metadata of
// the wrong types) takes the way through unstructured instead.
func decodeCompact(data []byte, itemType metav1.TypeMeta) (*compactObject, error) {
	rest, md, apiVersion, kind, err := packed.FromJSON(make([]byte, 0, len(data)/2), data, "metadata")
	if err != nil {
		if errors.Is(err, packed.ErrDuplicateKey) {
			return decodeCompactSlowly(data, itemType)
		}
		return nil, err
	}
	var m objectMeta
	if md != nil {
		if err := sigsjson.UnmarshalCaseSensitivePreserveInts(md, &m); err != nil {
			return decodeCompactSlowly(data, itemType)
		}
	}
	c := &compactObject{TypeMeta: metav1.TypeMeta{APIVersion: apiVersion, Kind: kind}, rest: string(rest)}
	if c.Kind == "" && c.APIVersion == "" {
		c.TypeMeta = itemType
	}
	c.ObjectMeta = metav1.ObjectMeta{
		Name: m.Name, GenerateName: m.GenerateName, Namespace: m.Namespace, UID: m.UID, ResourceVersion: m.ResourceVersion,
		Generation: m.Generation, CreationTimestamp: m.CreationTimestamp, DeletionTimestamp: m.DeletionTimestamp,
		DeletionGracePeriodSeconds: m.DeletionGracePeriodSeconds, Labels: m.Labels, Annotations: m.Annotations,
		OwnerReferences: m.OwnerReferences, Finalizers: m.Finalizers,
	}
	return c, nil
}

// decodeCompactSlowly is decodeCompact through an unstructured object.
func decodeCompactSlowly(data []byte, itemType metav1.TypeMeta) (*compactObject, error) {
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(data); err != nil {
		if !strings.Contains(err.Error(), "'Kind' is missing") {
			return nil, err
		}
		// An item of a built-in list: no kind of its own.
		var obj map[string]any
		if err := utiljson.Unmarshal(data, &obj); err != nil {
			return nil, err
		}
		u.Object = obj
		u.SetAPIVersion(itemType.APIVersion)
		u.SetKind(itemType.Kind)
	}
	out, err := Transform(u)
	if err != nil {
		return nil, err
	}
	c, ok := out.(*compactObject)
	if !ok {
		return nil, fmt.Errorf("an object that does not pack (%T)", out)
	}
	return c, nil
}
