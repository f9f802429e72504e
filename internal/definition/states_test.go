package definition

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// compileDatabase compiles examples/database/operator.yaml, the example
// state machines are written for.
func compileDatabase(t *testing.T) *Definition {
	t.Helper()
	srcs, err := LoadFile("../../examples/database/operator.yaml")
	if err != nil {
		t.Fatal(err)
	}
	d, err := Compile(srcs[0])
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Warnings) > 0 {
		t.Errorf("warnings: %v", d.Warnings)
	}
	return d
}

func TestTheDatabaseExampleLoadsItsStateMachine(t *testing.T) {
	d := compileDatabase(t)
	m := d.States
	if m == nil {
		t.Fatal("no state machine")
	}
	var names []string
	for _, s := range m.States {
		names = append(names, s.Name)
		if m.State(s.Name) != s {
			t.Errorf("State(%q) is not the state declared", s.Name)
		}
	}
	if want := []string{"Provisioning", "Ready", "Upgrading", "Verifying", "NeedsAttention", "RollingBack"}; !slices.Equal(names, want) {
		t.Errorf("states %v, want %v", names, want)
	}
	if m.Initial != m.State("Provisioning") || m.State("Nope") != nil {
		t.Errorf("initial %v", m.Initial)
	}
	prov := m.State("Provisioning")
	if prov.Line != 91 || prov.Field != "spec.states[0]" {
		t.Errorf("Provisioning at line %d, field %s", prov.Line, prov.Field)
	}
	if to := prov.Timeout; to == nil || to.After != 10*time.Minute || to.To != "NeedsAttention" || to.Reason != "ProvisioningTooSlow" {
		t.Errorf("Provisioning's timeout %+v", to)
	}
	if tr := prov.Transitions; len(tr) != 1 || tr[0].To != "Ready" || tr[0].Reason != "Provisioned" || tr[0].When == nil || tr[0].Field != "spec.states[0].transitions[0]" {
		t.Errorf("Provisioning's transitions %+v", tr)
	}
	verifying := m.State("Verifying")
	if tr := verifying.Transitions; len(tr) != 2 || tr[0].To != "Ready" || tr[1].To != "NeedsAttention" || !slices.Equal(verifying.Refuses, []string{"spec.version"}) {
		t.Errorf("Verifying %+v", verifying)
	}
	na := m.State("NeedsAttention")
	if !na.NeedsPerson || !strings.HasPrefix(na.Question, "The new version failed its checks.") || na.Timeout != nil {
		t.Errorf("NeedsAttention %+v", na)
	}
	if c := na.Choices(); !slices.Equal(c, []string{"RollingBack", "Ready"}) {
		t.Errorf("choices %v", c)
	}
	if tr := na.Transitions[0]; tr.Reason != "RollBack" || tr.When != nil || !strings.HasPrefix(tr.Description, "run the last good version") {
		t.Errorf("RollingBack choice %+v", tr)
	}
	announce := d.Handlers[0]
	if announce.Name != "announce" || !announce.Fires("enter") || !slices.Equal(announce.States, []string{"Ready", "NeedsAttention"}) {
		t.Fatalf("handler %+v", announce)
	}
	for _, s := range m.States {
		wantEnter := s.Name == "Ready" || s.Name == "NeedsAttention"
		if got := len(s.Enter) == 1 && s.Enter[0] == announce; got != wantEnter || len(s.Exit) != 0 {
			t.Errorf("%s: enter %v exit %v", s.Name, s.Enter, s.Exit)
		}
	}
}

// states is a definition with a child (server) and a related object
// (config) whose guards read them, self and run.
const states = base + `      statusSchema:
        properties:
          restart: {type: boolean}
  related:
  - id: config
    apiVersion: v1
    kind: ConfigMap
    name: "${self.metadata.name}-config"
  children:
  - id: server
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "${self.metadata.name}"}
  states:
  - name: Starting
    initial: true
    transitions:
    - to: Running
      when: "children.server.data.up == 'yes'"
    - to: Failed
      reason: NoConfig
      when: "related.config.data.broken == 'yes'"
    - to: Waiting
      when: "run.outcome == 'GaveUp' && run.handler == 'prepare' && run.error != ''"
    - to: Failed
      when: "self.spec.replicas / (self.spec.replicas - 1) > 0"
  - name: Waiting
    needsPerson:
      question: Go on?
    transitions:
    - to: Running
    - to: Failed
      reason: GivenUp
  - name: Running
    transitions:
    - to: Starting
      reason: Restart
      when: "self.status.restart == true"
    - to: Failed
    timeout: {after: 1h, to: Failed}
  - name: Failed
    final: true
  handlers:
  - name: prepare
    on: [enter]
    states: [Starting]
    exec: {command: [/bin/true]}
  - name: both
    on: [exit, enter]
    states: [Running, Starting]
    exec: {command: [/bin/true]}
  - name: cleanup
    on: [exit]
    states: [Running]
    exec: {command: [/bin/true]}
`

func TestReasonsAreDefaultedByHowTheTransitionComes(t *testing.T) {
	d, err := compileFile(t, "app.yaml", states)
	if err != nil {
		t.Fatal(err)
	}
	m := d.States
	for _, tc := range []struct {
		state  string
		i      int
		reason string
	}{
		{"Starting", 0, ReasonGuardHeld},
		{"Starting", 1, "NoConfig"},
		{"Waiting", 0, ReasonDecided},
		{"Waiting", 1, "GivenUp"},
		{"Running", 0, "Restart"},
		{"Running", 1, ReasonUnconditional},
	} {
		if got := m.State(tc.state).Transitions[tc.i].Reason; got != tc.reason {
			t.Errorf("%s's transition %d: reason %q, want %q", tc.state, tc.i, got, tc.reason)
		}
	}
	if got := m.State("Running").Timeout.Reason; got != ReasonTimeout {
		t.Errorf("timeout's reason %q, want %q", got, ReasonTimeout)
	}
}

func TestEnterAndExitHandlersAreListedWithTheirStatesInDeclaredOrder(t *testing.T) {
	d, err := compileFile(t, "app.yaml", states)
	if err != nil {
		t.Fatal(err)
	}
	names := func(hs []*Handler) string {
		var out []string
		for _, h := range hs {
			out = append(out, h.Name)
		}
		return strings.Join(out, ",")
	}
	for _, tc := range []struct{ state, enter, exit string }{
		{"Starting", "prepare,both", "both"},
		{"Running", "both", "both,cleanup"},
		{"Waiting", "", ""},
		{"Failed", "", ""},
	} {
		s := d.States.State(tc.state)
		if names(s.Enter) != tc.enter || names(s.Exit) != tc.exit {
			t.Errorf("%s: enter [%s] exit [%s]; want [%s] [%s]", tc.state, names(s.Enter), names(s.Exit), tc.enter, tc.exit)
		}
	}
}

func TestGuardsHoldOverSelfChildrenRelatedAndRun(t *testing.T) {
	d, err := compileFile(t, "app.yaml", states)
	if err != nil {
		t.Fatal(err)
	}
	starting, running := d.States.State("Starting").Transitions, d.States.State("Running").Transitions
	self := map[string]any{"metadata": map[string]any{"name": "a"}, "spec": map[string]any{"replicas": int64(3)}}
	up := map[string]map[string]any{"server": {"data": map[string]any{"up": "yes"}}}
	down := map[string]map[string]any{"server": {"data": map[string]any{"up": "no"}}}
	gaveUp := Run{Handler: "prepare", Outcome: "GaveUp", Error: "exit status 1"}
	for _, tc := range []struct {
		name    string
		t       *Transition
		vars    Vars
		run     Run
		holds   bool
		missing bool   // the error wraps ErrChildMissing (not known yet)
		err     string // another error, containing this
	}{
		{name: "a child's field", t: starting[0], vars: Vars{Self: self, Children: up}, holds: true},
		{name: "a child's field false", t: starting[0], vars: Vars{Self: self, Children: down}},
		{name: "a child that does not exist", t: starting[0], vars: Vars{Self: self}, missing: true},
		{name: "a related object", t: starting[1], vars: Vars{Self: self, Related: map[string]any{"config": map[string]any{"data": map[string]any{"broken": "yes"}}}}, holds: true},
		{name: "a related object that does not exist", t: starting[1], vars: Vars{Self: self}, missing: true},
		{name: "run after a run gave up", t: starting[2], vars: Vars{Self: self}, run: gaveUp, holds: true},
		{name: "run after a run succeeded", t: starting[2], vars: Vars{Self: self}, run: Run{Handler: "prepare", Outcome: "Succeeded"}},
		{name: "run before any run", t: starting[2], vars: Vars{Self: self}, missing: true},
		{name: "a status field not written", t: running[0], vars: Vars{Self: self}, missing: true},
		{name: "a status field", t: running[0], vars: Vars{Self: map[string]any{"spec": map[string]any{}, "status": map[string]any{"restart": true}}}, holds: true},
		{name: "no guard", t: running[1], vars: Vars{Self: self}, holds: true},
		{name: "a division by zero is a failure", t: starting[3], vars: Vars{Self: map[string]any{"spec": map[string]any{"replicas": int64(1)}}}, err: "spec.states[0].transitions[3].when: ${self.spec.replicas / (self.spec.replicas - 1) > 0}: division by zero"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			holds, err := tc.t.Holds(tc.vars, tc.run)
			switch {
			case tc.missing:
				if !errors.Is(err, ErrChildMissing) {
					t.Errorf("Holds = %v, %v; want an error wrapping ErrChildMissing", holds, err)
				}
			case tc.err != "":
				if err == nil || errors.Is(err, ErrChildMissing) || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("Holds = %v, %v; want a failure %q", holds, err, tc.err)
				}
			case err != nil || holds != tc.holds:
				t.Errorf("Holds = %v, %v; want %v", holds, err, tc.holds)
			}
		})
	}
}
