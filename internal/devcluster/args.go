package devcluster

import (
	"path/filepath"
	"strconv"

	"github.com/opkit-dev/opkit/internal/devcluster/devnode"
)

// The flags each component of the plane is started with.

// etcdArgs are etcd's URL for clients and its flags.
func (c *Cluster) etcdArgs(p pki) (string, []string) {
	etcdURL := "https://127.0.0.1:" + strconv.Itoa(c.ports["etcd"])
	peerURL := "http://127.0.0.1:" + strconv.Itoa(c.ports["etcd-peer"])
	etcdArgs := []string{
		"--name=opkit", "--data-dir=" + filepath.Join(c.dataDir, "etcd"),
		"--listen-client-urls=" + etcdURL, "--advertise-client-urls=" + etcdURL,
		"--listen-peer-urls=" + peerURL, "--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=opkit=" + peerURL,
		"--cert-file=" + p.cert("etcd-server"), "--key-file=" + p.key("etcd-server"),
		"--trusted-ca-file=" + p.cert("ca"), "--client-cert-auth",
		"--log-level=warn",
	}
	if c.tempData {
		etcdArgs = append(etcdArgs, "--unsafe-no-fsync")
	}
	return etcdURL, etcdArgs
}

// apiServerArgs are kube-apiserver's flags, etcd at etcdURL.
func (c *Cluster) apiServerArgs(p pki, etcdURL string) []string {
	apiArgs := []string{
		"--advertise-address=127.0.0.1", "--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(c.ports["kube-apiserver"]),
		"--etcd-servers=" + etcdURL,
		"--etcd-cafile=" + p.cert("ca"), "--etcd-certfile=" + p.cert("apiserver-etcd-client"), "--etcd-keyfile=" + p.key("apiserver-etcd-client"),
		"--tls-cert-file=" + p.cert("apiserver"), "--tls-private-key-file=" + p.key("apiserver"),
		"--client-ca-file=" + p.cert("ca"),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + p.path("sa.pub"),
		"--service-account-signing-key-file=" + p.path("sa.key"),
		"--service-cluster-ip-range=" + serviceCIDR,
		"--authorization-mode=Node,RBAC",
		// The "kubernetes" Service cannot have a loopback endpoint; without
		// this the apiserver retries an invalid write every 10s, forever.
		"--endpoint-reconciler-type=none",
		"--allow-privileged=false",
		// How `kubectl logs` reaches the dev node's kubelet API.
		"--kubelet-client-certificate=" + p.cert("apiserver-kubelet-client"),
		"--kubelet-client-key=" + p.key("apiserver-kubelet-client"),
		"--kubelet-certificate-authority=" + p.cert("ca"),
		"--kubelet-preferred-address-types=InternalIP",
		"--profiling=false",
		// The aggregation layer: kube-apiserver proxies an APIService's
		// requests with the front-proxy client certificate and names the
		// user in these headers; it publishes the CA and the names in
		// kube-system/extension-apiserver-authentication for aggregated
		// servers to verify them. --enable-aggregator-routing stays off,
		// so that an APIService's Service of type ExternalName is reached
		// at its externalName (a server on this host: 127.0.0.1), with no
		// cluster network.
		"--requestheader-client-ca-file=" + p.cert("front-proxy-ca"),
		"--requestheader-allowed-names=" + frontProxyClientCN,
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + p.cert("front-proxy-client"),
		"--proxy-client-key-file=" + p.key("front-proxy-client"),
	}
	if c.opts.Lean {
		apiArgs = append(apiArgs, "--enable-priority-and-fairness=false")
	}
	apiArgs = append(apiArgs, c.opts.APIServerFlags...)
	return apiArgs
}

// apiServerEnv sends kube-apiserver's connections to Services through the
// dev node's proxy, which resolves a Service's ClusterIP (or name) to a
// ready endpoint as kube-proxy would: the aggregation layer dials an
// APIService's Service at its ClusterIP (a runs API in a Pod, as the
// generated manifests make it), and no ClusterIP routes on this host.
// Loopback is dialed as it is (etcd, the kubelet API, an ExternalName
// Service's 127.0.0.1), as is the Pods' address (HostAddress). Without a
// dev node, none: there are no Pods to reach.
func (c *Cluster) apiServerEnv() []string {
	if !c.opts.DevNode {
		return nil
	}
	proxy := "http://127.0.0.1:" + strconv.Itoa(c.ports["dev-node-proxy"])
	noProxy := "127.0.0.1,localhost,::1," + devnode.HostAddress()
	return []string{"HTTPS_PROXY=" + proxy, "HTTP_PROXY=" + proxy, "NO_PROXY=" + noProxy,
		"https_proxy=" + proxy, "http_proxy=" + proxy, "no_proxy=" + noProxy}
}

// controllersFlag is kube-controller-manager's --controllers: every
// controller on by default, less LeanOffControllers for a lean plane.
func controllersFlag(lean bool) string {
	list := "*"
	if lean {
		for _, name := range LeanOffControllers {
			list += ",-" + name
		}
	}
	return "--controllers=" + list
}

// componentArgs are the flags kube-controller-manager and kube-scheduler
// share: their identity, loopback serving with the plane's CA, no leader
// election.
func componentArgs(p pki, kubeconfig string, port int) []string {
	return []string{
		"--kubeconfig=" + kubeconfig,
		"--authentication-kubeconfig=" + kubeconfig,
		"--authorization-kubeconfig=" + kubeconfig,
		"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(port),
		"--tls-cert-file=" + p.cert("loopback-serving"), "--tls-private-key-file=" + p.key("loopback-serving"),
		"--client-ca-file=" + p.cert("ca"),
		"--leader-elect=false",
		"--profiling=false",
	}
}
