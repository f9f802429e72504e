// Package runsapi serves the run archive as a Kubernetes API, group
// runs.opkit.dev/v1alpha1 (api/runs/v1alpha1), for the API server's
// aggregation layer to proxy: kubectl get runs, -l and --field-selector,
// -w, kubectl get --raw .../runs/ID/log, k9s. It is an http.Handler
// written on net/http and apimachinery's types alone, without
// k8s.io/apiserver: the API is read-only and small, and the engine's
// binary stays small.
//
// # What it serves
//
//   - Discovery: /apis, /apis/runs.opkit.dev, /apis/runs.opkit.dev/v1alpha1
//     (runs, runs/log, deliveries; verbs get, list, watch).
//   - get, list and watch of runs and deliveries, per namespace and in
//     every namespace. A run is in its object's namespace; the runs of an
//     object with none (cluster-scoped, an operator-wide schedule) and
//     every delivery are in Options.Namespace, the engine's.
//   - Selectors the archive's query expresses, each with one value (=,
//     ==, or in with one value): labels opkit.dev/operator, handler,
//     trigger, object, outcome (deliveries: operator, source, outcome);
//     fields metadata.name, metadata.namespace, status.outcome,
//     spec.handler, spec.operator, spec.trigger, spec.object.kind and
//     status.failed=true (Failed or GaveUp) (deliveries: spec.source,
//     none of the run's others but status.outcome); and
//     status.startedSince (deliveries: status.receivedSince), an RFC 3339
//     time: what started (came in) at or after it, the archive's
//     Query.Since. A time, not a duration: the selector comes again with
//     each page and with the watch after a list, and a bound relative to
//     the server's clock would select another set each time. Any other,
//     or an empty value, is a 400 Status that names it.
//   - limit and continue: the continue token is the archive's cursor
//     and a digest of the list it continues (its resource, namespace and
//     selection): a token of another list, or not of that form, is a 400
//     that says so. A list without a limit returns at most 500, with a
//     continue token when more remain (the API server would return all:
//     here a client that does not page would read a million runs at
//     once); a limit over 1000 is 1000.
//   - Table output (Accept: application/json;as=Table;v=v1;g=meta.k8s.io),
//     with opkit runs' columns, for lists, gets and watches.
//   - runs/ID/log as text/plain, cleaned as opkit logs prints it, a long
//     log's cut marked as the archive marks it; follow=true streams it
//     until the run ends.
//   - Every other method is 405; an unknown run is 404.
//
// # Who may read
//
// Each request is authenticated (Options.Authenticator: the engine
// wires the API server's requestheader client certificate) and
// authorized (Options.Authorizer: the engine wires SubjectAccessReview)
// before anything is read: 401 and 403 are Status answers. The archive
// keeps secrets redacted; nothing here shows more than opkit runs does
// (a delivery's payload and headers are not served).
//
// # resourceVersion
//
// The archive has no revision counter: a resourceVersion here is a time,
// Unix nanoseconds. An object's is the time of its last change (a run's
// finish, else its start); a list's is the time it was read. A watch
// from resourceVersion T sends ADDED for the objects that came at or
// after T, and MODIFIED (or DELETED, when it stops matching the
// selectors) when one that was unfinished at the watch's start, or came
// since, changes. It polls the archive every Options.PollInterval.
// Without a resourceVersion (or "0") a watch starts now, with no event
// for what exists. A T older than Options.ResumeWindow is answered 410
// Expired, and a client lists again; with allowWatchBookmarks a watch
// gets a BOOKMARK every Options.BookmarkInterval, so that a reflector
// resumes from a recent T. What a client cannot resume: a run that
// started before T and finished between T and the watch's start is not
// sent (the archive cannot select runs by their finish); a list and the
// watch that follows it are milliseconds apart, so this is the case of a
// watch resumed late, and a relist heals it. A run recorded some seconds
// after the start time its id carries (a clock behind) may be missed by
// a watch resumed from a T after that start.
package runsapi
