package engine_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
	"github.com/opkit-dev/opkit/internal/engine"
)

// writeCounter counts the requests a client sends that are not reads.
type writeCounter struct {
	next   http.RoundTripper
	writes atomic.Int64
	mu     sync.Mutex
	last   []string // the latest writes, for the failure message
}

func (w *writeCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodGet && req.Method != http.MethodHead {
		w.writes.Add(1)
		w.mu.Lock()
		w.last = append(w.last, req.Method+" "+req.URL.Path)
		if len(w.last) > 20 {
			w.last = w.last[1:]
		}
		w.mu.Unlock()
	}
	return w.next.RoundTrip(req)
}

// runEngine runs an engine of env's namespace alone (engines of tests
// running in parallel never act on each other's objects) with the
// definitions in files; the returned function stops it and waits until it
// stopped. A test of what an engine of every namespace does calls
// runEngineWith without a Namespace, and does not run in parallel.
func runEngine(t *testing.T, env *clustertest.Env, files ...string) (*engine.Engine, func()) {
	t.Helper()
	return runEngineWith(t, engine.Options{Config: env.Config, Namespace: env.Namespace}, files...)
}

// runEngineWith is runEngine with options; without an archive it gets a
// new one.
func runEngineWith(t *testing.T, opts engine.Options, files ...string) (*engine.Engine, func()) {
	t.Helper()
	if opts.Archive == nil {
		opts.Archive = newArchive(t)
	}
	e, err := engine.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("engine: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	defs, err := definition.CompileFiles(files...)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range defs {
		if err := e.Apply(t.Context(), d); err != nil {
			t.Fatal(err)
		}
	}
	return e, stop
}

// newArchive opens an archive in the test's directory, closed at its end.
func newArchive(t *testing.T) *archive.SQLite {
	t.Helper()
	store, err := archive.OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "runs.db"), archive.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	return store
}

// storedChanges watches resources (their group, version and plural) in
// namespace from now on for d and returns every change the API server
// stored there meanwhile, whoever made it: the engine, a handler, the dev
// node or a controller. A watch from the lists' resourceVersion sees each
// write that changed an object; a request that changed nothing stores
// nothing, and the engine's own requests are counted apart (writeCounter).
// It counts one namespace, so a test using it runs beside the others.
func storedChanges(t *testing.T, cfg *rest.Config, namespace string, d time.Duration, resources ...schema.GroupVersionResource) []string {
	t.Helper()
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var (
		mu      sync.Mutex
		changes []string
		wg      sync.WaitGroup
	)
	for _, r := range resources {
		list, err := dc.Resource(r).Namespace(namespace).List(ctx, metav1.ListOptions{Limit: 1})
		if err != nil {
			t.Fatalf("listing %s: %v", r.Resource, err)
		}
		timeout := int64((d + time.Minute).Seconds())
		w, err := dc.Resource(r).Namespace(namespace).Watch(ctx, metav1.ListOptions{ResourceVersion: list.GetResourceVersion(), TimeoutSeconds: &timeout})
		if err != nil {
			t.Fatalf("watching %s: %v", r.Resource, err)
		}
		wg.Go(func() {
			defer w.Stop()
			for ev := range w.ResultChan() {
				c := fmt.Sprintf("%s %s", ev.Type, r.Resource)
				if o, ok := ev.Object.(*unstructured.Unstructured); ok {
					c += " " + o.GetName() + " at resourceVersion " + o.GetResourceVersion()
				}
				mu.Lock()
				changes = append(changes, c)
				mu.Unlock()
			}
			if ctx.Err() == nil {
				mu.Lock()
				changes = append(changes, "the watch of "+r.Resource+" ended before the window did")
				mu.Unlock()
			}
		})
	}
	select {
	case <-time.After(d):
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	// What the watches say once the window closed (their end, at the
	// least) is not the window's.
	mu.Lock()
	seen := slices.Clone(changes)
	mu.Unlock()
	cancel()
	wg.Wait()
	return seen
}

func TestConvergedPrintersCauseNoWrites(t *testing.T) {
	t.Parallel()
	const printers = 500
	env := clustertest.New(t)
	cfg := rest.CopyConfig(env.Config)
	counter := &writeCounter{}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { counter.next = rt; return counter })
	runEngineWith(t, engine.Options{Config: cfg, Namespace: env.Namespace}, "../../examples/printer/operator.yaml")
	start := time.Now()

	// Create them from 16 clients at once.
	names := make(chan int)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := range names {
				p := printer(env.Namespace, fmt.Sprintf("p%03d", i), fmt.Sprintf("text %d", i))
				eventually(t, 30*time.Second, "create "+p.GetName(), func(ctx context.Context) (bool, error) {
					err := env.Client.Create(ctx, p)
					return err == nil || apierrors.IsAlreadyExists(err), nil
				})
			}
		})
	}
	for i := range printers {
		names <- i
	}
	close(names)
	wg.Wait()
	t.Logf("%d Printers created in %s", printers, time.Since(start).Round(time.Millisecond))

	eventually(t, 5*time.Minute, "every Printer Ready with its Pod Succeeded", func(ctx context.Context) (bool, error) {
		list := &unstructured.UnstructuredList{}
		list.SetAPIVersion("demo.example.com/v1")
		list.SetKind("PrinterList")
		if err := env.Client.List(ctx, list, client.InNamespace(env.Namespace)); err != nil {
			return false, err
		}
		ready := 0
		for _, p := range list.Items {
			phase, _, _ := unstructured.NestedString(p.Object, "status", "phase")
			observed, _, _ := unstructured.NestedInt64(p.Object, "status", "observedGeneration")
			if conditionStatus(&p, "Ready") == "True" && phase == string(corev1.PodSucceeded) && observed == p.GetGeneration() {
				ready++
			}
		}
		return ready == printers, nil
	})
	t.Logf("%d Printers converged in %s, after %d writes by the engine", printers, time.Since(start).Round(time.Millisecond), counter.writes.Load())

	engineBefore := counter.writes.Load()
	changes := storedChanges(t, env.Config, env.Namespace, 60*time.Second,
		schema.GroupVersionResource{Group: "demo.example.com", Version: "v1", Resource: "printers"},
		schema.GroupVersionResource{Version: "v1", Resource: "pods"},
		schema.GroupVersionResource{Version: "v1", Resource: "events"})
	if n := counter.writes.Load() - engineBefore; n != 0 {
		counter.mu.Lock()
		t.Errorf("the engine made %d writes in 60 s at steady state; the last ones: %v", n, counter.last)
		counter.mu.Unlock()
	}
	if len(changes) != 0 {
		t.Errorf("%d Printers, Pods or Events of the namespace changed in 60 s at steady state: %v", len(changes), changes[:min(len(changes), 20)])
	}
}

func TestChangesMadeWhileTheEngineIsStoppedConvergeWhenItStarts(t *testing.T) {
	t.Parallel()
	env := clustertest.New(t)
	ctx := t.Context()
	file := t.TempDir() + "/notes.yaml"
	writeFile(t, file, strings.NewReplacer("name: notes}", "name: offline}", "group: notes.example.com", "group: offline.example.com").Replace(notesV1))
	_, stop := runEngine(t, env, file)
	note := func(name, a string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "offline.example.com/v1", "kind": "Note",
			"metadata": map[string]any{"name": name, "namespace": env.Namespace},
			"spec":     map[string]any{"a": a},
		}}
	}
	configData := func(name string) (string, error) {
		cm := &corev1.ConfigMap{}
		err := env.Client.Get(ctx, client.ObjectKey{Namespace: env.Namespace, Name: name + "-note"}, cm)
		return cm.Data["a"], err
	}
	for _, n := range []string{"changed", "deleted", "drifted", "lost"} {
		if err := env.Client.Create(ctx, note(n, "before")); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 30*time.Second, "four ConfigMaps", func(context.Context) (bool, error) {
		for _, n := range []string{"changed", "deleted", "drifted", "lost"} {
			if a, err := configData(n); err != nil || a != "before" {
				return false, client.IgnoreNotFound(err)
			}
		}
		return true, nil
	})
	stop()

	// While it is stopped: one Note created, one changed, one deleted, one
	// child changed by hand and one child deleted by hand.
	if err := env.Client.Create(ctx, note("created", "offline")); err != nil {
		t.Fatal(err)
	}
	changed := note("changed", "")
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(changed), changed); err != nil {
		t.Fatal(err)
	}
	_ = unstructured.SetNestedField(changed.Object, "offline", "spec", "a")
	if err := env.Client.Update(ctx, changed); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(ctx, note("deleted", "")); err != nil {
		t.Fatal(err)
	}
	drifted := &corev1.ConfigMap{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: env.Namespace, Name: "drifted-note"}, drifted); err != nil {
		t.Fatal(err)
	}
	drifted.Data["a"] = "edited by hand"
	if err := env.Client.Update(ctx, drifted); err != nil {
		t.Fatal(err)
	}
	lost := &corev1.ConfigMap{}
	lost.Name, lost.Namespace = "lost-note", env.Namespace
	if err := env.Client.Delete(ctx, lost); err != nil {
		t.Fatal(err)
	}

	runEngine(t, env, file)
	eventually(t, 60*time.Second, "every change converged", func(context.Context) (bool, error) {
		for name, want := range map[string]string{"created": "offline", "changed": "offline", "drifted": "before", "lost": "before"} {
			if a, err := configData(name); err != nil || a != want {
				return false, client.IgnoreNotFound(err)
			}
		}
		_, err := configData("deleted") // garbage-collected
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}
