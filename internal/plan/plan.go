package plan

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/compat"
	"github.com/opkit-dev/opkit/internal/definition"
)

// Unknown is what a planned value reads that only the apply makes: the
// resourceVersion of a child changed or created.
const Unknown = "(known after apply)"

// Options are what Plan plans.
type Options struct {
	// Config is the cluster's. Required.
	Config *rest.Config
	// New is the definition to plan. Required.
	New *definition.Definition
	// Old is the definition the cluster runs now. Required: its CRD is
	// what the new one is checked against, and its children are those a
	// child no longer rendered is pruned from.
	Old *definition.Definition
	// Namespace limits the plan to the custom resources of one namespace.
	// Defaults to every namespace.
	Namespace string
	// Concurrency is how many objects are planned at once (each makes at
	// most one dry-run at a time). Defaults to 32: 10,000 objects of two
	// children each, all changed, plan in about 40 s on a 2-core machine.
	Concurrency int
	// Now is the time handlers are decided at. Defaults to time.Now().
	Now time.Time
	// Paused is the pause of the whole operator (v1alpha1.PauseAnnotation
	// on its Operator in the cluster, as v1alpha1.ReadRequest reads it);
	// nil when it is not paused. While it is, no handler of any object
	// starts: the runs the change causes are planned to start at its
	// resume (HandlerRun.AtResume), and no state moves.
	Paused *v1alpha1.Pause
}

// Plan is what a new definition changes: the stable shape of opkit plan
// -o json.
type Plan struct {
	Operator string `json:"operator"`
	// Resource is the custom resource's kind.group.
	Resource string `json:"resource"`
	// Refused says why the definition cannot be applied (a breaking CRD
	// change); nothing was planned. Empty otherwise.
	Refused string `json:"refused,omitempty"`
	// Paused says that the whole operator is paused, by whom and why: the
	// runs planned start at its resume. Empty when it is not.
	Paused string `json:"paused,omitempty"`
	// Lint are the CRD compatibility findings (package compat).
	Lint    []Finding `json:"lint,omitempty"`
	Summary Summary   `json:"summary"`
	// Objects are the custom resources the definition changes something
	// for, by namespace and name; unchanged ones are counted only.
	Objects []Object `json:"objects"`
	// Rollout is the objects each step of the new definition's
	// spec.rollout moves, when it has one: the change reaches them in
	// these steps, each once the objects before it are healthy.
	Rollout []RolloutStep `json:"rollout,omitempty"`
}

// Finding is one CRD compatibility finding.
type Finding struct {
	// Severity is breaking or warning.
	Severity string `json:"severity"`
	Field    string `json:"field"`
	Reason   string `json:"reason"`
	// Text is the finding as opkit lint prints it.
	Text string `json:"text"`
}

// Summary counts what the plan found.
type Summary struct {
	// Objects is the count of custom resources planned; Changed of those
	// the definition changes something for.
	Objects int `json:"objects"`
	Changed int `json:"changed"`
	// Children by what happens to them.
	Created   int `json:"created"`
	Updated   int `json:"updated"`
	Recreated int `json:"recreated"`
	Pruned    int `json:"pruned"`
	Unchanged int `json:"unchanged"`
	// HandlerRuns is the count of runs the change causes.
	HandlerRuns int `json:"handlerRuns"`
	// StatusChanges is the count of status fields that change.
	StatusChanges int `json:"statusChanges"`
	// StateEffects is the count of the state machine's effects: moves,
	// objects in states no longer declared.
	StateEffects int `json:"stateEffects"`
	// Errors is the count of objects that could not be planned in full.
	Errors int `json:"errors"`
}

// Changes reports whether the plan changes anything.
func (s Summary) Changes() bool {
	return s.Created+s.Updated+s.Recreated+s.Pruned+s.HandlerRuns+s.StatusChanges+s.StateEffects > 0
}

// Object is what the definition changes for one custom resource.
type Object struct {
	Namespace string  `json:"namespace,omitempty"`
	Name      string  `json:"name"`
	Children  []Child `json:"children,omitempty"`
	// Handlers are the runs the change causes, in the order they run.
	Handlers []HandlerRun `json:"handlers,omitempty"`
	// Status are the status fields that change.
	Status []Change `json:"status,omitempty"`
	// States are the state machine's effects, as sentences.
	States []string `json:"states,omitempty"`
	// Errors are what could not be planned, as sentences.
	Errors []string `json:"errors,omitempty"`
}

// Child actions.
const (
	Create    = "create"
	Update    = "update"
	Recreate  = "recreate"
	Prune     = "prune"
	Unchanged = "unchanged"
	// Waiting: the child reads another that does not exist yet, and is not
	// applied until it does.
	Waiting = "waiting"
)

// Child is what happens to one child.
type Child struct {
	ID         string `json:"id"`
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace,omitempty"`
	Name       string `json:"name"`
	// Action is create, update, recreate, prune, unchanged or waiting.
	Action string `json:"action"`
	// Changes are the fields an update (or a re-creation) changes.
	Changes []Change `json:"changes,omitempty"`
}

// Change is one field's change: op is add, remove or change; path a
// dotted path, list items by index (spec.containers[0].image).
type Change struct {
	Op   string `json:"op"`
	Path string `json:"path"`
	Old  any    `json:"old,omitempty"`
	New  any    `json:"new,omitempty"`
}

// HandlerRun is a run the change causes.
type HandlerRun struct {
	Handler string `json:"handler"`
	// Trigger is create, update, when, enter, exit or delete.
	Trigger string `json:"trigger"`
	// Reason says why, as a sentence.
	Reason string `json:"reason"`
	// Key is the run's idempotency key.
	Key string `json:"key"`
	// AtResume: the whole operator is paused (Plan.Paused), and the run
	// starts at its resume.
	AtResume bool `json:"atResume,omitempty"`
}

// Run plans o.New against the cluster.
func Run(ctx context.Context, o Options) (*Plan, error) {
	if o.New == nil || o.Old == nil || o.Config == nil {
		return nil, errors.New("plan: Options.Config, New and Old are required")
	}
	if !o.New.Owns() {
		return nil, fmt.Errorf("operator %s has no custom resource (%s): there are no objects to plan", o.New.Operator.Name, o.New.What())
	}
	if !o.Old.Owns() {
		return nil, fmt.Errorf("the previous operator %s has no custom resource (%s): there are no objects to plan", o.Old.Operator.Name, o.Old.What())
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 32
	}
	if o.Now.IsZero() {
		o.Now = time.Now()
	}
	p := &Plan{Operator: o.New.Operator.Name, Resource: o.New.GVK.Kind + "." + o.New.GVK.Group, Objects: []Object{}}
	if o.Paused != nil {
		p.Paused = pausedBy(o.New.Operator.Name, *o.Paused)
	}
	var breaking []compat.Finding
	for _, f := range compat.Compare(o.Old.CRD(), o.New.CRD()) {
		text := f.At(o.New.Source, o.New.Line(f.DefinitionField))
		p.Lint = append(p.Lint, Finding{Severity: string(f.Severity), Field: f.Field, Reason: f.Reason, Text: text})
		if f.Severity == compat.Breaking {
			breaking = append(breaking, f)
		}
	}
	if len(breaking) > 0 {
		p.Refused = fmt.Sprintf("%s, the first %s: %s; opkit run refuses it unless --allow-breaking",
			count1(len(breaking), "breaking CRD change", "breaking CRD changes"), breaking[0].Field, breaking[0].Reason)
		return p, nil
	}
	if o.Old.GVK != o.New.GVK {
		// Not breaking (a new version served, say): the objects are read
		// as the new definition reads them.
		o.Old = withGVK(o.Old, o.New.GVK)
	}

	cfg := rest.CopyConfig(o.Config)
	// One dry-run per changed child: the client's default rate (5/s)
	// would take half an hour for 10,000 objects.
	cfg.QPS, cfg.Burst = float32(20*o.Concurrency), 40*o.Concurrency
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return nil, fmt.Errorf("a client of the cluster: %w", err)
	}
	pl := &planner{c: c, old: o.Old, def: o.New, now: o.Now, paused: o.Paused != nil}
	crs, err := pl.list(ctx, o.New.GVK, o.Namespace, nil)
	if meta.IsNoMatchError(err) {
		return nil, fmt.Errorf("the cluster does not serve %s (its CRD is not installed): there are no objects to plan", p.Resource)
	}
	if err != nil {
		return nil, fmt.Errorf("listing the %s objects: %w", o.New.GVK.Kind, err)
	}
	if err := pl.readChildren(ctx, o.Namespace); err != nil {
		return nil, err
	}

	results := make([]Object, len(crs))
	counts := make([]Summary, len(crs))
	work := make(chan int)
	var wg sync.WaitGroup
	for range min(o.Concurrency, max(len(crs), 1)) {
		wg.Go(func() {
			for i := range work {
				results[i], counts[i] = pl.object(ctx, &crs[i])
			}
		})
	}
	for i := range crs {
		select {
		case work <- i:
		case <-ctx.Done():
		}
	}
	close(work)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p.add(results, counts)
	sort.Slice(p.Objects, func(i, j int) bool {
		a, b := p.Objects[i], p.Objects[j]
		return a.Namespace < b.Namespace || a.Namespace == b.Namespace && a.Name < b.Name
	})
	if o.New.Rollout != nil && o.New.Hash() != o.Old.Hash() {
		p.Rollout = rolloutSteps(o.New.Rollout, crs)
	}
	return p, nil
}

// add sums the objects' counts into p's Summary, and lists those with a
// change or an error.
func (p *Plan) add(results []Object, counts []Summary) {
	p.Summary.Objects = len(results)
	for i, r := range results {
		s := counts[i]
		p.Summary.Created += s.Created
		p.Summary.Updated += s.Updated
		p.Summary.Recreated += s.Recreated
		p.Summary.Pruned += s.Pruned
		p.Summary.Unchanged += s.Unchanged
		p.Summary.HandlerRuns += s.HandlerRuns
		p.Summary.StatusChanges += s.StatusChanges
		p.Summary.StateEffects += s.StateEffects
		if len(r.Errors) > 0 {
			p.Summary.Errors++
		}
		if s.Changes() || len(r.Errors) > 0 {
			p.Summary.Changed++
			p.Objects = append(p.Objects, r)
		}
	}
}

// RolloutStep is the objects a step of spec.rollout moves.
type RolloutStep struct {
	// Step is the step as declared: "2 objects", "50%".
	Step    string   `json:"step"`
	Objects []string `json:"objects"`
}

// rolloutSteps are the objects each step of r moves when the change is
// rolled out from its first step, as the engine takes them.
func rolloutSteps(r *definition.Rollout, crs []unstructured.Unstructured) []RolloutStep {
	candidates := make([]definition.Candidate, len(crs))
	for i := range crs {
		key := crs[i].GetName()
		if ns := crs[i].GetNamespace(); ns != "" {
			key = ns + "/" + key
		}
		candidates[i] = definition.Candidate{Key: key, Labels: crs[i].GetLabels()}
	}
	sort.Slice(candidates, func(i, j int) bool { return candidates[i].Key < candidates[j].Key })
	moved := map[string]bool{}
	out := make([]RolloutStep, len(r.Steps))
	for i, s := range r.Steps {
		out[i] = RolloutStep{Step: s.String(), Objects: r.Take(i, candidates, moved)}
		if out[i].Objects == nil {
			out[i].Objects = []string{}
		}
	}
	return out
}

// withGVK is d read as the objects of gvk.
func withGVK(d *definition.Definition, gvk schema.GroupVersionKind) *definition.Definition {
	c := *d
	c.GVK = gvk
	return &c
}

// notFound: the object is not there.
func notFound(err error) bool { return apierrors.IsNotFound(err) }

// pausedBy is Plan.Paused for an operator paused by p.
func pausedBy(operator string, p v1alpha1.Pause) string {
	by := "by someone unknown"
	if p.By != "" {
		by = "by " + p.By
	}
	if p.At != "" {
		by += " at " + p.At
	}
	if p.Reason != "" {
		by += " (" + p.Reason + ")"
	}
	return fmt.Sprintf("operator %s is paused %s: no handler starts until it is resumed (opkit resume --operator %s --all); the runs the change causes start at the resume", operator, by, operator)
}
