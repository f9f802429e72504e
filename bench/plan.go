package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/engine"
	"github.com/opkit-dev/opkit/internal/plan"
)

// The plan scenario: issue 41's goal, opkit plan over 10,000 objects in
// under a minute. opkit's engine, in this process, runs the Website
// example (examples/website/operator.yaml, read from the repository, so
// that the figure follows the example) and makes the children of
// -plan-objects Websites (a ConfigMap and a Deployment each, no replicas:
// no Pods). Once every Website has both children and its status, the
// engine stops, the plane settles, and plan.Run, what opkit plan -f runs,
// plans a template edit that changes both children of every Website (a
// key added to the ConfigMap, a new image for the Deployment): a
// server-side apply dry-run per child.
//
// Measured: the objects planned, the wall time of plan.Run (the List of
// the Websites and of their children included) and objects per second.
// Checked: every Website planned, without error, with both its children
// changed (2N), and nothing created, re-created or pruned; otherwise the
// scenario fails. There is no baseline: controller-runtime plans nothing.

// planScenario names the scenario and its figures.
const planScenario = "plan"

// websiteExample is the definition the scenario runs, from the
// repository's root.
const websiteExample = "examples/website/operator.yaml"

// planEdits are the template edit planned, each old text replaced by the
// new once: both children of every Website change.
var planEdits = [][2]string{
	{`        https: "${self.spec.https ? 'on' : 'off'}"`, `        https: "${self.spec.https ? 'on' : 'off'}"
        footer: "served by opkit"`},
	{`image: busybox:1.36`, `image: busybox:1.37`},
}

var websites = schema.GroupVersionResource{Group: "demo.example.com", Version: "v1", Resource: "websites"}

// planGoal is the objects issue 41's goal names, planned in planGoalTime.
const (
	planGoal     = 10_000
	planGoalTime = time.Minute
)

func (b *bench) plan(ctx context.Context) (err error) {
	n := b.opts.PlanObjects
	old, updated, err := planDefinitions()
	if err != nil {
		return err
	}
	// From an empty namespace, as every measurement.
	if err := b.deleteWebsites(ctx); err != nil {
		return err
	}
	e, closeAll, err := b.startInProcess(ctx, engine.Options{Namespace: b.c.ns}, old)
	if err != nil {
		return err
	}
	defer closeAll()
	// The Websites go, and their children with them, unless the bench
	// was interrupted: then the next plan scenario deletes them first.
	defer func() {
		if cerr := b.deleteWebsites(ctx); cerr != nil && err == nil {
			err = cerr
		}
	}()
	t0 := time.Now()
	if err := b.createWebsites(ctx, n); err != nil {
		return err
	}
	// Three writes a Website (two children and the status), where a
	// Printer takes two: the wait is as generous again.
	if err := b.waitWebsites(ctx, n, 2*b.timeout(n)); err != nil {
		return fmt.Errorf("%w (log: %s)", err, e.log)
	}
	fmt.Fprintf(b.log, "  %d Websites made in %s\n", n, time.Since(t0).Round(100*time.Millisecond))
	// The plan is measured alone: the engine stopped, and the plane done
	// with the work the Websites left it (the Deployments' ReplicaSets).
	if err := e.stopped(); err != nil {
		return err
	}
	if err := b.settle(ctx, time.Minute, "plan"); err != nil {
		return err
	}

	start := time.Now()
	p, err := plan.Run(ctx, plan.Options{Config: b.c.cfg, New: updated, Old: old, Namespace: b.c.ns})
	elapsed := time.Since(start)
	if err != nil {
		return fmt.Errorf("planning: %w", err)
	}
	sum := p.Summary
	changed := sum.Created + sum.Updated + sum.Recreated + sum.Pruned
	b.add(planScenario, opkitDefaults.Name, "objects planned", "", float64(sum.Objects))
	b.add(planScenario, opkitDefaults.Name, "wall time", "s", elapsed.Seconds())
	b.add(planScenario, opkitDefaults.Name, "objects/s", "/s", float64(sum.Objects)/elapsed.Seconds())
	b.add(planScenario, opkitDefaults.Name, "children changed", "", float64(changed))
	b.note("plan: opkit alone; there is no baseline (controller-runtime plans nothing), so no ratio")

	switch {
	case p.Refused != "":
		return fmt.Errorf("the plan was refused: %s", p.Refused)
	case sum.Objects != n || sum.Errors != 0:
		return fmt.Errorf("%d Websites planned, %d with errors (the first: %s); want %d, none", sum.Objects, sum.Errors, firstPlanError(p), n)
	case sum.Updated != 2*n || changed != 2*n:
		return fmt.Errorf("%d children changed as planned (%+v), want %d updated: each Website's ConfigMap and Deployment", changed, sum, 2*n)
	}
	return nil
}

// planDefinitions compiles the Website example and the example with
// planEdits.
func planDefinitions() (old, updated *definition.Definition, err error) {
	path, err := findWebsiteExample()
	if err != nil {
		return nil, nil, err
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	text := string(data)
	for _, e := range planEdits {
		if !strings.Contains(text, e[0]) {
			return nil, nil, fmt.Errorf("%s has no %q for the plan scenario to edit", websiteExample, e[0])
		}
		text = strings.Replace(text, e[0], e[1], 1)
	}
	compile := func(data []byte) (*definition.Definition, error) {
		srcs, err := definition.Load(websiteExample, data)
		if err != nil {
			return nil, err
		}
		return definition.Compile(srcs[0])
	}
	if old, err = compile(data); err != nil {
		return nil, nil, err
	}
	if updated, err = compile([]byte(text)); err != nil {
		return nil, nil, fmt.Errorf("%s edited: %w", websiteExample, err)
	}
	return old, updated, nil
}

// findWebsiteExample finds websiteExample in the working directory or
// the nearest above it: go run ./bench runs at the repository's root, go
// test in bench.
func findWebsiteExample() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		path := filepath.Join(dir, filepath.FromSlash(websiteExample))
		if _, err := os.Stat(path); err == nil {
			return path, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("the plan scenario runs %s: run the bench from the opkit repository (no such file here or above)", websiteExample)
		}
		dir = parent
	}
}

// createWebsites creates n Websites of no replicas from 16 clients at
// once.
func (b *bench) createWebsites(ctx context.Context, n int) error {
	ws := b.c.dyn.Resource(websites).Namespace(b.c.ns)
	return inParallel(ctx, n, 16, func(ctx context.Context, i int) error {
		name := fmt.Sprintf("site-%05d", i)
		site := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "demo.example.com/v1", "kind": "Website",
			"metadata": map[string]any{"name": name, "namespace": b.c.ns},
			// No Pods: 10,000 would not fit the plane's node.
			"spec": map[string]any{"content": fmt.Sprintf("<h1>%s</h1>", name), "replicas": int64(0)},
		}}
		if _, err := ws.Create(ctx, site, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating Website %s: %w", name, err)
		}
		return nil
	})
}

// waitWebsites waits until n Websites have their status written (which
// reads the ConfigMap) and n Deployments exist.
func (b *bench) waitWebsites(ctx context.Context, n int, timeout time.Duration) error {
	ws := b.c.dyn.Resource(websites).Namespace(b.c.ns)
	var done, deployments int
	// Read from the API server's watch cache: two Lists of up to 10,000
	// objects every two seconds weigh little.
	cached := metav1.ListOptions{ResourceVersion: "0"}
	err := wait.PollUntilContextTimeout(ctx, 2*time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		list, err := ws.List(ctx, cached)
		if err != nil {
			return false, err
		}
		done = 0
		for _, site := range list.Items {
			if v, _, _ := unstructured.NestedString(site.Object, "status", "contentVersion"); v != "" {
				done++
			}
		}
		ds, err := b.c.cs.AppsV1().Deployments(b.c.ns).List(ctx, cached)
		if err != nil {
			return false, err
		}
		deployments = len(ds.Items)
		return done >= n && deployments >= n, nil
	})
	if err != nil {
		return fmt.Errorf("after %s, %d of %d Websites had their status and %d their Deployment: %w", timeout, done, n, deployments, err)
	}
	return nil
}

// deleteWebsites deletes the namespace's Websites and waits until they
// are gone, and then their children. Where the Website CRD is not
// installed, there are none.
func (b *bench) deleteWebsites(ctx context.Context) error {
	ws := b.c.dyn.Resource(websites).Namespace(b.c.ns)
	bg := metav1.DeletePropagationBackground
	var left int
	err := wait.PollUntilContextTimeout(ctx, time.Second, 10*time.Minute, true, func(ctx context.Context) (bool, error) {
		err := ws.DeleteCollection(ctx, metav1.DeleteOptions{PropagationPolicy: &bg}, metav1.ListOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		list, err := ws.List(ctx, metav1.ListOptions{Limit: 1})
		if err != nil {
			return false, err
		}
		left = len(list.Items)
		return left == 0, nil
	})
	if err != nil {
		return fmt.Errorf("deleting the Websites of %s (%d or more left): %w", b.c.ns, left, err)
	}
	return b.c.cleanUp(ctx)
}

// firstPlanError is the first error the plan reports of an object.
func firstPlanError(p *plan.Plan) string {
	for _, o := range p.Objects {
		if len(o.Errors) > 0 {
			return fmt.Sprintf("%s/%s: %s", o.Namespace, o.Name, o.Errors[0])
		}
	}
	return "none"
}
