// Package statemachine decides where a custom resource is in the life
// cycle its Operator declares (spec.states): [Next] is a pure function of
// the compiled machine, the object's status.state as read, its guards'
// values, the visit's handlers not done yet, the decision annotation,
// whether it is paused or being deleted, and the time. It reads no clock
// and performs no I/O; the engine does the rest (evaluating guards over
// the object, the write, the Events, the archive record), so that every
// rule below is table-tested without a cluster.
//
// Contract of Next, for one reconcile:
//   - An object with no status.state is Initialized into the machine's
//     initial state: seq 1, since now, trigger initial. Nothing else is
//     decided in that step.
//   - A decision in the annotation is answered at once, whatever else
//     holds the object: Refused with why (Consume set) when it is not one,
//     the object is being deleted, its state is not declared or does not
//     wait for a person, it is for another visit, or it lacks a reason, a
//     who or a valid choice; else it Waits, saying why, while the object
//     is paused or the visit's handlers have not finished (Input.Awaited;
//     a handler that gave up is done with, so it never holds a decision);
//     else it is taken (Consume set). Only a valid decision leaves a state
//     that NeedsPerson; such a state has no timeout and no guard.
//   - Paused or being deleted: nothing else moves.
//   - A state the machine does not declare (the Operator changed): nothing
//     moves; Unknown says why. A person changes the definition back or
//     edits status.state.
//   - Until the visit's exit and enter handlers are done (succeeded or
//     given up), nothing else moves.
//   - Else the timeout first: when now >= since + after, the timeout's
//     transition (trigger timeout). It fires once: the transition moves
//     seq and since, so the step that follows sees a new visit, also when
//     the deadline passed while no engine ran.
//   - Else the transitions in declared order: the first whose guard holds
//     (trigger guard). A guard that cannot be known yet (it reads what
//     does not exist: definition.ErrChildMissing) does not hold,
//     silently; any other error does not hold and is returned in
//     GuardErrors for the engine to report.
//   - At most one transition per step. While the state has a timeout that
//     has not come due, Until is its deadline: the engine looks again then
//     if nothing else wakes the object.
//
// A transition's ObjectState is complete but for Run, the archive id the
// engine gives its record: seq + 1, since now (RFC 3339), from, reason
// (the transition's, defaulted at load), trigger, by and message for a
// decision, question and choices when the new state NeedsPerson.
//
// The engine says its answer to a decision as an Event (Step.Message:
// Decided, DecisionRefused, DecisionWaits), naming the decision (Ref);
// Answer reads it back, with the object, for opkit decide and the
// console, so that both say what the engine said (decision.go).
//
// Text and Dot draw a compiled machine, for opkit states (render.go).
package statemachine
