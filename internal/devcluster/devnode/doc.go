// Package devnode is a Kubernetes node without a container runtime, for the
// local control plane: it registers a Node, and runs each container of each
// Pod bound to it as a local process of the host, with the image ignored.
// It exists so that Pods, Jobs and `kubectl logs` work in development and
// tests on machines without Docker or containerd.
//
// # It runs pod commands on the host
//
// A container's command and args are executed as they are, as the user that
// runs the node, with the host's file system, network and programs. There is
// no isolation of any kind. The node is therefore only started by the local
// control plane (package devcluster: `opkit dev`, `opkit cluster start`,
// `opkit test` and Go tests), listens on loopback only, and is never started
// by `opkit run`. To keep Pods from landing on it by accident it carries the
// label and the NoSchedule taint [Taint] (opkit.dev/dev-node); a Pod runs
// on it only if it tolerates the taint:
//
//	tolerations:
//	- {key: opkit.dev/dev-node, operator: Exists, effect: NoSchedule}
//
// # What a container sees
//
//   - Its command is looked up in PATH (the container's env, else the
//     host's); a container without a command cannot run, since images are
//     ignored, and is reported with reason StartError.
//   - But for opkit's own image ([OpkitImage], any tag): its binary
//     (command /opkit or opkit, or none, the image's entrypoint) is the
//     node's opkit ([Options].Opkit). And a command that is an absolute
//     path under one of the container's mounts (/opkit/bin/opkit, copied
//     there by an init container of opkit's image, as runners do) runs
//     from under the pod's root, as mounts are, when it is there. Such a program speaks of
//     the pod's paths: its arguments that are absolute paths under a
//     mount, alone or as --flag=PATH, are mapped under the pod's root.
//   - Env: value (with $(VAR) expansion, as a kubelet does), fieldRef
//     (metadata.name, metadata.namespace, metadata.uid, metadata.labels['k'],
//     metadata.annotations['k'], spec.nodeName, spec.serviceAccountName,
//     status.podIP, status.hostIP), configMapKeyRef, secretKeyRef, and envFrom.
//   - Paths of the pod spec are rewritten under a per-pod root directory,
//     given to every process as $OPKIT_POD_ROOT: a volume mounted at
//     /etc/config is the directory $OPKIT_POD_ROOT/etc/config, and the
//     termination message is read from $OPKIT_POD_ROOT/dev/termination-log.
//     Each mount is also in $OPKIT_MOUNT_<VOLUME> (the volume name upper-cased,
//     non-alphanumerics as _). ConfigMap, Secret, emptyDir, hostPath,
//     persistentVolumeClaim, downwardAPI and projected volumes are
//     supported: a claim of no storage class is bound to a volume the
//     node makes, a directory that outlives the claim's Pods and goes
//     with the claim (claims.go); with projected
//     serviceAccountToken sources (a TokenRequest for the Pod with the
//     audience and expiry given, written as the file at the path).
//   - Services by name: every container gets HTTP_PROXY and HTTPS_PROXY
//     (NO_PROXY: loopback), the node's proxy ([Node.ServiceProxy]), which
//     resolves NAME.NAMESPACE.svc(.cluster.local) to a ready endpoint of
//     the Service's EndpointSlices and dials any other host as it is. A
//     Pod's address (status.podIP) is the host's ([HostAddress]), since
//     an EndpointSlice refuses loopback ones.
//   - The API server as the Pod's ServiceAccount: a container that mounts
//     its token (/var/run/secrets/kubernetes.io/serviceaccount) gets
//     $KUBECONFIG, a kubeconfig naming that token file under the pod's
//     root, the API server and the Pod's namespace. Projected tokens are
//     renewed at 80% of their life, as a kubelet does.
//   - A program of the pod's world (above) also has its env values that
//     the spec gives literally as absolute paths under a mount mapped
//     under the pod's root (OPKIT_ARCHIVE=/var/lib/opkit/runs.db).
//   - workingDir is used as is if it exists on the host, else it is made
//     under $OPKIT_POD_ROOT; without one, the process starts in
//     $OPKIT_POD_ROOT.
//
// # Lifecycle, as a kubelet reports it
//
// Init containers run first, in order; then the containers together.
// restartPolicy is honoured with the kubelet's back-off (10s doubling to 5m).
// Container states carry exit codes, reasons (Completed, Error, StartError,
// CrashLoopBackOff, CreateContainerConfigError) and the termination message;
// the pod phase goes Pending, Running, then Succeeded or Failed. A Pod being
// deleted has its process groups sent SIGTERM, then SIGKILL after its grace
// period, and is then removed. Each container process runs in its own
// process group with a parent-death signal: if the node's process dies,
// even by SIGKILL, the kernel kills them.
//
// Logs (stdout and stderr interleaved) are kept per container and restart,
// and served on the kubelet API paths over TLS, so `kubectl logs` works
// through kube-apiserver, with -f, --previous, --tail and --limit-bytes.
//
// Probes, resource limits, image pulls, port forwarding, exec and attach are
// not supported.
package devnode
