package devnode

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// Taint is the key of the dev node's label and NoSchedule taint.
const Taint = "opkit.dev/dev-node"

// DefaultName is the dev node's name unless Options.Name says otherwise.
const DefaultName = "opkit-dev-node"

// leaseDuration is how long the node's Lease is valid; it is renewed every
// quarter of that, as a kubelet does.
const leaseDuration = 40 * time.Second

// Options configures [Start].
type Options struct {
	// Name of the Node. Defaults to DefaultName. The client must be
	// authenticated as system:node:<Name> in group system:nodes.
	Name string
	// Config is the node's client configuration. Required.
	Config *rest.Config
	// Dir holds one directory per Pod: its volumes, root and logs. Required.
	Dir string
	// ServingCert and ServingKey are the PEM files of the kubelet API's TLS
	// certificate, valid for 127.0.0.1. Required.
	ServingCert, ServingKey string
	// ClientCA is the PEM file of the CA that signs the API server's client
	// certificate. Required.
	ClientCA string
	// AllowedClients are the certificate common names allowed on the kubelet
	// API. Defaults to "kube-apiserver-kubelet-client".
	AllowedClients []string
	// Port is the kubelet API's port on 127.0.0.1. Defaults to a free port.
	Port int
	// ProxyPort is the port of the node's proxy to Services (ServiceProxy)
	// on 127.0.0.1, which the plane may have given kube-apiserver before
	// the node starts. Defaults to a free port.
	ProxyPort int
	// Version is reported as the node's kubelet version. Defaults to "v0.0.0".
	Version string
	// Log receives one line per notable event. Defaults to io.Discard.
	Log io.Writer
	// PodIP is the address every Pod of the node reports as its own
	// (status.podIP). Defaults to the host's first global IPv4 address
	// ([HostAddress]), else 127.0.0.1.
	PodIP string
	// Opkit is the opkit binary that a container of opkit's own image
	// (OpkitImage, any tag) runs, as the image would run its /opkit.
	// Defaults to the running executable when it is opkit (opkit dev,
	// opkit cluster start); none otherwise (a Go test), and such a
	// container runs its command on the host as any other. A test gives
	// it through devcluster.Options.Opkit.
	Opkit string
}

// Node is a running dev node.
type Node struct {
	opts   Options
	client kubernetes.Interface
	port   int
	cancel context.CancelFunc
	done   sync.WaitGroup
	server *kubeletServer
	proxy  *serviceProxy

	mu      sync.Mutex
	workers map[types.UID]*podWorker
}

// Start registers the node, starts its kubelet API and begins running the
// Pods bound to it. Stop ends all of that and kills every container process.
func Start(ctx context.Context, opts Options) (*Node, error) {
	if opts.Name == "" {
		opts.Name = DefaultName
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	if opts.Version == "" {
		opts.Version = "v0.0.0"
	}
	if opts.Opkit == "" {
		opts.Opkit = opkitExecutable()
	}
	if opts.PodIP == "" {
		opts.PodIP = HostAddress()
	}
	if len(opts.AllowedClients) == 0 {
		opts.AllowedClients = []string{"kube-apiserver-kubelet-client"}
	}
	if opts.Config == nil || opts.Dir == "" || opts.ServingCert == "" || opts.ServingKey == "" || opts.ClientCA == "" {
		return nil, fmt.Errorf("devnode: Config, Dir, ServingCert, ServingKey and ClientCA are required")
	}
	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, err
	}
	cfg := rest.CopyConfig(opts.Config)
	cfg.UserAgent = "opkit-dev-node"
	cfg.QPS = -1 // the API server's priority and fairness protects it; a throttled dev node is a slow one
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	n := &Node{opts: opts, client: client, workers: map[types.UID]*podWorker{}}

	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(opts.Port)))
	if err != nil {
		return nil, fmt.Errorf("dev node: kubelet API port: %w", err)
	}
	n.port = ln.Addr().(*net.TCPAddr).Port
	if n.server, err = newKubeletServer(n, ln); err != nil {
		ln.Close()
		return nil, err
	}
	if n.proxy, err = startServiceProxy(client, opts.ProxyPort); err != nil {
		n.server.close()
		return nil, err
	}
	if err := n.register(ctx); err != nil {
		n.server.close()
		n.proxy.close()
		return nil, err
	}

	runCtx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	n.done.Add(1)
	go func() { defer n.done.Done(); n.heartbeat(runCtx) }()

	factory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", opts.Name).String()
		}))
	podInformer := factory.Core().V1().Pods().Informer()
	_, _ = podInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { n.podChanged(runCtx, obj) },
		UpdateFunc: func(_, obj any) { n.podChanged(runCtx, obj) },
		DeleteFunc: func(obj any) { n.podGone(obj) },
	})
	cluster := informers.NewSharedInformerFactory(client, 0)
	n.provisionClaims(runCtx, cluster)
	factory.Start(runCtx.Done())
	cluster.Start(runCtx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), podInformer.HasSynced) {
		n.Stop()
		return nil, fmt.Errorf("dev node: waiting for the pod informer: %w", context.Cause(ctx))
	}
	n.done.Add(1)
	go func() { defer n.done.Done(); <-runCtx.Done(); factory.Shutdown(); cluster.Shutdown() }()
	fmt.Fprintf(opts.Log, "dev node %s ready (kubelet API on 127.0.0.1:%d)\n", opts.Name, n.port)
	return n, nil
}

// Port returns the kubelet API's port.
func (n *Node) Port() int { return n.port }

// podIP is the address of every Pod of the node.
func (n *Node) podIP() string {
	if n.opts.PodIP == "" {
		return "127.0.0.1"
	}
	return n.opts.PodIP
}

// HostAddress is the address the dev node's Pods report as theirs: the
// host's first global unicast IPv4 address, else 127.0.0.1. Not loopback
// when it can be, because an EndpointSlice refuses loopback addresses:
// with it, the endpoints controller makes the EndpointSlices of a Service
// that selects the node's Pods, and an engine writes its Pod's address to
// the hooks' EndpointSlice, as in a cluster. A server of a Pod that binds
// every address (":7382") is reached there; one bound to 127.0.0.1 is
// not, as in a cluster.
func HostAddress() string {
	ifaces, err := net.Interfaces()
	if err != nil {
		return "127.0.0.1"
	}
	for _, iface := range ifaces {
		if iface.Flags&net.FlagUp == 0 || iface.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, err := iface.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && ipn.IP.IsGlobalUnicast() {
				return ipn.IP.String()
			}
		}
	}
	return "127.0.0.1"
}

// ServiceProxy is the URL of the node's HTTP proxy, which its containers
// get as HTTP_PROXY and HTTPS_PROXY: it resolves NAME.NAMESPACE.svc to a
// ready endpoint of the Service, as a cluster's DNS and kube-proxy do.
func (n *Node) ServiceProxy() string { return n.proxy.url() }

// Name returns the Node's name.
func (n *Node) Name() string { return n.opts.Name }

// Stop kills every container process (SIGTERM, then SIGKILL after 2s) and
// stops the node. The Node object and the Pods stay in the API.
func (n *Node) Stop() {
	if n.cancel != nil {
		n.cancel()
	}
	n.mu.Lock()
	workers := make([]*podWorker, 0, len(n.workers))
	for _, w := range n.workers {
		workers = append(workers, w)
	}
	n.mu.Unlock()
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Add(1)
		go func() { defer wg.Done(); w.shutdown(2 * time.Second) }()
	}
	wg.Wait()
	n.server.close()
	n.proxy.close()
	n.done.Wait()
}

func (n *Node) podChanged(ctx context.Context, obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	n.mu.Lock()
	w, ok := n.workers[pod.UID]
	if !ok {
		if pod.DeletionTimestamp == nil && (pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed) {
			// Finished before this node started: nothing to run.
			n.mu.Unlock()
			return
		}
		w = newPodWorker(n, pod)
		n.workers[pod.UID] = w
		go func() {
			w.run(ctx)
			n.mu.Lock()
			delete(n.workers, pod.UID)
			n.mu.Unlock()
		}()
	}
	n.mu.Unlock()
	w.update(pod)
}

func (n *Node) podGone(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	n.mu.Lock()
	w := n.workers[pod.UID]
	n.mu.Unlock()
	if w != nil {
		w.removed()
	}
}

// worker returns the worker of a pod by namespace and name, for the kubelet
// API.
func (n *Node) worker(namespace, name string) *podWorker {
	n.mu.Lock()
	defer n.mu.Unlock()
	var found *podWorker
	for _, w := range n.workers {
		if w.namespace == namespace && w.name == name {
			// A re-created pod of the same name: the newest wins.
			if found == nil || w.created.After(found.created) {
				found = w
			}
		}
	}
	return found
}

// register creates or updates the Node and reports it Ready.
func (n *Node) register(ctx context.Context) error {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: n.opts.Name,
			Labels: map[string]string{
				Taint:                    "true",
				"kubernetes.io/hostname": n.opts.Name,
				"kubernetes.io/os":       runtime.GOOS,
				"kubernetes.io/arch":     runtime.GOARCH,
			},
		},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: Taint, Value: "true", Effect: corev1.TaintEffectNoSchedule}}},
	}
	_, err := n.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("dev node: registering Node %s: %w", n.opts.Name, err)
	}
	return n.updateStatus(ctx)
}

// updateStatus reports the node's status with a strategic merge patch of
// the status subresource: conditions and addresses merge by type, so what
// other controllers write to the Node (the node lifecycle controller's
// taints and conditions) is kept, and a concurrent write is no conflict.
// A condition keeps its lastTransitionTime while its status holds.
func (n *Node) updateStatus(ctx context.Context) error {
	node, err := n.client.CoreV1().Nodes().Get(ctx, n.opts.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("dev node: reading Node %s: %w", n.opts.Name, err)
	}
	now := metav1.Now()
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:              *resource.NewQuantity(int64(runtime.NumCPU()), resource.DecimalSI),
		corev1.ResourceMemory:           *resource.NewQuantity(hostMemory(), resource.BinarySI),
		corev1.ResourcePods:             *resource.NewQuantity(250, resource.DecimalSI),
		corev1.ResourceEphemeralStorage: resource.MustParse("100Gi"),
	}
	cond := func(t corev1.NodeConditionType, s corev1.ConditionStatus, reason, msg string) corev1.NodeCondition {
		since := now
		for _, c := range node.Status.Conditions {
			if c.Type == t && c.Status == s && !c.LastTransitionTime.IsZero() {
				since = c.LastTransitionTime
			}
		}
		return corev1.NodeCondition{Type: t, Status: s, Reason: reason, Message: msg, LastHeartbeatTime: now, LastTransitionTime: since}
	}
	status := corev1.NodeStatus{
		Capacity:    capacity,
		Allocatable: capacity,
		Conditions: []corev1.NodeCondition{
			cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "dev node"),
			cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "dev node"),
			cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "dev node"),
			cond(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "opkit dev node: runs pod commands as local processes"),
		},
		Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: "127.0.0.1"},
			{Type: corev1.NodeHostName, Address: n.opts.Name},
		},
		DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: int32(n.port)}},
		NodeInfo: corev1.NodeSystemInfo{
			KubeletVersion:          n.opts.Version,
			OperatingSystem:         runtime.GOOS,
			Architecture:            runtime.GOARCH,
			ContainerRuntimeVersion: "opkit-devnode://" + n.opts.Version,
			OSImage:                 "opkit dev node (host processes)",
		},
	}
	patch, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return err
	}
	if _, err := n.client.CoreV1().Nodes().PatchStatus(ctx, n.opts.Name, patch); err != nil {
		return fmt.Errorf("dev node: reporting Node status: %w", err)
	}
	return nil
}

// heartbeat renews the node's Lease every 10s and its status every 5m, the
// kubelet's defaults, so that the node lifecycle controller keeps it Ready.
func (n *Node) heartbeat(ctx context.Context) {
	leases := n.client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	statusEvery := 5 * time.Minute
	lastStatus := time.Now()
	for {
		now := metav1.NewMicroTime(time.Now())
		lease, err := leases.Get(ctx, n.opts.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			_, err = leases.Create(ctx, &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: n.opts.Name, Namespace: corev1.NamespaceNodeLease},
				Spec: coordinationv1.LeaseSpec{
					HolderIdentity:       ptr.To(n.opts.Name),
					LeaseDurationSeconds: ptr.To(int32(leaseDuration / time.Second)),
					RenewTime:            &now,
				},
			}, metav1.CreateOptions{})
		case err == nil:
			lease.Spec.RenewTime = &now
			_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
		}
		if err != nil && ctx.Err() == nil {
			fmt.Fprintf(n.opts.Log, "dev node: renewing lease: %v\n", err)
		}
		if time.Since(lastStatus) >= statusEvery {
			if err := n.updateStatus(ctx); err != nil && ctx.Err() == nil {
				fmt.Fprintln(n.opts.Log, err)
			}
			lastStatus = time.Now()
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(leaseDuration / 4):
		}
	}
}

func hostMemory() int64 {
	var info syscall.Sysinfo_t
	if err := syscall.Sysinfo(&info); err != nil || info.Totalram == 0 {
		return 8 << 30
	}
	return int64(info.Totalram) * int64(info.Unit)
}
