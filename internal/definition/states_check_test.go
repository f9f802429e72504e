package definition

import (
	"strings"
	"testing"
)

// machine is a valid state machine, its lines counted by the tests below:
// spec.states on line 15, Pending on 16, Running on 22, Review on 29,
// Failed on 35, the handler on 38.
const machine = base + `  states:
  - name: Pending
    initial: true
    transitions:
    - to: Running
      when: "self.spec.replicas > 0"
    timeout: {after: 5m, to: Failed}
  - name: Running
    refuses: [spec.image]
    transitions:
    - to: Pending
      when: "self.spec.replicas == 0"
    - to: Review
      when: "self.spec.image == 'bad'"
  - name: Review
    needsPerson:
      question: Go on?
    transitions:
    - to: Running
    - to: Failed
  - name: Failed
    final: true
  handlers:
  - name: h
    "on": [enter]
    states: [Running]
    exec: {command: [/bin/true]}
`

func TestTheMachineOfTheStateChecksIsValid(t *testing.T) {
	d, err := compileOne(t, "app.yaml", machine, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Warnings) > 0 || len(d.States.States) != 4 {
		t.Errorf("warnings %v, states %d", d.Warnings, len(d.States.States))
	}
}

func TestEveryStateCheckIsAnErrorAtItsFieldAndLine(t *testing.T) {
	all := func(from, to string) func(*testing.T, string) string {
		return func(_ *testing.T, s string) string { return strings.ReplaceAll(s, from, to) }
	}
	one := func(from, to string) func(*testing.T, string) string {
		return func(t *testing.T, s string) string { return replace(t, s, from, to) }
	}
	for _, tc := range []struct {
		name    string
		edit    func(*testing.T, string) string
		line    int
		field   string
		message string
	}{
		{"a name in lower case", all("Failed", "failed"), 35, "spec.states[3].name",
			`"failed" is not a state name: expected an identifier starting with an upper-case letter`},
		{"a name too long", all("Failed", "F"+strings.Repeat("x", 63)), 35, "spec.states[3].name",
			"is 64 characters long: a state's name has at most 63"},
		{"a duplicate name", one("  - name: Failed\n    final: true\n", "  - name: Failed\n    final: true\n  - name: Failed\n    final: true\n"), 37, "spec.states[4].name",
			`duplicate state "Failed"`},
		{"no initial state", one("    initial: true\n", ""), 15, "spec.states",
			"no state is initial: mark the one a new object starts in with initial: true (states: Pending, Running, Review, Failed)"},
		{"two initial states", one("  - name: Failed\n", "  - name: Failed\n    initial: true\n"), 36, "spec.states[3].initial",
			"states Pending and Failed both set initial"},
		{"an unknown target", one("    - to: Pending\n", "    - to: Pendin\n"), 25, "spec.states[1].transitions[0].to",
			`"Pendin" is not a state of the Operator: did you mean Pending? (states: Pending, Running, Review, Failed)`},
		{"an unknown timeout target", one("to: Failed}", "to: Done}"), 21, "spec.states[0].timeout.to",
			`"Done" is not a state of the Operator (states: Pending, Running, Review, Failed)`},
		{"an unreachable state", one("  handlers:\n", "  - name: Archived\n    final: true\n  handlers:\n"), 37, "spec.states[4]",
			"state Archived cannot be reached from the initial state Pending: no transition or timeout of a state that can be reached leads to it; add one, or remove the state"},
		{"a dead end", one("    final: true\n", ""), 35, "spec.states[3]",
			"state Failed has no way out (no transition, no timeout) and is not final: add a transition or a timeout, or mark it final: true"},
		{"a final state with transitions", one("    final: true\n", "    final: true\n    transitions:\n    - to: Pending\n"), 37, "spec.states[3].transitions",
			"state Failed is final: it has no way out, and so no transitions"},
		{"a final state with a timeout", one("    final: true\n", "    final: true\n    timeout: {after: 1m, to: Pending}\n"), 37, "spec.states[3].timeout",
			"state Failed is final: it has no way out, and so no timeout"},
		{"a person's choice with a guard", one("    - to: Failed\n", "    - to: Failed\n      when: \"true\"\n"), 35, "spec.states[2].transitions[1].when",
			"state Review needs a person, who chooses among its transitions: a choice has no guard"},
		{"a person's state with a timeout", one("      question: Go on?\n", "      question: Go on?\n    timeout: {after: 1m, to: Failed}\n"), 32, "spec.states[2].timeout",
			"state Review needs a person: only a decision leaves it, so it has no timeout"},
		{"a person's state without choices", one("    transitions:\n    - to: Running\n    - to: Failed\n", ""), 30, "spec.states[2].needsPerson",
			"state Review needs a person, who chooses one of its transitions: declare at least one"},
		{"a person's state without a question", one("      question: Go on?\n", "      question: \" \"\n"), 31, "spec.states[2].needsPerson.question",
			"required: what the person is asked"},
		{"a guard that does not compile", one("self.spec.replicas > 0", "self.spec.replica > 0"), 20, "spec.states[0].transitions[0].when",
			"${self.spec.replica > 0}: ERROR: <input>:1:10: undefined field 'replica'"},
		{"a guard that is not a bool", one("self.spec.replicas > 0", "self.spec.replicas"), 20, "spec.states[0].transitions[0].when",
			"${self.spec.replicas} is of type int: a condition must be a bool"},
		{"a guard reading an unknown child", one("self.spec.replicas > 0", "has(children.db.status)"), 20, "spec.states[0].transitions[0].when",
			`${has(children.db.status)} reads children.db, but there is no child with id "db"`},
		{"a timeout under a second", one("after: 5m", "after: 500ms"), 21, "spec.states[0].timeout.after",
			"500ms is shorter than the 1s minimum"},
		{"a bad reason", one("    - to: Running\n      when", "    - to: Running\n      reason: went running\n      when"), 20, "spec.states[0].transitions[0].reason",
			`"went running" is not a reason: expected a CamelCase word of at most 63 characters, like VersionChanged`},
		{"a refused field outside the spec", one("[spec.image]", "[status.phase]"), 23, "spec.states[1].refuses[0]",
			`"status.phase" is not a field of the spec: write a dotted path like spec.version, or spec for all of it`},
		{"a refused field the schema does not have", one("[spec.image]", "[spec.imag]"), 23, "spec.states[1].refuses[0]",
			`"spec.imag": the schema has no field spec.imag (it has image, replicas)`},
		{"a handler on enter without states", one("    states: [Running]\n", ""), 38, "spec.handlers[0].states",
			"required by the enter trigger: the states whose entering runs the handler, like states: [Ready]"},
		{"a handler naming an unknown state", one("states: [Running]", "states: [Runnin]"), 40, "spec.handlers[0].states[0]",
			`"Runnin" is not a state of the Operator: did you mean Running? (states: Pending, Running, Review, Failed)`},
		{"states without enter or exit", one(`"on": [enter]`, `"on": [create]`), 40, "spec.handlers[0].states",
			"states names the states of the enter and exit triggers, which this handler does not have"},
		{"a status field named state", one("  states:\n", "  status:\n    state: \"${self.spec.image}\"\n  states:\n"), 16, "spec.status.state",
			`"state" is written by opkit for an Operator with states`},
		{"a statusSchema field named state", one("          replicas: {type: integer}\n", "          replicas: {type: integer}\n      statusSchema:\n        properties:\n          state: {type: string}\n"), 17, "spec.resource.versions[0].statusSchema.properties.state",
			`"state" is written and typed by opkit for an Operator with states`},
		{"a field refused twice", one("[spec.image]", "[spec.image, .spec.image]"), 23, "spec.states[1].refuses[1]",
			`"spec.image" is listed twice`},
		{"a duplicate choice", one("    - to: Failed\n", "    - to: Failed\n    - to: Failed\n      reason: Again\n"), 35, "spec.states[2].transitions[2]",
			"duplicate transition: spec.states[2].transitions[1] has the same target: a person chooses by it (to Failed)"},
		{"a duplicate transition", one("    - to: Review\n", "    - to: Pending\n      when: \"self.spec.replicas == 0\"\n    - to: Review\n"), 27, "spec.states[1].transitions[1]",
			"duplicate transition: spec.states[1].transitions[0] has the same target and guard (to Pending)"},
		{"a set template that does not compile", one("      when: \"self.spec.replicas > 0\"\n", "      when: \"self.spec.replicas > 0\"\n      set: {seen: \"${self.spec.imag}\"}\n"), 21, "spec.states[0].transitions[0].set.seen",
			"${self.spec.imag}: ERROR: <input>:1:10: undefined field 'imag'"},
		{"a set of opkit's field", one("      when: \"self.spec.replicas > 0\"\n", "      when: \"self.spec.replicas > 0\"\n      set: {conditions: \"x\"}\n"), 21, "spec.states[0].transitions[0].set.conditions",
			`"conditions" is written by opkit`},
		{"a set of a spec.status field", func(t *testing.T, s string) string {
			s = replace(t, s, "      when: \"self.spec.replicas > 0\"\n", "      when: \"self.spec.replicas > 0\"\n      set: {seen: \"${self.spec.image}\"}\n")
			return replace(t, s, "  states:\n", "  status:\n    seen: \"${self.spec.image}\"\n  states:\n")
		}, 23, "spec.states[0].transitions[0].set.seen",
			"spec.status.seen writes this field at every reconcile, and would undo what the transition sets: set it in one place"},
		{"two sets of one field with two types", func(t *testing.T, s string) string {
			s = replace(t, s, "      when: \"self.spec.replicas > 0\"\n", "      when: \"self.spec.replicas > 0\"\n      set: {seen: \"${self.spec.replicas}\"}\n")
			return replace(t, s, "      when: \"self.spec.replicas == 0\"\n", "      when: \"self.spec.replicas == 0\"\n      set: {seen: \"${self.spec.image}\"}\n")
		}, 28, "spec.states[1].transitions[0].set.seen",
			"computes a string, and spec.states[0].transitions[0].set.seen computes an integer for the same field: a status field has one type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := compileOne(t, "app.yaml", tc.edit(t, machine), nil)
			wantOneError(t, err, "app.yaml", tc.line, tc.field, tc.message)
		})
	}
}

func TestStatesAndStateHandlersNeedACustomResource(t *testing.T) {
	withStates := watchOp + "  states:\n  - name: Done\n    initial: true\n    final: true\n"
	_, err := compileOne(t, "watch.yaml", withStates, nil)
	wantOneError(t, err, "watch.yaml", 21, "spec.states", "a watch operator owns nothing: states are the life cycle of a custom resource; declare spec.resource")
	onEnter := replace(t, watchOp, "on: [create, update]\n    fields: [metadata.annotations, status.readyReplicas, spec.template]\n", "on: [enter]\n    states: [Done]\n")
	_, err = compileOne(t, "watch.yaml", onEnter, nil)
	wantOneError(t, err, "watch.yaml", 18, "spec.handlers[0].on", "a handler on enter or exit runs when a custom resource enters or leaves one of its states, and a watch operator owns none")
}

func TestATransitionAfterAnUnguardedOneIsWarnedOfAsNeverTaken(t *testing.T) {
	d, err := compileOne(t, "app.yaml", replace(t, machine, "    - to: Pending\n      when: \"self.spec.replicas == 0\"\n", "    - to: Pending\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := "app.yaml:26: spec.states[1].transitions[1]: never taken: transition 0 (to Pending) comes before it and has no guard, so it is always taken first; move this one up, or give that one a guard"
	if len(d.Warnings) != 1 || d.Warnings[0].Error() != want {
		t.Errorf("warnings %v\nwant %s", d.Warnings, want)
	}
}

func TestAGuardReadingRunInAStateWithoutEnterHandlersIsWarnedOf(t *testing.T) {
	d, err := compileOne(t, "app.yaml", replace(t, machine, `when: "self.spec.replicas > 0"`, `when: "run.outcome == 'Succeeded'"`), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := "app.yaml:20: spec.states[0].transitions[0].when: reads run, the state's last finished enter run, but no handler runs on entering Pending: run stays empty, and the guard never holds; add a handler on enter with states: [Pending]"
	if len(d.Warnings) != 1 || d.Warnings[0].Error() != want {
		t.Errorf("warnings %v\nwant %s", d.Warnings, want)
	}
	// In Running, whose enter handler h sets run, it is no surprise.
	d, err = compileOne(t, "app.yaml", replace(t, machine, `when: "self.spec.replicas == 0"`, `when: "has(run.outcome)"`), nil)
	if err != nil || len(d.Warnings) > 0 {
		t.Errorf("a guard reading run in a state with an enter handler: %v, warnings %v", err, d.Warnings)
	}
}

func TestATransitionSetsTypedStatusFieldsThatGuardsRead(t *testing.T) {
	src := replace(t, machine, "      when: \"self.spec.replicas > 0\"\n", "      when: \"self.spec.replicas > 0\"\n      set: {seen: \"${self.spec.replicas}\", note: \"at ${self.spec.image}\"}\n")
	src = replace(t, src, "      when: \"self.spec.image == 'bad'\"", "      when: \"self.spec.image == 'bad' && self.status.seen > 1\"")
	d, err := compileOne(t, "app.yaml", src, nil)
	if err != nil {
		t.Fatal(err)
	}
	tr := d.States.State("Pending").Transitions[0]
	got, err := tr.Assign(Vars{Self: map[string]any{"spec": map[string]any{"replicas": int64(3), "image": "web:1"}}}, Run{})
	if err != nil {
		t.Fatal(err)
	}
	if got["seen"] != int64(3) || got["note"] != "at web:1" || len(got) != 2 {
		t.Errorf("Assign gave %v; want seen 3 and note \"at web:1\"", got)
	}
	crd := d.CRD()
	status := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["status"]
	if typ := status.Properties["seen"].Type; typ != "integer" {
		t.Errorf("status.seen is typed %q in the CRD; want integer, as its template computes", typ)
	}
	if _, err := d.States.State("Running").Transitions[0].Assign(Vars{Self: map[string]any{}}, Run{}); err != nil {
		t.Errorf("a transition that sets nothing: %v", err)
	}
}
