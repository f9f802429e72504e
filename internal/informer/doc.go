// Package informer is the engine's informer cache: how the objects of
// every watched kind are listed, watched and kept in memory.
//
// Contract:
//
//   - [Transform] is the cache's transform: an unstructured object (a
//     custom resource, a child, a related object) is kept as a compact
//     object, its metadata typed and the rest packed (package packed); any
//     other object without its managedFields. Reads through the cache
//     decode it again, so a reader gets the same unstructured object as
//     the API server's, less its managedFields. Transform is idempotent.
//   - [Informers] makes the shared cache's informers: an unstructured
//     kind is listed and watched with a list-watch of its own that decodes
//     each object's JSON straight into its compact form, and every
//     informer's calls are held through an outage its [Outage] knows of,
//     so that a reflector relists as soon as the API server is back.
//   - [Scopes] answers a kind's resource and whether it is namespaced,
//     asking the RESTMapper once per kind.
//
// The package knows nothing of operators, runs or the engine: it is given
// a REST config, a namespace and an outage, and makes informers.
package informer
