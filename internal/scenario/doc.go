// Package scenario reads declarative test scenarios: the *.test.yaml files
// that `opkit test` runs beside an operator against a local control plane.
// It loads and checks them; it runs nothing (the runner does, see
// docs/testing.md). The format's reference is docs/scenarios.md.
//
// Flow: [Find] lists the scenario files of the paths given; [LoadFile] or
// [Load] read each file's YAML documents, one [Scenario] each: a name, the
// operator definition files to run, a default expect timeout and
// [Step]s, each exactly one action (apply, patch, delete, retry, advance,
// stub, unstub, send, expect) with the line it was written on and, for
// apply, patch and delete, the [Refused] the request must get, if any.
//
// Checks, in order, for each document:
//
//  1. YAML to JSON: keys must be strings, integers fit in 64 bits, floats
//     are finite; anchors, aliases and merge keys (<<) are resolved.
//  2. The JSON Schema of [Schema] (draft 2020-12): fields, types, required
//     fields, one action per step, refused only with apply, patch or
//     delete, one assertion per expect, a handler in an expect of a run
//     but of a state transition, enums. Its
//     findings are put in words (unknown field "x"; known: a, b), not the
//     validator's.
//  3. What the schema cannot say: durations parse and are in range (more
//     than 0; timeouts at most [MaxTimeout]); cel expressions compile, over
//     object (a map), and are bool; the operator files and apply files
//     exist, relative to the scenario's file; the objects of an apply
//     file have apiVersion, kind and metadata.name and no namespace; an
//     apply expected to be refused applies one object; the scenario
//     names of a file are unique.
//
// Guarantees: every problem of every document of a file is returned
// together as [Errors], each [Error] naming the file, line, field path
// (steps[2].expect.object.kind) and what to do, at most one per field; a
// file with a problem gives no scenarios. Paths in a loaded Scenario are
// resolved against its file's directory, and the objects of apply files
// are read (Apply.Objects), so the runner reads no scenario input itself.
// Raw objects, patches, payloads and results are [Object]s of JSON values
// (int64, float64, string, bool, nil, []any, map[string]any).
//
// Not checked here, because it needs the operators compiled: that the
// handlers, sources, operators and states that stub, unstub, send and the
// run and log expects name exist, that a handler has the trigger a run is
// expected with, and that operator may be left out (the scenario's files
// define exactly one Operator); that an object's kind is served.
// The runner checks these before the first step runs.
package scenario
