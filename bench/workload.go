package main

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/opkit-dev/opkit/internal/sleep"

	"golang.org/x/sync/errgroup"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/cel/openapi/resolver"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/opkit-dev/opkit/bench/baseline"
	"github.com/opkit-dev/opkit/internal/definition"
)

//go:embed printer.yaml printer-exec.yaml printer-http.yaml printer-job.yaml watch.yaml webhook.yaml
var workloads embed.FS

var printers = baseline.GroupVersion.WithResource("printers")

// cluster is the benchmark's client of the control plane.
type cluster struct {
	cfg *rest.Config
	cs  kubernetes.Interface
	dyn dynamic.Interface
	ns  string
}

func newCluster(cfg *rest.Config, ns string) (*cluster, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS = -1 // the load generator must not be the bottleneck
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	c := &cluster{cfg: cfg, cs: cs, dyn: dyn, ns: ns}
	_, err = cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	return c, nil
}

// installCRD installs the Printer CRD exactly as opkit's engine would for
// the workload, so that both implementations serve the same resource and
// the engine finds its CRD already in place.
func (c *cluster) installCRD(ctx context.Context) error {
	data, err := workloads.ReadFile("printer.yaml")
	if err != nil {
		return err
	}
	srcs, err := definition.Load("printer.yaml", data)
	if err != nil {
		return err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(c.cfg)
	if err != nil {
		return err
	}
	d, err := definition.CompileWithSchemas(srcs[0], &resolver.ClientDiscoveryResolver{Discovery: memory.NewMemCacheClient(dc)})
	if err != nil {
		return err
	}
	crd := d.CRD()
	ext, err := apiextensions.NewForConfig(c.cfg)
	if err != nil {
		return err
	}
	if _, err := ext.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, cond := range got.Status.Conditions {
			if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
}

func printer(ns, name string) *unstructured.Unstructured {
	p := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"text": "hello from " + name}}}
	p.SetGroupVersionKind(baseline.GroupVersion.WithKind("Printer"))
	p.SetNamespace(ns)
	p.SetName(name)
	return p
}

// createPrinters creates the named Printers from 16 clients at once.
func (c *cluster) createPrinters(ctx context.Context, names []string) error {
	return inParallel(ctx, len(names), 16, func(ctx context.Context, i int) error { return c.createPrinter(ctx, names[i]) })
}

// inParallel calls f for 0 to n-1, at most concurrency calls at once; the
// first error stops it.
func inParallel(ctx context.Context, n, concurrency int, f func(ctx context.Context, i int) error) error {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(concurrency)
	for i := 0; i < n && ctx.Err() == nil; i++ {
		g.Go(func() error { return f(ctx, i) })
	}
	return g.Wait()
}

func (c *cluster) createPrinter(ctx context.Context, name string) error {
	_, err := c.dyn.Resource(printers).Namespace(c.ns).Create(ctx, printer(c.ns, name), metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating Printer %s: %w", name, err)
	}
	return nil
}

// cleanUp deletes the namespace's Printers, ConfigMaps, Jobs, Deployments,
// ReplicaSets and Events and waits until the Printers, ConfigMaps and
// Deployments are gone, so that the next
// measurement starts from an empty cache and an empty namespace (the
// console's timeline lists the namespace's Events, at a cost that grows
// with their number). A collection too large to delete within one
// request's timeout is deleted by further requests.
func (c *cluster) cleanUp(ctx context.Context) error {
	bg := metav1.DeletePropagationBackground
	del := metav1.DeleteOptions{PropagationPolicy: &bg}
	notRootCA := metav1.ListOptions{FieldSelector: "metadata.name!=kube-root-ca.crt"}
	var lastErr error
	err := wait.PollUntilContextTimeout(ctx, time.Second, 10*time.Minute, true, func(ctx context.Context) (bool, error) {
		lastErr = errors.Join(
			c.dyn.Resource(printers).Namespace(c.ns).DeleteCollection(ctx, del, metav1.ListOptions{}),
			c.cs.CoreV1().ConfigMaps(c.ns).DeleteCollection(ctx, del, notRootCA),
			c.cs.BatchV1().Jobs(c.ns).DeleteCollection(ctx, del, metav1.ListOptions{}),
			c.cs.AppsV1().Deployments(c.ns).DeleteCollection(ctx, del, metav1.ListOptions{}),
			c.cs.AppsV1().ReplicaSets(c.ns).DeleteCollection(ctx, del, metav1.ListOptions{}),
			c.cs.CoreV1().Events(c.ns).DeleteCollection(ctx, del, metav1.ListOptions{}),
		)
		ps, err := c.dyn.Resource(printers).Namespace(c.ns).List(ctx, metav1.ListOptions{Limit: 1})
		if err != nil {
			lastErr = err
			return false, nil
		}
		cms, err := c.cs.CoreV1().ConfigMaps(c.ns).List(ctx, metav1.ListOptions{Limit: 1, FieldSelector: notRootCA.FieldSelector})
		if err != nil {
			lastErr = err
			return false, nil
		}
		ds, err := c.cs.AppsV1().Deployments(c.ns).List(ctx, metav1.ListOptions{Limit: 1})
		if err != nil {
			lastErr = err
			return false, nil
		}
		return len(ps.Items) == 0 && len(cms.Items) == 0 && len(ds.Items) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("emptying namespace %s: %w", c.ns, errors.Join(err, lastErr))
	}
	return nil
}

// tracker watches the namespace and records, for each Printer, when its
// ConfigMap first appeared and when its status first showed the work done.
type tracker struct {
	mu      sync.Mutex
	created map[string]time.Time // set by the caller before creating
	child   map[string]time.Time
	done    map[string]time.Time
	// doneField is the status field whose presence means done.
	doneField string
	// jobs: a Job owned by the Printer counts as its child, not a ConfigMap.
	jobs bool
}

// track starts watching from now; the watches end with ctx.
func (c *cluster) track(ctx context.Context, doneField string, jobs bool) (*tracker, error) {
	t := &tracker{created: map[string]time.Time{}, child: map[string]time.Time{}, done: map[string]time.Time{}, doneField: doneField, jobs: jobs}
	ps := c.dyn.Resource(printers).Namespace(c.ns)
	if err := watchFrom(ctx, func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return ps.List(ctx, o) },
		func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) { return ps.Watch(ctx, o) }, t.printerEvent); err != nil {
		return nil, err
	}
	if jobs {
		js := c.cs.BatchV1().Jobs(c.ns)
		return t, watchFrom(ctx, func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return js.List(ctx, o) },
			func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) { return js.Watch(ctx, o) }, t.childEvent)
	}
	cms := c.cs.CoreV1().ConfigMaps(c.ns)
	return t, watchFrom(ctx, func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return cms.List(ctx, o) },
		func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) { return cms.Watch(ctx, o) }, t.childEvent)
}

// watchFrom lists once (for the current resourceVersion, with a page of
// one), then follows every change from there, re-watching when a watch
// closes. A watch that ends for good (410 Gone: the resource's storage
// was made again, as when its CRD changes, which an A/B comparison of two
// opkits whose CRDs differ does at each drain) is followed by a list, each
// object of it passed to each as seen then, and a watch from there.
func watchFrom(ctx context.Context, list func(context.Context, metav1.ListOptions) (runtime.Object, error), w func(context.Context, metav1.ListOptions) (watch.Interface, error), each func(time.Time, metav1.Object)) error {
	l, err := list(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return err
	}
	lm, err := meta(l)
	if err != nil {
		return err
	}
	rv := lm.GetResourceVersion()
	go func() {
		for ctx.Err() == nil {
			rw, err := watchtools.NewRetryWatcherWithContext(ctx, rv, &cache.ListWatch{WatchFuncWithContext: w})
			if err != nil {
				return
			}
			follow(ctx, rw, each)
			rw.Stop()
			if ctx.Err() != nil {
				return
			}
			if rv, err = listEach(ctx, list, each); err != nil {
				return
			}
		}
	}()
	return nil
}

// follow passes each object added or changed to each until the watch or
// ctx ends.
func follow(ctx context.Context, rw watch.Interface, each func(time.Time, metav1.Object)) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-rw.ResultChan():
			if !ok {
				return
			}
			if o, err := metaObject(ev.Object); err == nil && (ev.Type == watch.Added || ev.Type == watch.Modified) {
				each(time.Now(), o)
			}
		}
	}
}

// listEach lists every object, passes each to each as seen now, and
// returns the list's resourceVersion.
func listEach(ctx context.Context, list func(context.Context, metav1.ListOptions) (runtime.Object, error), each func(time.Time, metav1.Object)) (string, error) {
	for {
		l, err := list(ctx, metav1.ListOptions{})
		if err != nil {
			if !sleep.For(ctx, 100*time.Millisecond) {
				return "", ctx.Err()
			}
			continue
		}
		items, err := apimeta.ExtractList(l)
		if err != nil {
			return "", err
		}
		now := time.Now()
		for _, item := range items {
			if o, err := metaObject(item); err == nil {
				each(now, o)
			}
		}
		lm, err := meta(l)
		if err != nil {
			return "", err
		}
		return lm.GetResourceVersion(), nil
	}
}

func meta(o runtime.Object) (metav1.ListInterface, error) {
	if l, ok := o.(metav1.ListInterface); ok {
		return l, nil
	}
	return nil, fmt.Errorf("%T is not a list", o)
}

func metaObject(o runtime.Object) (metav1.Object, error) {
	if m, ok := o.(metav1.Object); ok {
		return m, nil
	}
	return nil, fmt.Errorf("%T has no metadata", o)
}

func (t *tracker) printerEvent(at time.Time, o metav1.Object) {
	u, ok := o.(*unstructured.Unstructured)
	if !ok {
		return
	}
	if v, found, _ := unstructured.NestedFieldNoCopy(u.Object, "status", t.doneField); !found || v == nil || v == "" || v == false {
		return
	}
	t.mu.Lock()
	if _, seen := t.done[u.GetName()]; !seen {
		t.done[u.GetName()] = at
	}
	t.mu.Unlock()
}

func (t *tracker) childEvent(at time.Time, o metav1.Object) {
	var owner string
	for _, ref := range o.GetOwnerReferences() {
		// Children have a controller reference; handlers' Jobs a plain one.
		if ref.Kind == "Printer" && (t.jobs || (ref.Controller != nil && *ref.Controller)) {
			owner = ref.Name
		}
	}
	if owner == "" || (!t.jobs && o.GetName() != baseline.ChildName(owner)) {
		return
	}
	t.mu.Lock()
	if _, seen := t.child[owner]; !seen {
		t.child[owner] = at
	}
	t.mu.Unlock()
}

// markCreated records when the creation of a Printer began.
func (t *tracker) markCreated(name string, at time.Time) {
	t.mu.Lock()
	t.created[name] = at
	t.mu.Unlock()
}

// wait waits until every named Printer has its child (unless childless) and
// its status, and returns when the last of them was seen.
func (t *tracker) wait(ctx context.Context, names []string, needChild, needDone bool, timeout time.Duration) (time.Time, error) {
	var last time.Time
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		t.mu.Lock()
		defer t.mu.Unlock()
		last = time.Time{}
		for _, n := range names {
			c, hasChild := t.child[n]
			d, isDone := t.done[n]
			if (needChild && !hasChild) || (needDone && !isDone) {
				return false, nil
			}
			if needChild && c.After(last) {
				last = c
			}
			if needDone && d.After(last) {
				last = d
			}
		}
		return true, nil
	})
	if err != nil {
		t.mu.Lock()
		defer t.mu.Unlock()
		var children, done int
		for _, n := range names {
			if _, ok := t.child[n]; ok {
				children++
			}
			if _, ok := t.done[n]; ok {
				done++
			}
		}
		return last, fmt.Errorf("after %s, %d of %d Printers have their child and %d their status: %w", timeout, children, len(names), done, err)
	}
	return last, nil
}

// first returns when the first of the named Printers got its child.
func (t *tracker) first(names []string) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	var first time.Time
	for _, n := range names {
		if c, ok := t.child[n]; ok && (first.IsZero() || c.Before(first)) {
			first = c
		}
	}
	return first
}

// latencies returns, for the named Printers, the time from the start of
// their creation to the child and to the status.
func (t *tracker) latencies(names []string) (toChild, toDone []time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, n := range names {
		c0 := t.created[n]
		if c, ok := t.child[n]; ok {
			toChild = append(toChild, c.Sub(c0))
		}
		if d, ok := t.done[n]; ok {
			toDone = append(toDone, d.Sub(c0))
		}
	}
	return toChild, toDone
}

// listSlow writes a line to w for each of names whose status took longer
// than slow: when, from the first creation, it was created, and its times
// to child and to status.
func (t *tracker) listSlow(w io.Writer, names []string, slow time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(names) == 0 {
		return
	}
	t0 := t.created[names[0]]
	for _, n := range names {
		c0 := t.created[n]
		if d := t.done[n].Sub(c0); d > slow {
			fmt.Fprintf(w, "  slow %s at %v: child %v, status %v\n", n, c0.Sub(t0).Round(time.Millisecond),
				t.child[n].Sub(c0).Round(time.Millisecond), d.Round(time.Millisecond))
		}
	}
}

func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%05d", prefix, i)
	}
	return out
}

func loadConfig(kubeconfig string) (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("loading the kubeconfig %s: %w", kubeconfig, err)
	}
	return cfg, nil
}
