// Package lifecycle runs an Operator's life cycle (spec.states) for its
// custom resources, on the engine's side: package statemachine decides
// each step, purely; this package reads the object's state, puts the
// step's outcome into what the reconcile writes, and does what follows a
// move (docs/states.md).
//
// Flow, per reconcile of one object:
//
//  1. Begin, before children render: an object without status.state is
//     in the initial state, put into the object templates read (Visit.Self),
//     and written with this reconcile's status; a transition whose archive
//     record an engine that died did not make is recorded from
//     status.state.
//  2. Step, after children and handlers: statemachine.Next decides over
//     the guards (self as read, children live, related, run), the
//     timeout, the decision annotation; a move is put into self, so that
//     the status fields are evaluated over the new state.
//  3. The reconcile writes status.state and the State and NeedsPerson
//     conditions (Visit.WriteTo), with the resourceVersion read as a
//     precondition when the state moves: a step over a stale read cannot
//     move twice.
//  4. After, once the write succeeded: the Events, the archive record,
//     and the decision annotation removed.
//
// Guarantees: every transition written to status.state is recorded in the
// archive once (a record missed by an engine that stopped is made by the
// next reconcile); a decision that waits is said in one Event, not at
// every reconcile; a decision on an object being deleted is refused.
//
// What a Machine knows of an object between reconciles is kept in the
// operator's run.Memory (run.LifeCycle), which forgets it with the object.
// Nothing here reads the wall clock for the life cycle: Options.Clock
// gives since and the timeouts' deadlines.
package lifecycle
