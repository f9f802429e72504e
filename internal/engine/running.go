package engine

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/opkit-dev/opkit/internal/calendar"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/delivery"
	"github.com/opkit-dev/opkit/internal/gauges"
	"github.com/opkit-dev/opkit/internal/rollout"
	"github.com/opkit-dev/opkit/internal/run"
)

// operator is one running operator: its controller, watch or calendar,
// and what it was started with.
type operator struct {
	def    *definition.Definition
	cancel context.CancelFunc
	done   <-chan struct{} // closed once it stopped
	runner *run.Runner     // nil without handlers
	// events handles the deliveries of its sources; nil without sources.
	events *delivery.Queue
	// consumers take the messages of its consumed sources (package delivery);
	// nil without any.
	consumers *delivery.Consumers
	// conditions are its custom resources' conditions, for the gauges
	// (metrics.go); nil for a watch or a calendar.
	conditions *gauges.Table
	// calendar runs an operator's operator-wide schedules and its
	// requests to run now (internal/calendar); nil for any other operator.
	calendar *calendar.Calendar
	// rollout drives its rollout (internal/rollout); nil without
	// spec.rollout.
	// While one is under way, runner is the new definition's, and
	// previous the runner of the definition the objects not moved are
	// on (nil without handlers); both are stopped, waited for, paused
	// and woken alike.
	rollout  *rollout.Rollout
	previous *run.Runner
}

// runners are the operator's runners: one, two during a rollout.
func (o *operator) runners() []*run.Runner {
	var out []*run.Runner
	for _, rn := range []*run.Runner{o.runner, o.previous} {
		if rn != nil {
			out = append(out, rn)
		}
	}
	return out
}

// stopGrace bounds the wait for a controller's workers to return once
// stopped. controller-runtime v0.24's priority queue could deadlock when it
// shut down while a worker waited for an item
// (kubernetes-sigs/controller-runtime#3538): that worker never returned,
// and a stop waited for it for good. The version now in go.mod (v0.25.2)
// has the fix (#3540: the queue's hand-over of an item also watches the
// shutdown); the bound stays as a safety net, so that no stuck controller
// can hang a stop. Past the grace, the stop goes on without it; its
// goroutines are left.
const stopGrace = 30 * time.Second

func (o *operator) stop() {
	o.cancel()
	o.consumers.Stop() // before the queue they add to closes
	if o.events != nil {
		o.events.Close()
	}
	select {
	case <-o.done:
	case <-time.After(stopGrace):
	}
	for _, rn := range o.runners() {
		rn.Wait()
	}
}

// registry holds the operators the engine runs, by Operator name, and
// the names of those between their stop and their start (restarting),
// for which deliveries are answered 503, not 404. It is safe for
// concurrent use.
type registry struct {
	mu         sync.Mutex
	ops        map[string]*operator
	restarting map[string]bool
}

func newRegistry() *registry {
	return &registry{ops: map[string]*operator{}, restarting: map[string]bool{}}
}

// get is the running operator of that name, or nil.
func (r *registry) get(name string) *operator {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ops[name]
}

// definition is the running definition of that name, or nil.
func (r *registry) definition(name string) *definition.Definition {
	if op := r.get(name); op != nil {
		return op.def
	}
	return nil
}

// rolloutNote is the note of operator's rollout; nil when it has none,
// or none that waits for a person.
func (r *registry) rolloutNote(operator string) *rollout.Note {
	if op := r.get(operator); op != nil {
		return op.rollout.Note()
	}
	return nil
}

// all are the running operators, in no order.
func (r *registry) all() []*operator {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Collect(maps.Values(r.ops))
}

// take removes the operator of that name and returns it, or nil;
// restarting marks its name restarting until put or restarted.
func (r *registry) take(name string, restarting bool) *operator {
	r.mu.Lock()
	defer r.mu.Unlock()
	op := r.ops[name]
	delete(r.ops, name)
	if restarting {
		r.restarting[name] = true
	}
	return op
}

// takeAll removes every operator and returns them.
func (r *registry) takeAll() []*operator {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := slices.Collect(maps.Values(r.ops))
	r.ops = map[string]*operator{}
	return out
}

// put records op running under name, its restart ended.
func (r *registry) put(name string, op *operator) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ops[name] = op
	delete(r.restarting, name)
}

// restarted ends the restart of name, whether or not it started.
func (r *registry) restarted(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.restarting, name)
}

// receiving is delivery.Receiver.Running: the operator of that name
// running here, its queue of deliveries, and whether it is restarting.
func (r *registry) receiving(name string) (*definition.Definition, *delivery.Queue, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	op, restarting := r.ops[name], r.restarting[name]
	if op == nil {
		return nil, nil, restarting
	}
	return op.def, op.events, restarting
}
