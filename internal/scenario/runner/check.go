package runner

import (
	"fmt"
	"strings"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/scenario"
)

// Check compiles the definitions a scenario runs and checks that every
// operator, handler and source its steps name exists, and that no step
// leaves out an operator it must name: each problem placed at its step's
// line, as scenario.Load places the format's. Run checks nothing of this
// before it starts: call Check first, so that no malformed scenario
// applies anything.
func Check(sc *scenario.Scenario) error {
	defs, err := definition.CompileFiles(sc.Operators...)
	if err == nil {
		err = definition.Clashes(defs)
	}
	if err != nil {
		return err
	}
	r := &scenarioRun{sc: sc, defs: defs}
	var errs scenario.Errors
	for i, s := range sc.Steps {
		add := func(field string, err error) {
			if err != nil {
				errs = append(errs, &scenario.Error{File: sc.File, Line: s.Line, Scenario: sc.Name, Field: fmt.Sprintf("steps[%d].%s", i, field), Message: err.Error()})
			}
		}
		switch {
		case s.Stub != nil:
			add("stub", r.checkHandler(s.Stub.Operator, s.Stub.Handler))
		case s.Unstub != nil:
			add("unstub", r.checkHandler(s.Unstub.Operator, s.Unstub.Handler))
		case s.Send != nil:
			d, err := r.operator(s.Send.Operator)
			if err == nil && d.EventSource(s.Send.Source) == nil {
				err = fmt.Errorf("operator %s has no source %q", d.Operator.Name, s.Send.Source)
			}
			add("send", err)
		case s.Expect != nil && s.Expect.Run != nil && s.Expect.Run.Transition():
			add("expect.run", r.checkTransition(s.Expect.Run))
		case s.Expect != nil && s.Expect.Run != nil:
			add("expect.run", r.checkRunHandler(s.Expect.Run))
		case s.Expect != nil && s.Expect.Log != nil:
			add("expect.log", r.checkHandler(s.Expect.Log.Operator, s.Expect.Log.Handler))
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return errs
}

// checkRunHandler checks that the handler an expect of a run names exists and
// can have the run's trigger: a handler runs on the triggers of its on:
// alone, and requeue comes to any handler that asks for it.
func (r *scenarioRun) checkRunHandler(e *scenario.ExpectRun) error {
	d, err := r.operator(e.Operator)
	if err != nil {
		return err
	}
	h, err := handler(d, e.Handler)
	if err != nil {
		return err
	}
	if e.Trigger != "" && e.Trigger != v1alpha1.TriggerRequeue && !h.Fires(e.Trigger) {
		return fmt.Errorf("handler %s never runs on %s: it runs on %s", h.Name, e.Trigger, strings.Join(h.On, ", "))
	}
	return nil
}

// checkTransition checks that the operator of an expect of a state
// transition has states, and the states it names.
func (r *scenarioRun) checkTransition(e *scenario.ExpectRun) error {
	d, err := r.operator(e.Operator)
	if err != nil {
		return err
	}
	if d.States == nil {
		return fmt.Errorf("operator %s has no states: its objects make no state transitions", d.Operator.Name)
	}
	var names []string
	for _, st := range d.States.States {
		names = append(names, st.Name)
	}
	for _, name := range []string{e.From, e.To} {
		if name != "" && d.States.State(name) == nil {
			return fmt.Errorf("operator %s has no state %q; its states: %s", d.Operator.Name, name, strings.Join(names, ", "))
		}
	}
	if e.From != "" && e.Trigger == v1alpha1.TransitionInitial {
		return fmt.Errorf("an initial transition leaves no state: remove from")
	}
	return nil
}

func (r *scenarioRun) checkHandler(operator, name string) error {
	d, err := r.operator(operator)
	if err != nil {
		return err
	}
	_, err = handler(d, name)
	return err
}
