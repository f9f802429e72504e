// Package converge is the controller of one operator's custom resources:
// each reconcile reads an object (through the operator's memory, so that
// it sees its own last writes), converges its children in order, prunes
// what it no longer renders, steps its handlers and its life cycle, and
// writes its status in one patch; an object being deleted runs its delete
// handlers before opkit's finalizer is removed.
//
// Start is given everything through a Config: the engine's clients and
// shared cache, the queue options, and the makers of what it does not own
// (the handlers' runner, package run; a life cycle's machine, package
// lifecycle; a staged rollout, package rollout). It knows nothing of the
// engine, which starts one per operator with a custom resource and stops
// it by ending its context.
//
// Contract:
//   - a reconcile writes only what changed, and at most once per change:
//     children by server-side apply (FieldManager), status by a merge patch
//     of the fields it changes; an object whose state moves is written
//     only over the resourceVersion its step was decided from;
//   - the finalizer comes before any other side effect of a reconcile, and
//     it has a controller of its own that gives it to new objects at once
//     (finalizer.go says the whole protocol);
//   - a child it did not make is never taken over, and one it pruned is
//     deleted only while the custom resource still controls it;
//   - a run decided by a reconcile starts only once the status that
//     records it is written (run.StepWriting, then Launch), or is recorded
//     by the same write when it ends within RunWait;
//   - children and related objects outside the engine's namespace
//     (Config.Namespace) are refused, naming the namespace.
//
// Desired renders a child as a reconcile applies it; opkit plan renders
// with it too, so that what it shows is what the engine applies.
package converge
