package devcluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/opkit-dev/opkit/internal/devcluster/devnode"
)

// ErrPortInUse is returned (wrapped) when a port given in [Options] is
// already taken.
var ErrPortInUse = errors.New("port already in use")

// serviceIP is the ClusterIP of the "kubernetes" Service, the first address
// of the service range.
const (
	serviceCIDR = "10.96.0.0/16"
	serviceIP   = "10.96.0.1"
)

// DefaultStartTimeout is how long Start waits for the plane to be ready
// unless Options.StartTimeout says otherwise: about 11 s on a quiet 2-core
// machine, over a minute on a loaded one, so that only a plane that will
// not start fails.
const DefaultStartTimeout = 3 * time.Minute

// LeanOffControllers are the kube-controller-manager controllers that a
// plane started with Options.Lean leaves out: together with API Priority
// and Fairness off, a plane's start and its first 30 s took some 4.4 s of
// CPU instead of 5.5 (2 cores, 2026-12-03).
var LeanOffControllers = []string{
	"resourcequota-controller",
	"horizontal-pod-autoscaler-controller",
	"disruption-controller",
	"persistentvolume-attach-detach-controller",
	"persistentvolume-expander-controller",
	"certificatesigningrequest-signing-controller",
	"certificatesigningrequest-approving-controller",
	"certificatesigningrequest-cleaner-controller",
	"validatingadmissionpolicy-status-controller",
	"storageversion-garbage-collector-controller",
	"legacy-serviceaccount-token-cleaner-controller",
	"ttl-controller",
}

// leanEnv, set to 1, starts every plane lean (Options.Lean).
const leanEnv = "OPKIT_PLANE_LEAN"

// Options configures [Start].
type Options struct {
	// DataDir holds etcd's data, the certificates, kubeconfigs and component
	// logs. Defaults to a new temporary directory that Stop removes; a
	// directory given here is kept, and a later Start on it resumes its state.
	DataDir string
	// CacheDir is the binary cache root. Defaults to DefaultCacheDir().
	CacheDir string
	// APIServerPort is kube-apiserver's port on 127.0.0.1. Defaults to a free
	// port.
	APIServerPort int
	// EtcdPort is etcd's client port on 127.0.0.1. Defaults to a free port.
	EtcdPort int
	// APIServerFlags are appended to kube-apiserver's flags. Defaults to none.
	APIServerFlags []string
	// DevNode starts a dev node (package devnode) in this process: Pods that
	// tolerate its taint are bound to it and their commands run as processes
	// of this host. Only for development and tests. Defaults to false.
	DevNode bool
	// Opkit is the dev node's opkit binary, which runs the containers of
	// opkit's own image (devnode.Options.Opkit). Defaults to the running
	// executable when it is opkit.
	Opkit string
	// StartTimeout bounds the wait for readiness, builds excluded. Defaults
	// to DefaultStartTimeout.
	StartTimeout time.Duration
	// StopGrace is how long each component gets between SIGTERM and SIGKILL.
	// Defaults to 10s.
	StopGrace time.Duration
	// Log receives progress lines (builds, starts). Defaults to io.Discard.
	Log io.Writer
	// Lean starts a plane for tests, which start many: API Priority and
	// Fairness off (its bootstrap configuration and controller were a
	// fifth of a plane's start CPU; a test's plane has one client that
	// matters, and kube-apiserver's limit of requests in flight still
	// holds), and kube-controller-manager without the controllers in
	// LeanOffControllers, which act on what an operator's test does not
	// have (metrics, volumes to attach, certificate requests, quotas,
	// disruption budgets). Defaults to false, unless OPKIT_PLANE_LEAN=1
	// is in the environment (make test sets it, for every plane its
	// tests start, through whichever command): a plane to develop on
	// (opkit dev, opkit cluster start) and the bench's have every
	// controller and APF.
	Lean bool
	// BeforeControllers, when set, is called once kube-apiserver is ready
	// and before kube-controller-manager starts, with an admin
	// configuration; an error stops the start. What it installs is known
	// to the controllers from their start: the garbage collector learns a
	// CRD installed later only at its next discovery, every 30s (opkit
	// test installs its scenarios' CRDs here).
	BeforeControllers func(ctx context.Context, cfg *rest.Config) error
}

// Component describes one running process of the plane.
type Component struct {
	Name    string
	Pid     int
	Port    int
	LogPath string
}

// Cluster is a running local control plane.
type Cluster struct {
	opts       Options
	dataDir    string
	tempData   bool
	endpoint   string
	kubeconfig string
	rest       *rest.Config
	procs      []*process
	ports      map[string]int
	ready      time.Duration
	node       *devnode.Node

	stopOnce sync.Once
	done     chan struct{} // closed when a component exits unexpectedly or Stop was called
	errMu    sync.Mutex
	err      error
}

// Start builds the binaries if needed, starts etcd, kube-apiserver,
// kube-controller-manager and kube-scheduler on loopback and returns once the
// plane is ready. On error nothing it started is left running. A machine
// starts one plane at a time a two cores, whatever process starts it: a
// Start first waits, until ctx ends, for other planes' starts to end
// (startslot.go); Options.StartTimeout counts from then.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = DefaultStartTimeout
	}
	if opts.StopGrace == 0 {
		opts.StopGrace = 10 * time.Second
	}
	if os.Getenv(leanEnv) == "1" {
		opts.Lean = true
	}
	// A free port is found by binding it and letting it go; another process
	// can take it before the component binds it. Such a lost race is retried
	// with new ports, a few times.
	// What a plane killed by SIGKILL left: its Stop did not run.
	removeStale(opts.Log)
	// One start at a time a two cores, machine-wide (startslot.go).
	slot, err := takeStartSlot(ctx, opts.Log)
	if err != nil {
		return nil, err
	}
	defer slot.release()
	for attempt := 1; ; attempt++ {
		c, err := startOnce(ctx, opts)
		if err == nil || attempt == 3 || !lostPortRace(err) {
			return c, err
		}
		fmt.Fprintf(opts.Log, "a port was taken while starting (%v); retrying with other ports\n", firstLine(err))
	}
}

func startOnce(ctx context.Context, opts Options) (*Cluster, error) {
	ports, err := reservePorts(opts)
	if err != nil {
		return nil, err
	}
	bins, err := (&Cache{Root: opts.CacheDir, Log: opts.Log}).Ensure(ctx)
	if err != nil {
		return nil, err
	}
	c := &Cluster{opts: opts, dataDir: opts.DataDir, ports: ports, done: make(chan struct{})}
	if c.dataDir == "" {
		if c.dataDir, err = os.MkdirTemp("", tempPrefix); err != nil {
			return nil, err
		}
		c.tempData = true
	}
	if c.dataDir, err = filepath.Abs(c.dataDir); err != nil {
		return nil, err
	}
	if err := private(c.dataDir); err != nil {
		return nil, err
	}
	if err := claim(c.dataDir, c.tempData); err != nil {
		if c.tempData {
			os.RemoveAll(c.dataDir)
		}
		return nil, err
	}
	if err := c.start(ctx, bins); err != nil {
		c.Stop()
		return nil, err
	}
	go c.watch()
	return c, nil
}

// private makes the data directory, which holds the CA's key and an
// administrator's kubeconfig, readable by its user alone (0700), whether
// Start makes it or is given one that exists.
func private(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating the data directory: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("making the data directory %s private: %w", dir, err)
	}
	return nil
}

// lostPortRace reports whether a start failed because a component could not
// bind its port.
func lostPortRace(err error) bool {
	return errors.Is(err, syscall.EADDRINUSE) || strings.Contains(err.Error(), "address already in use")
}

func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

func (c *Cluster) start(ctx context.Context, bins Binaries) error {
	begin := time.Now()
	p := pki{dir: filepath.Join(c.dataDir, "pki")}
	logs := filepath.Join(c.dataDir, "logs")
	for _, d := range []string{logs, filepath.Join(c.dataDir, "etcd")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	if err := p.ensure(); err != nil {
		return fmt.Errorf("creating certificates in %s: %w", p.dir, err)
	}
	c.endpoint = "https://127.0.0.1:" + strconv.Itoa(c.ports["kube-apiserver"])
	c.kubeconfig = filepath.Join(c.dataDir, "admin.kubeconfig")
	for _, kc := range []struct{ file, cert string }{
		{c.kubeconfig, "admin"},
		{filepath.Join(c.dataDir, "controller-manager.kubeconfig"), "controller-manager"},
		{filepath.Join(c.dataDir, "scheduler.kubeconfig"), "scheduler"},
		{filepath.Join(c.dataDir, "dev-node.kubeconfig"), "dev-node"},
	} {
		if err := writeKubeconfig(kc.file, c.endpoint, p.cert("ca"), p.cert(kc.cert), p.key(kc.cert)); err != nil {
			return fmt.Errorf("writing %s: %w", kc.file, err)
		}
	}
	var err error
	if c.rest, err = clientcmd.BuildConfigFromFlags("", c.kubeconfig); err != nil {
		return err
	}
	client, err := httpClient(p)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.opts.StartTimeout)
	defer cancel()

	// etcd first, then the apiserver, then the controllers that talk to it.
	etcdURL, etcdArgs := c.etcdArgs(p)
	if err := c.launch(bins, Etcd, etcdArgs, logs); err != nil {
		return err
	}

	apiArgs := c.apiServerArgs(p, etcdURL)
	if err := c.launch(bins, KubeAPIServer, apiArgs, logs, c.apiServerEnv()...); err != nil {
		return err
	}
	if err := c.waitHTTP(ctx, client, "kube-apiserver", c.endpoint+"/readyz"); err != nil {
		return err
	}

	if f := c.opts.BeforeControllers; f != nil {
		if err := f(ctx, rest.CopyConfig(c.rest)); err != nil {
			return fmt.Errorf("before the controllers start: %w", err)
		}
	}
	kcmKubeconfig := filepath.Join(c.dataDir, "controller-manager.kubeconfig")
	if err := c.launch(bins, KubeControllerManager, append(componentArgs(p, kcmKubeconfig, c.ports["kube-controller-manager"]),
		"--service-account-private-key-file="+p.path("sa.key"),
		"--root-ca-file="+p.cert("ca"),
		"--cluster-signing-cert-file="+p.cert("ca"), "--cluster-signing-key-file="+p.key("ca"),
		"--use-service-account-credentials=true",
		controllersFlag(c.opts.Lean),
		// At its start the manager makes a service account and a token for
		// each of its forty controllers (--use-service-account-credentials)
		// and reads what each needs: at its default client limit (20
		// requests a second) that took 5 s of an 8 s plane start, waiting
		// on itself. One plane has this manager alone as a heavy client.
		"--kube-api-qps=200", "--kube-api-burst=400",
	), logs); err != nil {
		return err
	}
	schedKubeconfig := filepath.Join(c.dataDir, "scheduler.kubeconfig")
	if err := c.launch(bins, KubeScheduler, componentArgs(p, schedKubeconfig, c.ports["kube-scheduler"]), logs); err != nil {
		return err
	}
	for _, name := range []string{"kube-controller-manager", "kube-scheduler"} {
		url := "https://127.0.0.1:" + strconv.Itoa(c.ports[name]) + "/healthz"
		if err := c.waitHTTP(ctx, client, name, url); err != nil {
			return err
		}
	}
	// The service-account controller creates "default" in each namespace;
	// Pods cannot be created before it exists.
	if err := c.waitHTTP(ctx, client, "the default service account", c.endpoint+"/api/v1/namespaces/default/serviceaccounts/default"); err != nil {
		return err
	}
	if c.opts.DevNode {
		if err := c.startDevNode(ctx, p); err != nil {
			return err
		}
	}
	c.ready = time.Since(begin)
	fmt.Fprintf(c.opts.Log, "control plane ready at %s in %s\n", c.endpoint, c.ready.Round(100*time.Millisecond))
	return nil
}

// startDevNode starts the dev node (package devnode), which runs the
// plane's Pods on this host.
func (c *Cluster) startDevNode(ctx context.Context, p pki) error {
	nodeConfig, err := clientcmd.BuildConfigFromFlags("", filepath.Join(c.dataDir, "dev-node.kubeconfig"))
	if err != nil {
		return err
	}
	if err := bindNodeRoles(ctx, c.rest, devnode.DefaultName); err != nil {
		return err
	}
	c.node, err = devnode.Start(ctx, devnode.Options{
		Config:      nodeConfig,
		Dir:         filepath.Join(c.dataDir, "pods"),
		ServingCert: p.cert("loopback-serving"), ServingKey: p.key("loopback-serving"),
		ClientCA:  p.cert("ca"),
		Port:      c.ports["dev-node"],
		ProxyPort: c.ports["dev-node-proxy"],
		Version:   KubernetesVersion,
		Log:       c.opts.Log,
		Opkit:     c.opts.Opkit,
	})
	return err
}

// launch starts component b with args, and env added to this process's
// environment.
func (c *Cluster) launch(bins Binaries, b Binary, args []string, logs string, env ...string) error {
	fmt.Fprintf(c.opts.Log, "starting %s\n", b)
	proc, err := startProcess(string(b), bins.Path(b), args, env, filepath.Join(logs, string(b)+".log"))
	if err != nil {
		return err
	}
	c.procs = append(c.procs, proc)
	return nil
}

// waitHTTP polls url until it answers 200, a component exits, or ctx ends.
func (c *Cluster) waitHTTP(ctx context.Context, client *http.Client, what, url string) error {
	var last string
	for {
		for _, p := range c.procs {
			if p.exited() {
				return p.exitError()
			}
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := client.Do(req)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("HTTP %d: %s", resp.StatusCode, body)
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s (%s): %w; last answer: %s", what, url, ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// httpClient authenticates as the admin and trusts the plane's CA.
func httpClient(p pki) (*http.Client, error) {
	return p.client("admin", 5*time.Second)
}

// client is an HTTP client that authenticates with the certificate of
// identity (a name p.cert and p.key know) and trusts the plane's CA.
func (p pki) client(identity string, timeout time.Duration) (*http.Client, error) {
	pair, err := tls.LoadX509KeyPair(p.cert(identity), p.key(identity))
	if err != nil {
		return nil, err
	}
	caPEM, err := os.ReadFile(p.cert("ca"))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	return &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12},
			DisableKeepAlives: true,
		},
	}, nil
}

func writeKubeconfig(path, server, ca, cert, key string) error {
	read := func(f string) []byte { b, _ := os.ReadFile(f); return b }
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["opkit"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: read(ca)}
	cfg.AuthInfos["opkit"] = &clientcmdapi.AuthInfo{ClientCertificateData: read(cert), ClientKeyData: read(key)}
	cfg.Contexts["opkit"] = &clientcmdapi.Context{Cluster: "opkit", AuthInfo: "opkit", Namespace: "default"}
	cfg.CurrentContext = "opkit"
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		return err
	}
	return writeFileAtomic(path, data, 0o600)
}

// watch notices a component that exits while the plane runs.
func (c *Cluster) watch() {
	cases := make(chan *process, len(c.procs))
	for _, p := range c.procs {
		go func() {
			select {
			case <-p.done:
				cases <- p
			case <-c.done:
			}
		}()
	}
	select {
	case p := <-cases:
		c.setErr(p.exitError())
		c.Stop()
	case <-c.done:
	}
}

func (c *Cluster) setErr(err error) {
	c.errMu.Lock()
	defer c.errMu.Unlock()
	if c.err == nil {
		c.err = err
	}
}

// Done is closed when the plane stops: by Stop, or because a component
// exited, in which case Err says which and why.
func (c *Cluster) Done() <-chan struct{} { return c.done }

// Err returns why the plane stopped on its own, or nil.
func (c *Cluster) Err() error {
	c.errMu.Lock()
	defer c.errMu.Unlock()
	return c.err
}

// Stop stops every component, newest first, and removes a temporary data
// directory. It is safe to call more than once.
func (c *Cluster) Stop() {
	c.stopOnce.Do(func() {
		close(c.done)
		if c.node != nil {
			c.node.Stop()
		}
		for i := len(c.procs) - 1; i >= 0; i-- {
			c.procs[i].stop(c.opts.StopGrace)
		}
		if c.tempData {
			os.RemoveAll(c.dataDir)
		} else {
			release(c.dataDir)
		}
	})
}

// Endpoint returns kube-apiserver's URL.
func (c *Cluster) Endpoint() string { return c.endpoint }

// KubeconfigPath returns the path of an admin kubeconfig (system:masters).
func (c *Cluster) KubeconfigPath() string { return c.kubeconfig }

// RESTConfig returns a new admin client configuration.
func (c *Cluster) RESTConfig() *rest.Config { return rest.CopyConfig(c.rest) }

// DataDir returns the data directory.
func (c *Cluster) DataDir() string { return c.dataDir }

// ReadyAfter returns how long the plane took from its first process start
// to ready.
func (c *Cluster) ReadyAfter() time.Duration { return c.ready }

// DevNode returns the dev node, or nil when Options.DevNode was false.
func (c *Cluster) DevNode() *devnode.Node { return c.node }

// Components lists the running processes.
func (c *Cluster) Components() []Component {
	out := make([]Component, 0, len(c.procs))
	for _, p := range c.procs {
		out = append(out, Component{Name: p.name, Pid: p.pid(), Port: c.ports[p.name], LogPath: p.logPath})
	}
	return out
}

// bindNodeRoles grants the dev node what a node's kube-proxy may read
// (the ClusterRole system:node-proxier: Services, EndpointSlices), since
// the dev node is its own proxy to Services (devnode.Node.ServiceProxy),
// and what a volume provisioner may do (system:persistent-volume-provisioner:
// claims read, volumes made and deleted), since it binds the plane's
// claims. A start on kept data finds the bindings made.
func bindNodeRoles(ctx context.Context, cfg *rest.Config, node string) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	// A node's proxy (Services' EndpointSlices), and the provisioner of
	// the plane's PersistentVolumeClaims (devnode's claims.go).
	for _, b := range []struct{ name, role, what string }{
		{"opkit:dev-node-proxier", "system:node-proxier", "a node's proxy"},
		{"opkit:dev-node-provisioner", "system:persistent-volume-provisioner", "a volume provisioner"},
	} {
		binding := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: b.name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: b.role},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "system:node:" + node}},
		}
		_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("granting the dev node the rights of %s: %w", b.what, err)
		}
	}
	return nil
}
