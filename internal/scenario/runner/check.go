package runner

import (
	"fmt"

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
		case s.Expect != nil && s.Expect.Run != nil:
			add("expect.run", r.checkHandler(s.Expect.Run.Operator, s.Expect.Run.Handler))
		case s.Expect != nil && s.Expect.Log != nil:
			add("expect.log", r.checkHandler(s.Expect.Log.Operator, s.Expect.Log.Handler))
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return errs
}

func (r *scenarioRun) checkHandler(operator, name string) error {
	d, err := r.operator(operator)
	if err != nil {
		return err
	}
	_, err = handler(d, name)
	return err
}
