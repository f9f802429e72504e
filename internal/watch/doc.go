// Package watch runs a watch operator (spec.watch): it reacts to objects
// of any kind that it neither owns nor writes to.
//
// Its watch is its own: a cache restricted to the watched namespaces and,
// on the API server's side, to the label selector, so that neither the
// objects without the labels nor the other namespaces cost memory, and
// the engine needs to list and watch the kind in those namespaces only.
// An engine of one namespace watches that namespace alone, whatever the
// definition's namespaces (Config.Namespaces).
//
// Each object's handler state (cause.State, with its count of observed
// changes, cause.Observed) is kept in the run archive (archive.HandlerRecord, key
// the object's uid), never in the object: opkit makes no write to a
// watched object. The state is loaded when the operator starts, and every
// object it names is reconciled once the watch has synced, so a change or
// a deletion made while no engine ran is handled after it starts. The
// record also keeps the object as it was when its state last changed:
// the delete handlers of an object deleted while no engine ran get that
// object; one deleted while the engine runs gets the object as the watch
// last saw it.
//
// A step's state is written when it changed: with the start of the run
// the step decided, in that record's transaction (run.Pending.Carry), or
// on its own when the step starts none; the end of a run writes the state
// it leaves with the run's end (run.StepCarrying). The state that decides
// a run is recorded with its start, and a change handled costs no write
// of its own. A step of the object while its run waits for a slot (a
// busy step) writes its state on its own, as every state was before: a
// crash before the start then leaves a state that decided a run the
// archive does not hold, which the next engine decides again. A record
// carried by a start that waited for a slot never replaces a later one
// (archive.Run.Record).
//
// An update of an object that changes nothing its step reads (its
// status written by its controller, someone else's annotation) is not
// reconciled; see updates.
//
// An object that stops matching (its labels or the filter no longer
// select it) is forgotten: no delete handler runs for it, as the object
// still exists. One that matches again is new to the operator.
//
// The package knows the engine through Config alone; the runs are the
// operator's run.Runner's.
package watch
