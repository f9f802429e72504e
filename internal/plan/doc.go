// Package plan says what a new Operator definition would change for the
// custom resources that exist, before it is applied: opkit plan.
//
// # Contract
//
// Plan reads; it writes nothing. For each custom resource of the operator
// (one List, and one List per child kind: the reads are batched), it
// renders the children under the new definition as the engine does
// (converge.Desired, the engine's own renderer, with the same Vars: the
// object, its related objects, the children rendered before it), skips
// those the engine would skip (the applied hash and the live object agree:
// no write), and asks the API server what each other one would become: a
// server-side apply dry-run (DryRun: All) as the engine's field manager,
// with its Force. What it answers is compared with the live child, field
// by field, leaving out what the server fills and opkit's own bookkeeping
// (managedFields, resourceVersion, generation, uid, creationTimestamp,
// status, the applied-hash annotation): a child is created, changed (with
// its fields), unchanged, re-created (a field it changes is immutable), or
// pruned (its object's inventory, status.opkit.children, names it and the
// new definition no longer renders it: what engine pruning deletes).
//
// A child changed or created gets a new resourceVersion the dry-run cannot
// know: the children rendered after it, and the status fields, read it as
// Unknown, "(known after apply)", as Terraform says it.
//
// The handlers that would run are those cause.Decide decides under the new
// definition, from the object's recorded handler state, its related
// objects, the when conditions over the planned children, and its state
// visit: each decided run is taken as succeeded and Decide is asked again,
// so every run of the change is listed, in the order the engine makes
// them, with its trigger and why. Runs that come from time and not from
// the definition (resume at an engine's start, schedule, requeue) are not
// listed.
//
// Status fields the definition computes (spec.status) are evaluated over
// the planned children and compared with the object's status. The state
// machine's next step is statemachine.Next, the engine's, with the guards
// over the planned children: a move, the initial state of a machine new to
// the object, a state no longer declared. A move is planned one step
// ahead: the enter runs of the state it enters are not listed.
//
// Before any object is read, the CRD the new definition builds is checked
// against the old one (package compat): a breaking change refuses the
// plan (Plan.Refused), as opkit run refuses to apply it.
//
// Caveats: the dry-run answers for the cluster as it is now; a child's
// status after the change (a Deployment's replicas) is not known, and
// what reads it reads its current value.
package plan
