// Package aggregate registers an aggregated API with kube-apiserver's
// aggregation layer and gives the server that serves it what it needs:
// a serving certificate kept valid, and the check of the requests the
// API server proxies to it.
//
// # Flow
//
//  1. [NewServer] makes the HTTPS server (a webhook.Server, whose
//     certificate machinery it shares): its certificate is valid for
//     [ServingName], <service>.<namespace>.svc, the name the aggregator
//     verifies whatever address it reaches the server at, and is kept
//     with its CA in a Secret and rotated as the webhooks' are.
//  2. Each time the CA bundle changes (and once at start), the server
//     calls [Registrar.Register], which applies the APIService
//     (apiregistration.k8s.io/v1) with that caBundle and, for the local
//     plane (API.ExternalName set), a Service of type ExternalName that
//     points at this host.
//  3. [Registrar.WaitAvailable] waits until the APIService reports
//     Available; its error names the condition's reason and message.
//  4. The server's handler checks each request with
//     [RequestHeader.Authenticate]: the client certificate must verify
//     against the requestheader CA that kube-apiserver publishes in
//     kube-system/extension-apiserver-authentication ([ReadRequestHeader])
//     and bear one of its allowed names; only then are the X-Remote-User
//     and X-Remote-Group headers the user.
//  5. [Registrar.Unregister] removes the APIService and the ExternalName
//     Service.
//
// # The local plane
//
// The plane (package devcluster) runs kube-apiserver with the aggregation
// layer configured and --enable-aggregator-routing off. The aggregator
// then resolves an APIService's Service of type ExternalName to
// externalName:port (k8s.io/apiserver's proxy.ResolveCluster), with the
// APIService's port: a server on 127.0.0.1 is reached without a cluster
// network, as admission webhooks are reached at their url.
//
// # Guarantees
//
//   - Register is a server-side apply with field manager "opkit": it
//     creates or updates, and many replicas applying the same registration
//     agree.
//   - The API server keeps serving every other resource while the
//     aggregated server is down; the APIService reports Available=False
//     within about 30s (the aggregator's check period) and requests for
//     its group fail with 503.
//
// # Caveats
//
//   - A RequestHeader is a snapshot of the ConfigMap: a server that runs
//     for long reads it again (the CA rotates with the API server's).
//   - The server's service account needs to read the ConfigMap: the Role
//     extension-apiserver-authentication-reader in kube-system, bound to
//     it, grants that.
//   - On the local plane the Service is Register's own: a Service of that
//     name and another type, made by someone else, is not supported.
package aggregate
