package conformance_test

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/opkit-dev/opkit/internal/conformance"
)

// handler is a handler with two attempts.
func handler(name string, b conformance.Behaviour, on ...conformance.Trigger) conformance.Handler {
	return conformance.Handler{Name: name, On: on, Behaviour: b, MaxAttempts: 2}
}

func steps(ops ...string) []conformance.Step {
	var out []conformance.Step
	for _, op := range ops {
		verb, arg, _ := strings.Cut(op, " ")
		s := conformance.Step{Op: conformance.Op(verb)}
		switch s.Op {
		case conformance.OpChange:
			s.Field = arg
		case conformance.OpStop:
			s.Kill = arg == "kill"
		case conformance.OpRerun:
			s.Handler, _, _ = strings.Cut(arg, " ")
			s.SameInput = strings.HasSuffix(arg, " --same-input")
		}
		out = append(out, s)
	}
	return out
}

// runs writes the expectation's runs one a line: "h1 create gen 1: [Succeeded]".
func runs(e *conformance.Expectation) string {
	var b strings.Builder
	for _, r := range e.Runs {
		fmt.Fprintf(&b, "%s %s gen %d", r.Handler, r.Trigger, r.Gen)
		if r.Trigger == conformance.Resume {
			fmt.Fprintf(&b, " start %d", r.Start)
		}
		if r.Trigger == conformance.Rerun {
			fmt.Fprintf(&b, " rerun %d sees gen %d", r.Rerun, r.SpecGen)
		}
		if r.Redelivery > 0 {
			fmt.Fprintf(&b, " redelivery %d", r.Redelivery)
		}
		if r.Life > 1 {
			fmt.Fprintf(&b, " #%d", r.Life)
		}
		fmt.Fprintf(&b, ": %v\n", r.Outcomes)
	}
	return b.String()
}

var (
	ok    = conformance.Behaviour{}
	write = conformance.Behaviour{Write: true}
)

func TestModelSaysWhatTheDocsPromise(t *testing.T) {
	cr, watch := conformance.CustomResource, conformance.Watch
	for _, tc := range []struct {
		name     string
		kind     conformance.Kind
		handlers []conformance.Handler
		history  []conformance.Step
		want     string
		count    int
		exists   bool
		// pauses and resumes: how many times each is recorded.
		pauses, resumes int
		// cluster: the operator is an Operator in the cluster, which the
		// history may pause whole.
		cluster bool
	}{
		{
			name:     "create once, then an update per generation, each writing count+1",
			kind:     cr,
			handlers: []conformance.Handler{handler("h1", write, "create", "update")},
			history:  steps("create", "change a", "change b"),
			want:     "h1 create gen 1: [Succeeded]\nh1 update gen 2: [Succeeded]\nh1 update gen 3: [Succeeded]\n",
			count:    3, exists: true,
		},
		{
			name:     "an update not about the handler's fields runs nothing, and a later one is about the change since",
			kind:     cr,
			handlers: []conformance.Handler{{Name: "h1", On: []conformance.Trigger{"update"}, Fields: []string{"b"}, MaxAttempts: 2}},
			history:  steps("create", "change a", "change b", "change a"),
			want:     "h1 update gen 3: [Succeeded]\n",
			exists:   true,
		},
		{
			name:     "failures are retried with one key; a give-up waits for opkit retry",
			kind:     cr,
			handlers: []conformance.Handler{handler("h1", conformance.Behaviour{Fail: 3}, "create")},
			history:  steps("create", "retry"),
			want:     "h1 create gen 1: [Failed GaveUp Failed Succeeded]\n",
			exists:   true,
		},
		{
			name: "a handler that gave up holds back the ones after it; each new generation is tried afresh",
			kind: cr,
			handlers: []conformance.Handler{
				handler("h1", conformance.Behaviour{Fail: 1, Permanent: true}, "create", "update"),
				handler("h2", write, "create", "update"),
			},
			history: steps("create", "change a", "retry"),
			want:    "h1 create gen 1: [GaveUp]\nh1 create gen 2: [GaveUp Succeeded]\nh2 create gen 2: [Succeeded]\n",
			count:   1, exists: true,
		},
		{
			name:     "delete once before the object goes; resume once per start of an object handled before",
			kind:     cr,
			handlers: []conformance.Handler{handler("h1", write, "create", "delete", "resume")},
			history:  steps("create", "stop kill", "start", "stop", "start", "delete"),
			want:     "h1 create gen 1: [Succeeded]\nh1 resume gen 1 start 2: [Succeeded]\nh1 resume gen 1 start 3: [Succeeded]\nh1 delete gen 0: [Succeeded]\n",
			count:    4,
		},
		{
			name:     "an object created while no engine ran is created at the start, not resumed",
			kind:     cr,
			handlers: []conformance.Handler{handler("h1", ok, "create", "resume")},
			history:  steps("stop", "create", "start"),
			want:     "h1 create gen 1: [Succeeded]\n",
			exists:   true,
		},
		{
			name:     "an object created and deleted while no engine ran gets nothing",
			kind:     cr,
			handlers: []conformance.Handler{handler("h1", ok, "create", "delete")},
			history:  steps("stop", "create", "delete", "start"),
			want:     "",
		},
		{
			name:     "a crash in an update: the run again after the start, and the start's resume after it",
			kind:     cr,
			handlers: []conformance.Handler{handler("h1", write, "update", "resume")},
			history:  steps("create", "change a", "crash"),
			want:     "h1 update gen 2: [Succeeded]\nh1 resume gen 2 start 2: [Succeeded]\n",
			count:    2, exists: true,
		},
		{
			name:     "when runs once per turn of its condition to true, also for one made while no engine ran",
			kind:     cr,
			handlers: []conformance.Handler{handler("h1", write, "when")},
			// a takes the values 1 (odd: true), 2 (false), then, while no
			// engine runs, 3 (true) and 4, 5: the last turn was not seen.
			history: steps("create", "change a", "change a", "stop", "change a", "start", "stop", "change a", "change a", "start"),
			want:    "h1 when gen 2: [Succeeded]\nh1 when gen 4: [Succeeded]\n",
			count:   2, exists: true,
		},
		{
			name:     "a watched object: a status result gives up at once; delete runs after it is gone",
			kind:     watch,
			handlers: []conformance.Handler{handler("h1", write, "create"), handler("h2", ok, "create", "delete")},
			history:  steps("create", "delete"),
			want:     "h1 create gen 1: [GaveUp]\nh2 delete gen 0: [Succeeded]\n",
		},
		{
			name:     "a watched object's generation counts the changes an engine saw: those made while none ran are one",
			kind:     watch,
			handlers: []conformance.Handler{handler("h1", ok, "create", "update")},
			history:  steps("stop", "create", "change a", "start", "stop", "change a", "change b", "start"),
			want:     "h1 create gen 1: [Succeeded]\nh1 update gen 2: [Succeeded]\n",
			exists:   true,
		},
		{
			name:     "a watched object deleted while no engine ran gets its delete run after the start",
			kind:     watch,
			handlers: []conformance.Handler{handler("h1", ok, "create", "delete")},
			history:  steps("create", "stop kill", "delete", "start", "create"),
			want:     "h1 create gen 1: [Succeeded]\nh1 delete gen 0: [Succeeded]\nh1 create gen 1 #2: [Succeeded]\n",
			exists:   true,
		},
		{
			name:     "nothing runs for a paused object, across a restart; the resume runs what came due, once, and each is recorded once",
			kind:     cr,
			handlers: []conformance.Handler{handler("h1", write, "create", "update")},
			history:  steps("create", "pause", "change a", "change b", "stop kill", "start", "resume"),
			want:     "h1 create gen 1: [Succeeded]\nh1 update gen 3: [Succeeded]\n",
			count:    2, exists: true, pauses: 1, resumes: 1,
		},
		{
			name:     "a paused custom resource being deleted keeps opkit's finalizer until it is resumed",
			kind:     cr,
			handlers: []conformance.Handler{handler("h1", ok, "create", "delete")},
			history:  steps("create", "pause", "delete"),
			want:     "h1 create gen 1: [Succeeded]\n",
			exists:   true, pauses: 1,
		},
		{
			name:     "... and its delete run comes with the resume",
			kind:     cr,
			handlers: []conformance.Handler{handler("h1", ok, "create", "delete")},
			history:  steps("create", "pause", "delete", "resume"),
			want:     "h1 create gen 1: [Succeeded]\nh1 delete gen 0: [Succeeded]\n",
			pauses:   1, resumes: 1,
		},
		{
			name:     "a pause and its resume while no engine ran are never seen",
			kind:     cr,
			handlers: []conformance.Handler{handler("h1", ok, "create", "update")},
			history:  steps("create", "stop", "pause", "change a", "resume", "start"),
			want:     "h1 create gen 1: [Succeeded]\nh1 update gen 2: [Succeeded]\n",
			exists:   true,
		},
		{
			name:     "a watched object paused, resumed and deleted while no engine ran gets its delete run",
			kind:     watch,
			handlers: []conformance.Handler{handler("h1", ok, "create", "delete")},
			history:  steps("create", "pause", "stop", "resume", "delete", "start"),
			want:     "h1 create gen 1: [Succeeded]\nh1 delete gen 0: [Succeeded]\n",
			pauses:   1, resumes: 1,
		},
		{
			name:     "a watched object deleted while paused takes its pause with it: its delete run, its resume recorded",
			kind:     watch,
			handlers: []conformance.Handler{handler("h1", ok, "create", "delete")},
			history:  steps("create", "pause", "delete"),
			want:     "h1 create gen 1: [Succeeded]\nh1 delete gen 0: [Succeeded]\n",
			pauses:   1, resumes: 1,
		},
		{
			name:     "a re-run runs once, with a key of its own, sees the object as it is or as its run saw it (status.count back in time), and writes as any run",
			kind:     cr,
			handlers: []conformance.Handler{handler("h1", write, "create", "update")},
			history:  steps("create", "change a", "rerun h1", "rerun h1 --same-input", "rerun h1"),
			want:     "h1 create gen 1: [Succeeded]\nh1 update gen 2: [Succeeded]\nh1 rerun gen 2 rerun 1 sees gen 2: [Succeeded]\nh1 rerun gen 2 rerun 2 sees gen 2: [Succeeded]\nh1 rerun gen 2 rerun 3 sees gen 2: [Succeeded]\n",
			count:    3, exists: true,
		},
		{
			name:     "a re-run is not retried, and changes none of the handler's records: its update still runs after the change",
			kind:     cr,
			handlers: []conformance.Handler{handler("h1", conformance.Behaviour{Fail: 1}, "create", "update")},
			history:  steps("create", "rerun h1", "change a"),
			want:     "h1 create gen 1: [Failed Succeeded]\nh1 rerun gen 1 rerun 1 sees gen 1: [GaveUp]\nh1 update gen 2: [Failed Succeeded]\n",
			exists:   true,
		},
		{
			name:     "a re-run asked while paused waits for the resume, comes before what came due, and sees the object as it is then",
			kind:     watch,
			handlers: []conformance.Handler{handler("h1", ok, "create", "update")},
			history:  steps("create", "pause", "rerun h1", "change a", "resume"),
			want:     "h1 create gen 1: [Succeeded]\nh1 rerun gen 1 rerun 1 sees gen 2: [Succeeded]\nh1 update gen 2: [Succeeded]\n",
			exists:   true, pauses: 1, resumes: 1,
		},
		{
			name:     "a re-run asked with --same-input while no engine ran sees what its run saw",
			kind:     cr,
			handlers: []conformance.Handler{handler("h1", ok, "create", "update")},
			history:  steps("create", "stop", "rerun h1 --same-input", "change b", "start"),
			want:     "h1 create gen 1: [Succeeded]\nh1 rerun gen 1 rerun 1 sees gen 1: [Succeeded]\nh1 update gen 2: [Succeeded]\n",
			exists:   true,
		},
		{
			name:     "nothing runs while the whole operator is paused, objects created meanwhile included; what came due runs once at its resume, with the latest spec",
			kind:     cr,
			handlers: []conformance.Handler{handler("h1", write, "create", "update")},
			history:  steps("pause-operator", "create", "change a", "change b", "resume-operator"),
			want:     "h1 create gen 3: [Succeeded]\n",
			count:    1, exists: true, pauses: 1, resumes: 1, cluster: true,
		},
		{
			name:     "an object paused on its own, then with its operator: its own pause is the one recorded; its end under the operator's records the operator's",
			kind:     cr,
			handlers: []conformance.Handler{handler("h1", ok, "create", "update")},
			history:  steps("create", "pause", "pause-operator", "change a", "resume", "resume-operator"),
			want:     "h1 create gen 1: [Succeeded]\nh1 update gen 2: [Succeeded]\n",
			exists:   true, pauses: 2, resumes: 2, cluster: true,
		},
		{
			name:     "the operator paused, then the object on its own: its own pause recorded too, and the operator's resume under it records nothing",
			kind:     cr,
			handlers: []conformance.Handler{handler("h1", ok, "create")},
			history:  steps("create", "pause-operator", "pause", "resume-operator", "resume"),
			want:     "h1 create gen 1: [Succeeded]\n",
			exists:   true, pauses: 2, resumes: 1, cluster: true,
		},
		{
			name:     "a watched object deleted while its operator is paused: its delete run waits for the resume",
			kind:     watch,
			handlers: []conformance.Handler{handler("h1", ok, "create", "delete")},
			history:  steps("create", "pause-operator", "delete", "stop", "start", "resume-operator"),
			want:     "h1 create gen 1: [Succeeded]\nh1 delete gen 0: [Succeeded]\n",
			pauses:   1, resumes: 1, cluster: true,
		},
		{
			name:     "the operator paused and resumed while no engine ran is never seen",
			kind:     watch,
			handlers: []conformance.Handler{handler("h1", ok, "create", "update")},
			history:  steps("create", "stop", "pause-operator", "change a", "resume-operator", "start"),
			want:     "h1 create gen 1: [Succeeded]\nh1 update gen 2: [Succeeded]\n",
			exists:   true, cluster: true,
		},
		{
			name:     "a re-run asked of an object deleted before an engine took it is never taken",
			kind:     cr,
			handlers: []conformance.Handler{handler("h1", ok, "create", "delete")},
			history:  steps("create", "stop", "rerun h1", "delete", "start"),
			want:     "h1 create gen 1: [Succeeded]\nh1 delete gen 0: [Succeeded]\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := conformance.Case{Def: conformance.Def{Kind: tc.kind, Handlers: tc.handlers, Cluster: tc.cluster}, History: tc.history}
			if !conformance.Valid(c) {
				t.Fatalf("the case is not valid:\n%s", c)
			}
			e := conformance.Expect(c)
			if got := runs(e); got != tc.want {
				t.Errorf("runs:\n%s\nwant:\n%s", got, tc.want)
			}
			end := e.Ends[len(e.Ends)-1]
			if end.Count != tc.count || end.Exists != tc.exists || end.Pauses != tc.pauses || end.Resumes != tc.resumes {
				t.Errorf("end %+v, want count %d, exists %v, %d pauses and %d resumes recorded", end, tc.count, tc.exists, tc.pauses, tc.resumes)
			}
		})
	}
}

func TestGeneratedCasesAreValidAndReproducible(t *testing.T) {
	for seed := range uint64(500) {
		c := conformance.Generate(rand.New(rand.NewPCG(seed, 0)), conformance.DefaultSpace)
		if !conformance.Valid(c) {
			t.Fatalf("seed %d drew a case that cannot be played:\n%s", seed, c)
		}
		if again := conformance.Generate(rand.New(rand.NewPCG(seed, 0)), conformance.DefaultSpace); again.String() != c.String() {
			t.Fatalf("seed %d drew two cases:\n%s\n%s", seed, c, again)
		}
	}
}

func TestShrinkKeepsTheSmallestFailingCase(t *testing.T) {
	c := conformance.Case{
		Def: conformance.Def{Kind: conformance.CustomResource, Handlers: []conformance.Handler{
			handler("h1", write, "create", "update", "resume"),
			handler("h2", conformance.Behaviour{Fail: 1}, "create", "delete"),
		}},
		History: steps("create", "change a", "touch", "stop", "start", "delete"),
	}
	// "Fails" while some handler has delete and the history deletes.
	fails := func(c conformance.Case) bool {
		hasDelete := false
		for _, h := range c.Def.Handlers {
			hasDelete = hasDelete || h.Fires(conformance.Delete)
		}
		for _, s := range c.History {
			if s.Op == conformance.OpDelete {
				return hasDelete
			}
		}
		return false
	}
	got := conformance.Shrink(c, fails, 1000)
	want := conformance.Case{
		Def:     conformance.Def{Kind: conformance.CustomResource, Handlers: []conformance.Handler{{Name: "h2", On: []conformance.Trigger{"delete"}, MaxAttempts: 2}}},
		History: steps("create", "delete"),
	}
	if got.String() != want.String() {
		t.Errorf("shrunk to\n%s\nwant\n%s", got, want)
	}
}

// deliveries writes the expectation's deliveries one a line: "d1 Handled, 1 replays".
func deliveries(e *conformance.Expectation) string {
	var b strings.Builder
	for _, d := range e.Deliveries {
		if d.Redelivery > 0 {
			fmt.Fprintf(&b, "%s redelivery %d %s\n", conformance.DeliveryID(d.N), d.Redelivery, d.Outcome)
			continue
		}
		fmt.Fprintf(&b, "%s %s, %d replays\n", conformance.DeliveryID(d.N), d.Outcome, d.Replays)
	}
	return b.String()
}

func TestModelSaysWhatTheDocsPromiseOfDeliveries(t *testing.T) {
	deliver := func(op conformance.Op, n int) conformance.Step { return conformance.Step{Op: op, Delivery: n} }
	redeliver := func(n int) conformance.Step { return conformance.Step{Op: conformance.OpRedeliver, Delivery: n} }
	crash := conformance.Step{Op: conformance.OpCrash}
	for _, tc := range []struct {
		name       string
		object     bool
		handlers   []conformance.Handler
		history    []conformance.Step
		want       string
		deliveries string
		answers    []int
		spec       map[string]string
	}{
		{
			name: "each delivery runs each handler on event once, in declared order, and a replay runs nothing",
			handlers: []conformance.Handler{
				handler("e1", ok, "event"), handler("e2", conformance.Behaviour{Fail: 1}, "event"),
			},
			history:    append(steps("create"), deliver(conformance.OpDeliver, 1), deliver(conformance.OpDeliverAgain, 1), deliver(conformance.OpDeliver, 2)),
			want:       "e1 event gen 0: [Succeeded]\ne2 event gen 0: [Failed Succeeded]\ne1 event gen 0: [Succeeded]\ne2 event gen 0: [Failed Succeeded]\n",
			deliveries: "d1 Handled, 1 replays\nd2 Handled, 0 replays\n",
			answers:    []int{202, 409, 202},
			spec:       map[string]string{"a": "0", "b": "0"},
		},
		{
			name: "a handler that gives up fails the delivery, and the handlers after it do not run",
			handlers: []conformance.Handler{
				handler("e1", conformance.Behaviour{Fail: 2}, "event"), handler("e2", ok, "event"),
			},
			history:    append(steps("create"), deliver(conformance.OpDeliver, 1)),
			want:       "e1 event gen 0: [Failed GaveUp]\n",
			deliveries: "d1 Failed, 0 replays\n",
			answers:    []int{202},
			spec:       map[string]string{"a": "0", "b": "0"},
		},
		{
			name:       "a delivery whose handler a SIGKILL interrupts is handled after the start, its run again with its key",
			handlers:   []conformance.Handler{handler("e1", ok, "event")},
			history:    append(steps("create"), deliver(conformance.OpDeliver, 1), crash),
			want:       "e1 event gen 0: [Succeeded]\n",
			deliveries: "d1 Handled, 0 replays\n",
			answers:    []int{202},
			spec:       map[string]string{"a": "0", "b": "0"},
		},
		{
			name:       "a handler that succeeded before the SIGKILL in the next one's run does not run again",
			handlers:   []conformance.Handler{handler("e1", conformance.Behaviour{Fail: 1}, "event"), handler("e2", ok, "event")},
			history:    append(steps("create"), deliver(conformance.OpDeliver, 1), conformance.Step{Op: conformance.OpCrash, Handler: "e2"}),
			want:       "e1 event gen 0: [Failed Succeeded]\ne2 event gen 0: [Succeeded]\n",
			deliveries: "d1 Handled, 0 replays\n",
			answers:    []int{202},
			spec:       map[string]string{"a": "0", "b": "0"},
		},
		{
			name:       "a handler that gave up before the one the SIGKILL was to come in leaves nothing to interrupt",
			handlers:   []conformance.Handler{handler("e1", conformance.Behaviour{Fail: 1, Permanent: true}, "event"), handler("e2", ok, "event")},
			history:    append(steps("create"), deliver(conformance.OpDeliver, 1), conformance.Step{Op: conformance.OpCrash, Handler: "e2"}),
			want:       "e1 event gen 0: [GaveUp]\n",
			deliveries: "d1 Failed, 0 replays\n",
			answers:    []int{202},
			spec:       map[string]string{"a": "0", "b": "0"},
		},
		{
			name:       "the source's object is created by the first delivery and changed by the next; a replay changes nothing",
			object:     true,
			handlers:   []conformance.Handler{handler("h1", write, "create", "update")},
			history:    []conformance.Step{deliver(conformance.OpDeliver, 1), deliver(conformance.OpDeliver, 2), deliver(conformance.OpDeliverAgain, 1)},
			want:       "h1 create gen 1: [Succeeded]\nh1 update gen 2: [Succeeded]\n",
			deliveries: "d1 Handled, 1 replays\nd2 Handled, 0 replays\n",
			answers:    []int{202, 202, 409},
			spec:       map[string]string{"a": "2"},
		},
		{
			name: "a redelivery runs each handler on event once more, under keys of its own, retried by its policy",
			handlers: []conformance.Handler{
				handler("e1", ok, "event"), handler("e2", conformance.Behaviour{Fail: 1}, "event"),
			},
			history:    append(steps("create"), deliver(conformance.OpDeliver, 1), redeliver(1)),
			want:       "e1 event gen 0: [Succeeded]\ne2 event gen 0: [Failed Succeeded]\ne1 event gen 0 redelivery 1: [Succeeded]\ne2 event gen 0 redelivery 1: [Failed Succeeded]\n",
			deliveries: "d1 Handled, 0 replays\nd1 redelivery 1 Handled\n",
			answers:    []int{202},
			spec:       map[string]string{"a": "0", "b": "0"},
		},
		{
			name:       "a failed delivery redelivered twice runs its handler as many times more, each failing as the original did",
			handlers:   []conformance.Handler{handler("e1", conformance.Behaviour{Fail: 2}, "event")},
			history:    append(steps("create"), deliver(conformance.OpDeliver, 1), redeliver(1), redeliver(1)),
			want:       "e1 event gen 0: [Failed GaveUp]\ne1 event gen 0 redelivery 1: [Failed GaveUp]\ne1 event gen 0 redelivery 2: [Failed GaveUp]\n",
			deliveries: "d1 Failed, 0 replays\nd1 redelivery 1 Failed\nd1 redelivery 2 Failed\n",
			answers:    []int{202},
			spec:       map[string]string{"a": "0", "b": "0"},
		},
		{
			name:       "a redelivery asked while no engine runs is handled after the start",
			handlers:   []conformance.Handler{handler("e1", ok, "event")},
			history:    append(append(steps("create"), deliver(conformance.OpDeliver, 1)), append(steps("stop kill"), redeliver(1), conformance.Step{Op: conformance.OpStart})...),
			want:       "e1 event gen 0: [Succeeded]\ne1 event gen 0 redelivery 1: [Succeeded]\n",
			deliveries: "d1 Handled, 0 replays\nd1 redelivery 1 Handled\n",
			answers:    []int{202},
			spec:       map[string]string{"a": "0", "b": "0"},
		},
		{
			name:       "a redelivery whose handler a SIGKILL interrupts is handled after the start, its run again with its key",
			handlers:   []conformance.Handler{handler("e1", ok, "event"), handler("e2", ok, "event")},
			history:    append(steps("create"), deliver(conformance.OpDeliver, 1), redeliver(1), conformance.Step{Op: conformance.OpCrash, Handler: "e2"}),
			want:       "e1 event gen 0: [Succeeded]\ne2 event gen 0: [Succeeded]\ne1 event gen 0 redelivery 1: [Succeeded]\ne2 event gen 0 redelivery 1: [Succeeded]\n",
			deliveries: "d1 Handled, 0 replays\nd1 redelivery 1 Handled\n",
			answers:    []int{202},
			spec:       map[string]string{"a": "0", "b": "0"},
		},
		{
			name:       "a redelivery applies the source's object again, with the payload the sender posted",
			object:     true,
			handlers:   []conformance.Handler{handler("h1", write, "create", "update")},
			history:    []conformance.Step{deliver(conformance.OpDeliver, 1), deliver(conformance.OpDeliver, 2), redeliver(1), redeliver(1)},
			want:       "h1 create gen 1: [Succeeded]\nh1 update gen 2: [Succeeded]\nh1 update gen 3: [Succeeded]\n",
			deliveries: "d1 Handled, 0 replays\nd2 Handled, 0 replays\nd1 redelivery 1 Handled\nd1 redelivery 2 Handled\n",
			answers:    []int{202, 202},
			spec:       map[string]string{"a": "1"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := conformance.Case{Def: conformance.Def{Kind: conformance.CustomResource, Handlers: tc.handlers, Source: &conformance.Source{Object: tc.object}}, History: tc.history}
			if !conformance.Valid(c) {
				t.Fatalf("the case is not valid:\n%s", c)
			}
			e := conformance.Expect(c)
			if got := runs(e); got != tc.want {
				t.Errorf("runs:\n%s\nwant:\n%s", got, tc.want)
			}
			if got := deliveries(e); got != tc.deliveries {
				t.Errorf("deliveries:\n%s\nwant:\n%s", got, tc.deliveries)
			}
			if !slices.Equal(e.Answers, tc.answers) {
				t.Errorf("answers %v, want %v", e.Answers, tc.answers)
			}
			if end := e.Ends[len(e.Ends)-1]; !maps.Equal(end.Spec, tc.spec) {
				t.Errorf("spec %v, want %v", end.Spec, tc.spec)
			}
		})
	}
}

func TestAnObjectIsNotAppliedByADeliveryWhileItIsBeingDeleted(t *testing.T) {
	c := conformance.Case{
		Def: conformance.Def{Kind: conformance.CustomResource, Source: &conformance.Source{Object: true}, Handlers: []conformance.Handler{
			handler("h1", conformance.Behaviour{Fail: 1, Permanent: true}, "delete"),
		}},
		History: append(steps("create", "delete"), conformance.Step{Op: conformance.OpDeliver, Delivery: 1}),
	}
	if conformance.Valid(c) {
		t.Errorf("a delivery applying the object while its deletion waits for a delete handler is valid:\n%s", c)
	}
}

func TestARedeliveryIsDrawnOnlyWhereTheEngineAnswersIt(t *testing.T) {
	redeliver := conformance.Step{Op: conformance.OpRedeliver, Delivery: 1}
	deliver := conformance.Step{Op: conformance.OpDeliver, Delivery: 1}
	e1 := []conformance.Handler{handler("e1", ok, "event")}
	for _, tc := range []struct {
		name    string
		object  bool
		history []conformance.Step
	}{
		{"a delivery never posted", false, append(steps("create"), redeliver)},
		{"a second redelivery while the first waits for a start", false, append(steps("create"), deliver, conformance.Step{Op: conformance.OpStop}, redeliver, redeliver, conformance.Step{Op: conformance.OpStart})},
		{"a redelivery that applies the object while no engine runs", true, []conformance.Step{deliver, {Op: conformance.OpStop}, redeliver, {Op: conformance.OpStart}}},
	} {
		c := conformance.Case{Def: conformance.Def{Kind: conformance.CustomResource, Handlers: e1, Source: &conformance.Source{Object: tc.object}}, History: tc.history}
		if conformance.Valid(c) {
			t.Errorf("%s is valid:\n%s", tc.name, c)
		}
	}
}

func TestRegressionCasesCanBePlayed(t *testing.T) {
	for _, r := range conformance.Regressions {
		if !conformance.Valid(r.Case) {
			t.Errorf("regression %q cannot be played:\n%s", r.Name, r.Case)
		}
	}
}

func TestModelHandlesNATSMessagesPublishedWhileTheEngineIsStoppedAfterTheStart(t *testing.T) {
	deliver := func(n int) conformance.Step { return conformance.Step{Op: conformance.OpDeliver, Delivery: n} }
	c := conformance.Case{
		Def: conformance.Def{Kind: conformance.CustomResource, Source: &conformance.Source{Kind: conformance.NATS}, Handlers: []conformance.Handler{
			handler("e1", conformance.Behaviour{Fail: 1}, "event"),
		}},
		History: append(append(steps("create", "stop kill"), deliver(1), deliver(2)), steps("start")...),
	}
	if !conformance.Valid(c) {
		t.Fatalf("the case is not valid:\n%s", c)
	}
	e := conformance.Expect(c)
	if got, want := runs(e), "e1 event gen 0: [Failed Succeeded]\ne1 event gen 0: [Failed Succeeded]\n"; got != want {
		t.Errorf("runs:\n%s\nwant:\n%s", got, want)
	}
	if got, want := deliveries(e), "d1 Handled, 0 replays\nd2 Handled, 0 replays\n"; got != want {
		t.Errorf("deliveries:\n%s\nwant:\n%s", got, want)
	}
	if len(e.Answers) != 0 {
		t.Errorf("a NATS source's messages are answered %v; they are acked, not answered", e.Answers)
	}
	if got := c.Def.SourceDeliveryID(2); got != conformance.NATSStream+":2" {
		t.Errorf("delivery 2's id is %s, want the stream's second message, %s:2", got, conformance.NATSStream)
	}
}

func TestNATSAndKafkaCasesAreNotValidWithWhatTheStreamCannotDo(t *testing.T) {
	for _, kind := range []conformance.SourceKind{conformance.NATS, conformance.Kafka} {
		notValid(t, kind)
	}
}

func notValid(t *testing.T, kind conformance.SourceKind) {
	deliver := func(op conformance.Op, n int) conformance.Step { return conformance.Step{Op: op, Delivery: n} }
	e1 := handler("e1", ok, "event")
	for name, c := range map[string]conformance.Case{
		"a message published again": {
			Def:     conformance.Def{Kind: conformance.CustomResource, Source: &conformance.Source{Kind: kind}, Handlers: []conformance.Handler{e1}},
			History: append(steps("create"), deliver(conformance.OpDeliver, 1), deliver(conformance.OpDeliverAgain, 1)),
		},
		"a message that applies the object, published while the engine is stopped": {
			Def:     conformance.Def{Kind: conformance.CustomResource, Source: &conformance.Source{Kind: kind, Object: true}, Handlers: []conformance.Handler{e1}},
			History: append(append(steps("create", "stop"), deliver(conformance.OpDeliver, 1)), steps("start")...),
		},
		"the stream's second message, with no first": {
			Def:     conformance.Def{Kind: conformance.CustomResource, Source: &conformance.Source{Kind: kind}, Handlers: []conformance.Handler{e1}},
			History: append(steps("create"), deliver(conformance.OpDeliver, 2)),
		},
		"a crash in the first run of a start with messages to handle": {
			Def:     conformance.Def{Kind: conformance.CustomResource, Source: &conformance.Source{Kind: kind}, Handlers: []conformance.Handler{handler("h1", ok, "create", "resume"), e1}},
			History: append(append(steps("create", "stop"), deliver(conformance.OpDeliver, 1)), steps("start", "crash")...),
		},
	} {
		if conformance.Valid(c) {
			t.Errorf("%s (%s) is valid:\n%s", name, kind, c)
		}
	}
}
