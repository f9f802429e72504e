// Package rollout drives an operator's staged rollout (spec.rollout,
// docs/changing-operators.md): which definition each of its objects is
// on, and the steps that move them from one to the next.
//
// The Rollout object of an operator (api/v1alpha1.RolloutObject) is the
// one record of where its objects are: the definition they were on
// (From), the one they move to (To), the objects moved, the step. It is
// kept whenever the operator has spec.rollout, so that the next start with
// a changed definition, whether from a file or an Operator, knows which
// definition the objects are on and can run both.
//
// Prepare reads (or begins) the rollout at an operator's start and says
// which definition the objects not moved are on (Rollout.From). While a
// rollout is under way the engine runs two reconcilers in the operator's
// one controller, one per definition, joined by a Split that sends each
// object to the one the Rollout says. The driver (Rollout.Drive, on the
// acting replica alone) takes the steps: it writes the Rollout first,
// then moves the objects in the Split and wakes them (Rollout.Moves), so
// that a restart finds them where it left them.
//
// An object is healthy when it has been reconciled by To
// (status.opkit.definition), is Ready, is neither Degraded nor Stalled,
// every create and update handler of To is done with its generation (a
// handler still running holds the step: its outcome is not known), and
// no handler of it has failed since its last success. The next step waits
// until every moved object has been healthy for settle; a moved object
// Degraded, Stalled or with a failed handler pauses the rollout until a
// person continues (that object then pauses it no more until it is
// healthy again) or undoes it (every object back on From; To is not
// rolled out again until the definition changes, or a person continues).
// A rollout that waits for a person says so (Rollout.Note), which the
// engine writes on the Operator's conditions.
//
// The package knows the engine through Config alone: the clients, the
// installation of the Rollout CRD, the compilation of a kept definition
// and the writing of the note.
package rollout
