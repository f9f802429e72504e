package conformance_test

import (
	"cmp"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opkit-dev/opkit/internal/conformance"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
)

var (
	flagSeed     = flag.Uint64("conformance.seed", 33, "the seed of the first case; case i is drawn from seed+i")
	flagCases    = flag.Int("conformance.cases", 10, "how many cases TestConformance plays against the engine (those of known defects left out are not counted), when -conformance.duration is 0")
	flagDuration = flag.Duration("conformance.duration", 0, "play cases with new seeds until this much time has passed (make soak), then report")
	flagParallel = flag.Int("conformance.parallel", 2, "how many cases play at once, each with its engine and namespace")
	flagKnown    = flag.Bool("conformance.known", false, "draw the cases of known defects too (conformance.KnownDefects)")
	flagShrink   = flag.Int("conformance.shrink", 40, "how many smaller cases a failing case's shrinking may play")
	flagReport   = flag.String("conformance.report", "", "write the report of what was tried to this file (make soak)")
	flagKinds    = flag.String("conformance.kinds", "", "draw only these kinds of operator, comma-separated: resource, watch; default both")
	flagSources  = flag.String("conformance.sources", "", "only: play only the cases whose operator has a source; webhook, nats, cloudevents or kafka: only those whose source is of that kind; none: draw no source; default: draw some")
	flagSteps    = flag.String("conformance.steps", "", "play only the cases whose history has one of these steps, comma-separated (pause,resume,crash...); default: every case")
)

// TestConformance plays generated cases against the engine on the plane
// and compares what it did with the model: missing runs, extra runs,
// stale objects, lost status writes, wrong ends. A failing case is
// shrunk, and printed with its seed as an opkit test scenario and as Go.
func TestConformance(t *testing.T) {
	env := clustertest.New(t)
	seed := *flagSeed
	deadline := time.Time{}
	if *flagDuration > 0 {
		deadline = time.Now().Add(*flagDuration)
	}
	rep := &report{rows: map[string]int{}, sets: map[string]int{}}
	switch *flagSources {
	case "", "only", "none", string(conformance.Webhook), string(conformance.NATS), string(conformance.CloudEvents), string(conformance.Kafka):
	default:
		t.Fatalf("-conformance.sources=%s: expected only, webhook, nats, cloudevents, kafka or none", *flagSources)
	}
	sem := make(chan struct{}, max(1, *flagParallel))
	var wg sync.WaitGroup
	played := 0
	for i := uint64(0); ; i++ {
		if deadline.IsZero() && played >= *flagCases {
			break
		}
		if !deadline.IsZero() && time.Now().After(deadline) {
			break
		}
		caseSeed := seed + i
		space := spaceOf(caseSeed)
		c := conformance.Generate(rand.New(rand.NewPCG(caseSeed, 0)), space)
		if !drawn(c, *flagSources) || !hasStep(c, *flagSteps) {
			continue
		}
		if d := conformance.Known(c); d != nil && !*flagKnown {
			rep.skip(d)
			// Played without what meets the defect, when that can be.
			if avoided, ok := conformance.Avoiding(c, false); ok {
				c = avoided
			} else {
				continue
			}
		}
		played++
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			t.Run(fmt.Sprintf("seed=%d", caseSeed), func(t *testing.T) {
				violations, transcript := Check(t, env, c)
				rep.add(caseSeed, space, c, violations)
				if len(violations) == 0 {
					return
				}
				t.Errorf("seed %d: %d promises broken by\n%s\n%s\n%s", caseSeed, len(violations), c, list(violations), transcript)
				shrunk := shrink(t, env, c, violations)
				t.Errorf("seed %d, shrunk to\n%s\n\n%s", caseSeed, shrunk, conformance.Scenario(shrunk))
			})
		}()
	}
	wg.Wait()
	text := rep.String()
	t.Log(text)
	if *flagReport != "" {
		if err := os.MkdirAll(filepath.Dir(*flagReport), 0o755); err != nil {
			t.Error(err)
		}
		if err := os.WriteFile(*flagReport, []byte(text), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// spaceOf is the space the case of seed s is drawn from
// (conformance.SpaceOf), with -conformance.kinds and -conformance.sources
// applied.
func spaceOf(s uint64) conformance.Space {
	space := conformance.SpaceOf(s)
	if *flagKinds != "" {
		space.Kinds = nil
		for k := range strings.SplitSeq(*flagKinds, ",") {
			space.Kinds = append(space.Kinds, conformance.Kind(strings.TrimSpace(k)))
		}
	}
	if *flagSources == "none" {
		space.Sources = false
	}
	return space
}

// drawn reports whether c is among the cases -conformance.sources asks
// for.
func drawn(c conformance.Case, sources string) bool {
	switch sources {
	case "only":
		return c.Def.Source != nil
	case "", "none":
		return true
	}
	return c.Def.Source != nil && cmp.Or(c.Def.Source.Kind, conformance.Webhook) == conformance.SourceKind(sources)
}

// hasStep reports whether c's history has one of the steps named in ops
// (comma-separated), or ops is "".
func hasStep(c conformance.Case, ops string) bool {
	if ops == "" {
		return true
	}
	for op := range strings.SplitSeq(ops, ",") {
		if slices.ContainsFunc(c.History, func(s conformance.Step) bool { return s.Op == conformance.Op(strings.TrimSpace(op)) }) {
			return true
		}
	}
	return false
}

// TestRegressions plays the shrunk case of each defect the model found.
// A case whose defect is still in conformance.KnownDefects must still
// fail (when it passes, the fix is in: remove the entry); any other must
// pass, but for the promise a known defect it meets breaks (its Row):
// it keeps its own defect fixed.
func TestRegressions(t *testing.T) {
	env := clustertest.New(t)
	for _, r := range conformance.Regressions {
		t.Run(r.Name, func(t *testing.T) {
			t.Parallel()
			violations, transcript := Check(t, env, r.Case)
			listed := r.Issue != "" && conformance.Listed(r.Issue)
			if !listed {
				violations = unknown(t, r.Case, violations)
			}
			switch {
			case listed && len(violations) == 0:
				t.Errorf("the case of known defect %s passes: its fix is in, remove it from conformance.KnownDefects\n%s", r.Issue, r.Case)
			case !listed && len(violations) > 0:
				t.Errorf("%d promises broken by\n%s\n%s\n%s", len(violations), r.Case, list(violations), transcript)
			case listed:
				t.Logf("known defect %s, still there:\n%s", r.Issue, list(violations))
			}
		})
	}
}

// unknown are the violations vs of c but those of the rows that the known
// defects c meets break (Defect.Row), which it logs.
func unknown(t *testing.T, c conformance.Case, vs []conformance.Violation) []conformance.Violation {
	rows := map[string][]string{} // the issues of each row
	for _, d := range conformance.KnownDefects {
		if d.Row != "" && d.Match(c) {
			rows[d.Row] = append(rows[d.Row], d.Issue)
		}
	}
	var out []conformance.Violation
	for _, v := range vs {
		if issues, ok := rows[v.Row]; ok {
			t.Logf("known defects %s: %s", strings.Join(issues, ", "), v)
			continue
		}
		out = append(out, v)
	}
	return out
}

// shrink replays smaller cases until none smaller fails with a violation
// of a row c's violations broke.
func shrink(t *testing.T, env *clustertest.Env, c conformance.Case, violations []conformance.Violation) conformance.Case {
	rows := map[string]bool{}
	for _, v := range violations {
		rows[v.Row] = true
	}
	tries := 0
	return conformance.Shrink(c, func(cand conformance.Case) bool {
		if !*flagKnown && conformance.Known(cand) != nil {
			return false // another defect, known: not this one
		}
		tries++
		var vs []conformance.Violation
		t.Run(fmt.Sprintf("shrink-%d", tries), func(t *testing.T) {
			vs, _ = Check(t, env, cand)
		})
		return slices.ContainsFunc(vs, func(v conformance.Violation) bool { return rows[v.Row] })
	}, *flagShrink)
}

func list(vs []conformance.Violation) string {
	var b strings.Builder
	for _, v := range vs {
		fmt.Fprintf(&b, "  - %s\n", v)
	}
	return b.String()
}

// report counts what a run of TestConformance tried and found.
type report struct {
	mu       sync.Mutex
	cases    int
	failed   []string
	kinds    map[conformance.Kind]int
	sets     map[string]int
	rows     map[string]int
	skipped  map[string]int
	steps    int
	failures map[string]int
}

func (r *report) skip(d *conformance.Defect) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.skipped == nil {
		r.skipped = map[string]int{}
	}
	r.skipped[d.Issue]++
}

func (r *report) add(seed uint64, space conformance.Space, c conformance.Case, vs []conformance.Violation) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.kinds == nil {
		r.kinds, r.failures = map[conformance.Kind]int{}, map[string]int{}
	}
	r.cases++
	r.steps += len(c.History)
	r.kinds["drawn from: "+conformance.Kind(space.Name)]++
	r.kinds[c.Def.Kind]++
	if c.Def.Source != nil {
		r.kinds[c.Def.Kind+" with a source"]++
		r.kinds[c.Def.Kind+" with a "+conformance.Kind(cmp.Or(c.Def.Source.Kind, conformance.Webhook))+" source"]++
	}
	serve := 0
	for _, h := range c.Def.Handlers {
		on := make([]string, len(h.On))
		for i, t := range h.On {
			on[i] = string(t)
		}
		r.sets[string(c.Def.Kind)+" ["+strings.Join(on, ",")+"]"]++
		if h.Serve {
			serve++
		}
	}
	// The cases whose handlers all run a process per run, all in mode
	// Serve, or some of each.
	switch serve {
	case 0:
		r.kinds["handlers: a process per run"]++
	case len(c.Def.Handlers):
		r.kinds["handlers: exec mode Serve"]++
	default:
		r.kinds["handlers: some of each"]++
	}
	for _, row := range conformance.Rows(c) {
		r.rows[row]++
	}
	for _, v := range vs {
		r.failures[v.Row]++
	}
	if len(vs) > 0 {
		r.failed = append(r.failed, fmt.Sprintf("seed %d: %s\n%s", seed, c, list(vs)))
	}
}

func (r *report) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "conformance: %d cases (%d history steps), %d failed\n", r.cases, r.steps, len(r.failed))
	fmt.Fprintf(&b, "by kind:\n")
	for _, k := range slices.Sorted(maps.Keys(r.kinds)) {
		fmt.Fprintf(&b, "  %-10s %d\n", k, r.kinds[k])
	}
	fmt.Fprintf(&b, "handlers by kind and trigger set:\n")
	for _, k := range slices.Sorted(maps.Keys(r.sets)) {
		fmt.Fprintf(&b, "  %-40s %d\n", k, r.sets[k])
	}
	fmt.Fprintf(&b, "guarantees exercised (cases), docs/handlers.md's table and guarantees:\n")
	for _, k := range slices.Sorted(maps.Keys(r.rows)) {
		fmt.Fprintf(&b, "  %-40s %d\n", k, r.rows[k])
	}
	if len(r.failures) > 0 {
		fmt.Fprintf(&b, "promises broken, by row:\n")
		for _, k := range slices.Sorted(maps.Keys(r.failures)) {
			fmt.Fprintf(&b, "  %-40s %d\n", k, r.failures[k])
		}
	}
	if len(r.failed) > 0 {
		fmt.Fprintf(&b, "failures (-conformance.seed=SEED -conformance.cases=1 plays one again):\n")
		for _, f := range r.failed {
			fmt.Fprintf(&b, "%s\n", f)
		}
	}
	if len(r.skipped) > 0 {
		fmt.Fprintf(&b, "cases of known defects (played without what meets the defect where it could be, else left out):\n")
		for _, k := range slices.Sorted(maps.Keys(r.skipped)) {
			fmt.Fprintf(&b, "  %-40s %d\n", k, r.skipped[k])
		}
	}
	return b.String()
}
