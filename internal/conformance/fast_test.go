package conformance_test

import (
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/opkit-dev/opkit/internal/cause"
	"github.com/opkit-dev/opkit/internal/conformance"
	"github.com/opkit-dev/opkit/internal/definition"
)

var flagFast = flag.Duration("conformance.fast", 3*time.Second, "how long TestFast draws histories for")

// TestFast plays generated custom-resource cases through the pure layer
// that decides runs (cause.Decide and cause.State), in a miniature engine
// loop — the object's status.opkit, the archive's "already succeeded",
// a clock that jumps to each retry — and compares with the model, for a
// few seconds, thousands of histories a second. It runs without a plane
// (go test -short too). What it finds is in the deciding layer; the
// engine's own glue is TestConformance's.
func TestFast(t *testing.T) {
	space := conformance.DefaultSpace
	space.Kinds = []conformance.Kind{conformance.CustomResource}
	space.States = false
	space.Sources = false        // the miniature engine has no deliveries: they are TestConformance's
	space.Pauses = false         // nor records of pauses: they are the runner's, not the deciding layer's
	space.Reruns = false         // nor re-runs: they are the runner's too
	space.OperatorPauses = false // nor an operator's pause: the runner's and the engine's
	seed := *flagSeed
	start := time.Now()
	n, skipped := 0, 0
	found := map[string]string{} // a shrunk case's text: the report
	// At least fastCases histories, however slow the machine, and more
	// while -conformance.fast lasts. How many a second is BenchmarkFast's.
	for i := uint64(0); n < fastCases || time.Since(start) < *flagFast; i++ {
		c := conformance.Generate(rand.New(rand.NewPCG(seed+i, 1)), space)
		if conformance.KnownDecided(c) != nil && !*flagKnown {
			skipped++
			avoided, ok := conformance.Avoiding(c, true)
			if !ok {
				continue
			}
			c = avoided
		}
		n++
		vs := conformance.Compare(&c.Def, conformance.Expect(c), playFast(c))
		if len(vs) == 0 {
			continue
		}
		shrunk := conformance.Shrink(c, func(cand conformance.Case) bool {
			return (*flagKnown || conformance.KnownDecided(cand) == nil) && len(conformance.Compare(&cand.Def, conformance.Expect(cand), playFast(cand))) > 0
		}, 2000)
		if _, seen := found[shrunk.String()]; seen || len(found) >= 8 {
			continue
		}
		found[shrunk.String()] = fmt.Sprintf("seed %d (stream 1): %d promises broken by\n%s\n%s\nshrunk to\n%s\n%s\n%s", seed+i, len(vs), c, list(vs), shrunk,
			list(conformance.Compare(&shrunk.Def, conformance.Expect(shrunk), playFast(shrunk))), conformance.Scenario(shrunk))
	}
	for _, text := range found {
		t.Error(text)
	}
	elapsed := time.Since(start)
	t.Logf("%d histories in %v (%.0f a second), %d of known defects (played without what meets the defect where it could be, else left out)", n, elapsed.Round(time.Millisecond), float64(n)/elapsed.Seconds(), skipped)
}

// fastCases is how many histories TestFast plays at the least.
const fastCases = 2000

// BenchmarkFast plays the fast mode's histories: the model against
// cause.Decide in the miniature engine (issue 33 asks thousands a second).
func BenchmarkFast(b *testing.B) {
	space := conformance.DefaultSpace
	space.Kinds = []conformance.Kind{conformance.CustomResource}
	space.States = false
	space.Sources = false        // the miniature engine has no deliveries: they are TestConformance's
	space.Pauses = false         // nor records of pauses: they are the runner's, not the deciding layer's
	space.Reruns = false         // nor re-runs: they are the runner's too
	space.OperatorPauses = false // nor an operator's pause: the runner's and the engine's
	for i := range b.N {
		c := conformance.Generate(rand.New(rand.NewPCG(uint64(i), 1)), space)
		if conformance.KnownDecided(c) != nil {
			continue
		}
		_ = conformance.Compare(&c.Def, conformance.Expect(c), playFast(c))
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "histories/s")
}

// mini is a miniature engine for one custom resource: what the engine
// keeps (status.opkit, the archive's succeeded keys) around cause.Decide.
type mini struct {
	def      *conformance.Def
	handlers []*definition.Handler
	now      time.Time
	started  time.Time
	starts   int
	up       bool
	obj      *unstructured.Unstructured // nil: none
	st       *cause.State
	count    int
	execs    map[string]int
	archive  map[string]bool // keys that succeeded
	lives    int
	obs      *conformance.Observed
	changes  int
	finalize bool // the object holds opkit's finalizer
}

func playFast(c conformance.Case) *conformance.Observed {
	m := &mini{def: &c.Def, now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), up: true, starts: 1,
		execs: map[string]int{}, archive: map[string]bool{}, obs: &conformance.Observed{}}
	m.started = m.now
	for _, h := range c.Def.Handlers {
		dh := &definition.Handler{Name: h.Name, Retry: definition.RetryPolicy{MaxAttempts: h.MaxAttempts, Initial: 100 * time.Millisecond, Max: time.Second, Factor: 2}}
		for _, t := range h.On {
			dh.On = append(dh.On, string(t))
		}
		for _, f := range h.Fields {
			dh.Fields = append(dh.Fields, "spec."+f)
		}
		m.handlers = append(m.handlers, dh)
	}
	for i, s := range c.History {
		held := i+1 < len(c.History) && c.History[i+1].Op == conformance.OpCrash
		m.apply(s)
		if m.up && !held {
			m.settle()
		}
	}
	m.end()
	return m.obs
}

func (m *mini) apply(s conformance.Step) {
	m.now = m.now.Add(time.Second)
	switch s.Op {
	case conformance.OpCreate:
		m.lives++
		m.obj = &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"a": "0", "b": "0"}}}
		m.obj.SetUID(types.UID("uid-" + strconv.Itoa(m.lives)))
		m.obj.SetGeneration(1)
		m.obj.SetCreationTimestamp(metav1.NewTime(m.now))
		m.st, m.count, m.finalize = &cause.State{Handlers: map[string]*cause.HandlerState{}}, 0, false
	case conformance.OpChange:
		m.changes++
		_ = unstructured.SetNestedField(m.obj.Object, strconv.Itoa(m.changes), "spec", s.Field)
		m.obj.SetGeneration(m.obj.GetGeneration() + 1)
	case conformance.OpDelete:
		if !m.finalize {
			m.obj = nil
			return
		}
		ts := metav1.NewTime(m.now)
		m.obj.SetDeletionTimestamp(&ts)
		m.obj.SetGeneration(m.obj.GetGeneration() + 1) // as the API server does for a custom resource
	case conformance.OpRetry:
		// The engine clears the failed attempts of the stalled handlers.
		for _, hs := range m.st.Handlers {
			if hs.Stalled {
				hs.Stalled, hs.Attempt, hs.Target, hs.NextRetryAt = false, 0, 0, ""
			}
		}
	case conformance.OpStop:
		m.up = false
	case conformance.OpStart:
		m.start()
	case conformance.OpCrash:
		// The engine dies in the first run of the step before: it is
		// recorded, Cancelled, and runs again after the start.
		if d := m.decide(); d.Cause != nil {
			m.see(d.Cause, true, "Cancelled")
		} else {
			m.settle()
		}
		m.start()
	}
}

func (m *mini) start() {
	m.up = true
	m.starts++
	m.now = m.now.Add(time.Second)
	m.started = m.now
}

func (m *mini) decide() cause.Decision {
	if m.obj == nil {
		return cause.Decision{}
	}
	spec := map[string]string{}
	for k, v := range cause.Spec(m.obj) {
		spec[k] = fmt.Sprint(v)
	}
	when := map[string]bool{}
	for _, h := range m.def.Handlers {
		if h.Fires(conformance.When) {
			when[h.Name] = conformance.WhenHolds(spec)
		}
	}
	d := cause.Decide(cause.Input{Handlers: m.handlers, Object: m.obj, State: m.st, Now: m.now, Started: m.started, When: when})
	m.st = d.State // as the engine keeps the records Decide updated
	return d
}

// settle runs what is due until nothing is, the clock jumping to each
// retry.
func (m *mini) settle() {
	for range 1000 {
		if m.obj == nil {
			return
		}
		if m.hasDelete() && m.obj.GetDeletionTimestamp() == nil {
			m.finalize = true // added before any other side effect
		}
		d := m.decide()
		if d.Cause == nil {
			if d.Wait > 0 {
				m.now = m.now.Add(d.Wait)
				continue
			}
			if m.obj.GetDeletionTimestamp() != nil {
				if m.deleted() {
					m.obj = nil
				}
				return
			}
			m.st.AdvanceHandled(m.handlers, m.obj.GetGeneration(), cause.Spec(m.obj))
			return
		}
		m.run(d.Cause)
	}
	panic("the miniature engine did not settle in 1000 decisions")
}

func (m *mini) hasDelete() bool {
	for _, h := range m.def.Handlers {
		if h.Fires(conformance.Delete) {
			return true
		}
	}
	return false
}

// deleted reports whether every delete handler succeeded: the finalizer
// goes.
func (m *mini) deleted() bool {
	for _, h := range m.handlers {
		if h.Fires(string(conformance.Delete)) && !m.st.Of(h.Name).Deleted {
			return false
		}
	}
	return true
}

func (m *mini) run(c *cause.Cause) {
	spec := maps.Clone(cause.Spec(m.obj))
	switch c.Trigger {
	case string(conformance.Create), string(conformance.Update), string(conformance.Delete):
		if m.archive[c.Key] {
			// Succeeded before: not run again.
			m.st.Succeeded(m.handlers, c, spec, 0, m.now)
			return
		}
	}
	h := m.def.Handler(c.Handler.Name)
	m.execs[c.Key]++
	if m.execs[c.Key] <= h.Behaviour.Fail {
		gaveUp, _ := m.st.Failed(c, "failure", h.Behaviour.Permanent, m.now)
		outcome := conformance.Failed
		if gaveUp {
			outcome = conformance.GaveUp
		}
		m.see(c, false, outcome)
		return
	}
	m.see(c, false, conformance.Succeeded)
	if h.Behaviour.Write {
		m.count++
	}
	m.st.Succeeded(m.handlers, c, spec, 0, m.now)
	m.archive[c.Key] = true
}

func (m *mini) see(c *cause.Cause, interrupted bool, outcome conformance.Outcome) {
	s := conformance.Seen{
		ID:  conformance.RunID{Life: m.lives, Handler: c.Handler.Name, Trigger: conformance.Trigger(c.Trigger), Gen: c.Generation},
		Key: c.Key, RunID: fmt.Sprint(len(m.obs.Runs)), Attempt: c.Attempt, Outcome: outcome, Interrupted: interrupted,
		Count: m.count, Generation: m.obj.GetGeneration(), Spec: map[string]string{},
	}
	for k, v := range cause.Spec(m.obj) {
		s.Spec[k] = fmt.Sprint(v)
	}
	switch s.ID.Trigger {
	case conformance.Resume:
		s.ID.Start = m.starts
	case conformance.Delete:
		s.ID.Gen = 0
	}
	m.obs.Runs = append(m.obs.Runs, s)
}

func (m *mini) end() {
	for life := 1; life <= m.lives; life++ {
		end := conformance.End{Life: life}
		if life == m.lives && m.obj != nil {
			end.Exists, end.Count, end.Spec = true, m.count, map[string]string{}
			for k, v := range cause.Spec(m.obj) {
				end.Spec[k] = fmt.Sprint(v)
			}
		}
		m.obs.Ends = append(m.obs.Ends, end)
	}
}
