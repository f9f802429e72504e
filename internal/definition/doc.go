// Package definition turns Operator manifests into checked, compiled
// definitions for the engine.
//
// Flow: [Load] or [LoadFile] read YAML (several documents per file) into
// Sources that remember the line of every field; [FromCluster] wraps an
// Operator read from the API. [Compile] defaults it ([Default]: names from
// the kind, scope, served and storage versions), validates it, compiles each
// ${...} CEL expression and orders the children by what they read.
//
// Expressions: in a child template, a string that is exactly one ${expr}
// takes the expression's type; in a longer string each expression must be a
// string, number or bool and is spliced in; "$${" stands for a literal
// "${". The variables are self — the custom resource, typed by the storage
// version's schema, so self.spec.nosuch fails to compile — and children, a
// map from child id to that child's current object. readyWhen expressions
// see one child as self. The Kubernetes CEL libraries (lists, regex, URLs,
// quantities...) are available.
//
// Guarantees: Compile never changes its input; every problem it finds is
// returned together as [Errors], each naming the file and line (for files),
// the field path and what was expected. A child that reads another
// (children.<id>) is ordered after it; reading an unknown id, or a cycle,
// is an error naming the ids.
//
// An Operator without spec.resource either watches objects of another
// kind (spec.watch, compiled to [Watch]: self is the watched object, typed
// by its kind's schema when compiled with schemas; no children, related
// objects or status) or, with neither, is a calendar: handlers on
// operator-wide schedules only ([Definition.Calendar], [Handler.NextSlot]).
//
// The CRD ([Definition.CRD]) is checked as the API server would check it
// when installed, by its own validation of CRDs, and each error placed at
// the definition's field: a schema's x-kubernetes-validations rules
// (compiled, typed, their cost estimated, oldSelf only where the API
// server can know it), the rules opkit writes for a version's immutable
// fields (transition rules: the value cannot change, nor be added or
// removed), and the rest of the schema. A version's scale subresource
// must name an integer spec field and an integer status field the
// operator writes (spec.status or statusSchema), and a string label
// selector.
//
// Versions: self is typed by the version the engine reads the custom
// resource at ([Definition.GVK]: spec.resource.readVersion, or the
// storage version). A version's declared conversion to the storage
// version ([Conversion]: per field, a CEL expression each way, over self
// and object) is typed by both versions' schemas and checked here; the
// converting is package internal/conversion's. The CRD's conversion is
// Webhook when a version declares one ([CRDOptions] carries the engine's
// clientConfig), None otherwise.
//
// Handlers ([Handler]) are validated and defaulted here too: triggers,
// fields, schedule, timeout, retry policy and exactly one action; an exec
// command's relative path is resolved against the definition file.
//
// Not checked here: whether the cluster serves a child's kind (the engine
// checks it against discovery), and the types of fields read from children,
// which are dynamic until their schemas are fetched from the cluster.
package definition
