// Package devcluster runs a local Kubernetes control plane — etcd,
// kube-apiserver, kube-controller-manager and kube-scheduler — as child
// processes on loopback, for development and tests. It needs no container
// runtime and downloads no prebuilt binary.
//
// # Binaries
//
// The binaries are built from their Go modules at one pinned version
// ([KubernetesVersion], [EtcdVersion]) with the local Go toolchain, and cached
// under [DefaultCacheDir] in a directory per version. k8s.io/kubernetes cannot
// be installed with `go install`: it is built from a generated wrapper module
// that requires it and replaces each of its staging modules (k8s.io/api,
// k8s.io/apiserver, ...) with the matching v0.MINOR.PATCH release. A SHA256SUMS
// file records each binary's checksum; [Cache.Ensure] verifies it on every use
// and rebuilds only what is missing or corrupt. A cold build takes about five
// minutes on two cores; concurrent callers (for example parallel test
// packages) wait on a file lock and share the result.
//
// # Guarantees
//
//   - Everything listens on 127.0.0.1 only. etcd and kube-apiserver serve TLS
//     with certificates from a CA generated per data directory; clients
//     authenticate with client certificates and are authorized by RBAC.
//   - [Start] returns once kube-apiserver answers /readyz, the controller
//     manager and scheduler answer /healthz, and the "default" service
//     account exists, or returns an error after stopping whatever it started.
//   - Every component runs in its own process group with a parent-death
//     signal: if the process that started the plane dies, even by SIGKILL,
//     the kernel kills the components. [Cluster.Stop] sends SIGTERM to each
//     group, then SIGKILL after a grace period.
//   - kube-apiserver's aggregation layer is configured: a front-proxy CA
//     of its own signs the client certificate (CN front-proxy-client) the
//     aggregator proxies with, published with the requestheader flags in
//     kube-system/extension-apiserver-authentication. Aggregator routing
//     is off, so an APIService's Service of type ExternalName is dialed at
//     its externalName: a server on the host (127.0.0.1) serves an API.
//     With a dev node, kube-apiserver's HTTPS_PROXY is the node's proxy to
//     Services, which resolves a ClusterIP (and a Service's name) to a
//     ready endpoint: an APIService or a webhook whose Service selects a
//     Pod of the dev node is reached as in a cluster. Loopback and the
//     Pods' address are dialed directly.
//     A data directory made before gets the CA and the certificate at its
//     next start; what it holds is kept.
//   - A port that is asked for and already taken is reported before any
//     process starts.
//   - The data directory is private (0700, made so when it is given) and
//     names the process that runs the plane (owner.go). A second Start on
//     a directory that a live process's plane uses is refused. A
//     temporary data directory left by a process killed before its Stop
//     is removed by the next Start; one whose process lives, and a kept
//     one, never are.
//
// # Dev node
//
// With [Options.DevNode], the plane also has a node (package devnode) that
// runs the commands of Pods bound to it as processes of this host, and serves
// their logs to `kubectl logs`. It carries a NoSchedule taint, so only Pods
// that tolerate opkit.dev/dev-node land on it; other Pods stay Pending.
//
// # Caveats
//
// The plane is meant for development and tests only; etcd skips fsync when
// its data directory is temporary.
package devcluster
