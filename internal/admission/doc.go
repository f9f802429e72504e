// Package admission answers the API server's admission calls for the
// operators' admission handlers (on: validate and mutate), which the
// webhook server (package webhook) routes here: POST
// /validate/OPERATOR/HANDLER or /mutate/OPERATOR/HANDLER.
//
// Contract:
//
//   - Every call is recorded in the archive as a run (trigger validate or
//     mutate) before its handler runs; a call the archive cannot record
//     runs nothing and gets its failure policy's answer.
//   - The handler runs with the admission binding context
//     (docs/schemas/admission-context.schema.json) and a deadline a tenth
//     shorter than the webhook's timeout (at least 500ms less), so that the
//     answer reaches the API server before it gives up.
//   - The answer is the handler's (allowed, or denied with its message and
//     the run's id; a mutate handler's merge patch becomes the JSONPatch
//     the API server applies, and may change spec, labels and annotations
//     only), or, when the handler gives none, its failure policy's: Fail
//     denies saying what happened, Ignore allows with a warning.
//   - A request that names no admission handler of an operator it was Set
//     with, or is not an AdmissionReview, gets an HTTP error, for which the
//     API server applies the webhook's failure policy itself.
//
// The engine Sets a Server with each operator it runs and Removes it with
// the operator; which webhooks the API server calls is the engine's
// (webhooks.go), not this package's.
package admission
