package devcluster

// The versions of the control plane that devcluster builds and runs. The
// k8s.io client libraries in go.mod are at this Kubernetes minor or one above
// it (version_test.go guards that); etcd's version is the one
// k8s.io/kubernetes itself requires.
const (
	// KubernetesVersion is the version of kube-apiserver,
	// kube-controller-manager, kube-scheduler and kubectl.
	KubernetesVersion = "v1.36.4"
	// EtcdVersion is the version of etcd.
	EtcdVersion = "v3.6.8"
)
