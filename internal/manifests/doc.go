// Package manifests computes what installs the engine in a cluster for
// some compiled definitions: its RBAC rules, and the objects (or the Helm
// chart's values) that run it. opkit generate manifests and opkit generate
// values print them; the chart deploy/helm/opkit renders the same objects
// from the values.
//
// # Rules
//
// [ComputeRules] grants what the engine does for the definitions, read
// from what it calls, and nothing else; never a wildcard. Each [Rule]
// carries why it is there. A verb needed on one object by name is granted
// by resourceNames (a CRD the engine installs; a Secret a handler or a
// source reads; a ServiceAccount whose tokens an exec handler gets; a
// Lease); one needed in known namespaces by a Role there (the namespaces
// a watch names; a job handler's namespace); anything else by the
// ClusterRole. What the engine calls, and so what is granted:
//
//   - every engine: list and watch of CRDs (it re-installs a running
//     operator's CRD that someone deletes), and create and patch of Events
//     (events.k8s.io);
//   - Operators from the cluster ([FromCluster]): the Operator CRD by name,
//     get, list and watch of Operators, patch of their status;
//   - an operator that owns a custom resource: get, create and patch of
//     its CRD by name (server-side apply, which authorizes a create with
//     the object's name: unlike a POST, it can be limited by
//     resourceNames); list and watch of its objects, patch of their
//     status, patch of the objects with handlers (the retry annotation) or
//     delete handlers (the finalizer), create and patch with a source that
//     applies objects; update of their finalizers subresource with
//     children (their ownerReferences set blockOwnerDeletion, which the
//     OwnerReferencesPermissionEnforcement admission plugin checks); the
//     children's kinds: get, list, watch, create, patch, delete in every
//     namespace (the engine's cache watches them everywhere); the related
//     kinds: list and watch, in every namespace (as the engine checks);
//   - a watch: get, list and watch of the kind where it watches, and patch
//     with its finalizer; get of namespace kube-system (the cluster's id);
//   - SelfSubjectAccessReviews, with related objects or a watch (the
//     engine checks its access before it starts one);
//   - handlers: get of the Secrets an exec handler's env or an http
//     handler's tokenSecret names; create of serviceaccounts/token for an
//     exec handler's serviceAccount; for a job handler, in its Jobs'
//     namespace, Jobs (create, get, watch, delete), ConfigMaps (create,
//     delete), Pods (list) and pods/log (get) — its env's Secrets are the
//     kubelet's to read, not the engine's;
//   - sources: get of the Secret of their shared secret;
//   - leader election: the Lease by name (get, update), create of Leases,
//     and core Events in the engine's namespace;
//   - admission finalizers: the operators' MutatingAdmissionPolicies and
//     bindings by name;
//   - the console: get and list of Operators, list of core Events, get and
//     patch of the custom resources, and with Kubernetes auth create of
//     TokenReviews and SubjectAccessReviews.
//   - the runs API (Options.RunsAPI): get and patch of its APIService
//     RunsAPIName by name (its caBundle; never create nor delete: the
//     manifests make it, and an uninstall must not see an engine that is
//     still stopping make it again), get and update of the Secret of its
//     certificates by name; and, as every aggregated API server, the
//     ClusterRoles system:auth-delegator (SubjectAccessReviews) and, in
//     kube-system, the Role extension-apiserver-authentication-reader,
//     bound rather than copied, which Kubernetes keeps current.
//   - runners (an exec handler that names exec.image): create of
//     TokenReviews (each runner's token), get and update of the Secret
//     RunnersTLSSecret and the ConfigMap RunnersCA by name, which the
//     manifests make empty. The runners' ServiceAccounts get nothing.
//
// A kind that is neither built in nor one of the definitions' resources
// is mapped to its resource by the plural Kubernetes tools guess, with a
// warning. The engine also reads discovery, /openapi/v3 and /readyz, which
// every authenticated user may (system:discovery, system:public-info-viewer).
//
// # Objects
//
// [Manifests.Objects] are the Namespace, the Operator CRD and the
// Operators (or a ConfigMap of the definitions, [FromFiles]), a
// ServiceAccount, the ClusterRole and Roles with their bindings, a
// Deployment with restricted pod security (non-root 65532, read-only root,
// no capabilities, RuntimeDefault seccomp), probes on /healthz and
// /readyz, and leader election and anti-affinity with more than one
// replica, a Service, and a PodDisruptionBudget with more than one
// replica. The console is served only with authentication. With
// Options.RunsAPI, the runs API's Service (every replica serves reads),
// the Secret of its certificates and its APIService, both made without
// what the engine fills, and the ClusterRole RunsViewerRole, aggregated
// into the built-in view, edit and admin.
//
// # Runners
//
// An operator whose exec handlers name exec.image gets, per image, a
// runner Deployment ([RunnerName]): an init container of the engine's
// image copies opkit into an emptyDir, and the handler's image runs it
// as opkit agent run, with the operator's directory (the definition
// file's, in the ConfigMap [FilesConfigMap], at most [MaxFilesSize];
// hidden files, symbolic links and what looks like a credential left
// out with a warning), the engine's CA and a projected token of
// [RunnerAudience] for its ServiceAccount ([RunnerServiceAccount]),
// which has no rights. The Pod template carries the files' hash
// ([FilesHashAnnotation]), so a changed script rolls the runners. An
// exec handler without an image is refused, naming it, unless
// Options.AllowHostExec. Images are named by version ([ImageTag]),
// never latest.
//
// The Deployment uses the Recreate strategy: never two engines at once
// without leader election, and with it an update stops the old replicas
// (the leader releasing its Lease) before it starts the new ones. A
// standby is ready, so the PodDisruptionBudget lets one replica at a time
// be evicted, the leader included (docs/production.md).
package manifests
