package devnode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// A Pod's process is a process of the host: it cannot resolve a
// Service's name (NAME.NAMESPACE.svc), which a cluster's DNS gives, and
// no ClusterIP routes anywhere. Yet what a Pod is told to dial is a
// Service's name (a runner's --engine=https://opkit-runners.opkit.svc:7384), and
// changing that name would make the Pod unlike the one a cluster runs.
// So the node serves an HTTP proxy on loopback and gives each container
// HTTP_PROXY and HTTPS_PROXY (with NO_PROXY for loopback): the proxy
// resolves a Service's name to a ready endpoint of its EndpointSlices,
// as kube-proxy would, and dials any other host as it is. A TLS client
// still checks the Service's name, since CONNECT keeps TLS end to end.
// A Service's ClusterIP is resolved the same way, for a client that has
// one (kube-apiserver reaches an APIService's Service at its ClusterIP:
// the plane gives it the proxy too).
// A program that ignores the proxy variables reaches no Service, as
// before.

// serviceSuffixes are the names of Services the proxy resolves:
// NAME.NAMESPACE.svc and NAME.NAMESPACE.svc.cluster.local.
var serviceSuffixes = []string{".svc", ".svc.cluster.local"}

// serviceProxy is the node's proxy to Services.
type serviceProxy struct {
	client kubernetes.Interface
	ln     net.Listener
	srv    *http.Server

	mu   sync.Mutex
	next int // round robin over a Service's ready endpoints
}

func startServiceProxy(client kubernetes.Interface, port int) (*serviceProxy, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return nil, fmt.Errorf("dev node: the Services' proxy: %w", err)
	}
	p := &serviceProxy{client: client, ln: ln}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 30 * time.Second}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// url is the proxy's URL, for HTTP_PROXY and HTTPS_PROXY.
func (p *serviceProxy) url() string { return "http://" + p.ln.Addr().String() }

func (p *serviceProxy) close() { _ = p.srv.Close() }

// proxyEnv are the variables that send a container's HTTP clients
// through the proxy, in both spellings programs read.
func (p *serviceProxy) proxyEnv() map[string]string {
	if p == nil {
		return nil
	}
	u := p.url()
	noProxy := "localhost,127.0.0.1,::1"
	return map[string]string{
		"HTTP_PROXY": u, "HTTPS_PROXY": u, "NO_PROXY": noProxy,
		"http_proxy": u, "https_proxy": u, "no_proxy": noProxy,
	}
}

func (p *serviceProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodConnect {
		p.tunnel(w, r)
		return
	}
	if r.URL.Host == "" {
		http.Error(w, "the dev node's proxy forwards requests with an absolute URL only", http.StatusBadRequest)
		return
	}
	addr, err := p.resolve(r.Context(), hostPort(r.URL.Host, r.URL.Scheme))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Host = addr
			pr.Out.Host = pr.In.Host
			pr.Out.Header.Del("Proxy-Authorization")
			pr.Out.Header.Del("Proxy-Connection")
		},
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			http.Error(w, err.Error(), http.StatusBadGateway)
		},
	}
	rp.ServeHTTP(w, r)
}

// tunnel answers CONNECT: it dials the resolved address and copies bytes
// both ways until either side closes, and then closes both: a client
// waiting on an answer from a server that went away (an engine's Pod
// replaced mid long poll) gets an error at once, as when it dials the
// server itself, instead of a half-open tunnel that never answers.
func (p *serviceProxy) tunnel(w http.ResponseWriter, r *http.Request) {
	addr, err := p.resolve(r.Context(), r.Host)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	upstream, err := (&net.Dialer{Timeout: 10 * time.Second}).DialContext(r.Context(), "tcp", addr)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		_ = upstream.Close()
		http.Error(w, "no hijacking", http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusOK)
	conn, buf, err := hj.Hijack()
	if err != nil {
		_ = upstream.Close()
		return
	}
	go func() {
		var once sync.Once
		closeBoth := func() { once.Do(func() { _ = upstream.Close(); _ = conn.Close() }) }
		defer closeBoth()
		// What the client sent after its CONNECT, already read.
		if n := buf.Reader.Buffered(); n > 0 {
			data, _ := buf.Reader.Peek(n)
			if _, err := upstream.Write(data); err != nil {
				return
			}
		}
		go func() { _, _ = io.Copy(conn, upstream); closeBoth() }()
		_, _ = io.Copy(upstream, conn)
	}()
}

func hostPort(host, scheme string) string {
	if _, _, err := net.SplitHostPort(host); err == nil {
		return host
	}
	if scheme == "https" {
		return net.JoinHostPort(host, "443")
	}
	return net.JoinHostPort(host, "80")
}

// serviceName parses NAME.NAMESPACE.svc[.cluster.local].
func serviceName(host string) (namespace, name string, ok bool) {
	host = strings.TrimSuffix(host, ".")
	for _, suffix := range serviceSuffixes {
		rest, found := strings.CutSuffix(host, suffix)
		if !found {
			continue
		}
		name, namespace, found = strings.Cut(rest, ".")
		if found && name != "" && namespace != "" && !strings.Contains(namespace, ".") {
			return namespace, name, true
		}
	}
	return "", "", false
}

// resolve maps a Service's host:port to the address of one of its ready
// endpoints, and returns any other address as it is.
func (p *serviceProxy) resolve(ctx context.Context, addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("dev node proxy: %q: %w", addr, err)
	}
	var svc *corev1.Service
	if namespace, name, ok := serviceName(host); ok {
		if svc, err = p.client.CoreV1().Services(namespace).Get(ctx, name, metav1.GetOptions{}); err != nil {
			return "", fmt.Errorf("dev node proxy: Service %s/%s: %w", namespace, name, err)
		}
	} else if svc, err = p.serviceOfIP(ctx, host); err != nil || svc == nil {
		return addr, err
	}
	namespace, name := svc.Namespace, svc.Name
	var sp *corev1.ServicePort
	for i := range svc.Spec.Ports {
		if strconv.Itoa(int(svc.Spec.Ports[i].Port)) == port {
			sp = &svc.Spec.Ports[i]
		}
	}
	if sp == nil {
		return "", fmt.Errorf("dev node proxy: Service %s/%s has no port %s", namespace, name, port)
	}
	slices, err := p.client.DiscoveryV1().EndpointSlices(namespace).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + name})
	if err != nil {
		return "", fmt.Errorf("dev node proxy: the EndpointSlices of Service %s/%s: %w", namespace, name, err)
	}
	var ready []string
	for _, s := range slices.Items {
		var epPort *int32
		for _, pt := range s.Ports {
			if ptrValue(pt.Name) == sp.Name && pt.Port != nil {
				epPort = pt.Port
			}
		}
		if epPort == nil {
			continue
		}
		for _, ep := range s.Endpoints {
			if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
				continue
			}
			for _, a := range ep.Addresses {
				ready = append(ready, net.JoinHostPort(a, strconv.Itoa(int(*epPort))))
			}
		}
	}
	if len(ready) == 0 {
		return "", errors.New("dev node proxy: Service " + namespace + "/" + name + " has no ready endpoint for port " + port)
	}
	p.mu.Lock()
	p.next++
	i := p.next % len(ready)
	p.mu.Unlock()
	return ready[i], nil
}

// serviceOfIP is the Service whose ClusterIP host is; nil when host is
// no Service's (an address dialed as it is).
func (p *serviceProxy) serviceOfIP(ctx context.Context, host string) (*corev1.Service, error) {
	ip := net.ParseIP(host)
	if ip == nil || ip.IsLoopback() {
		return nil, nil
	}
	list, err := p.client.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("dev node proxy: the Services, to find %s's: %w", host, err)
	}
	for i := range list.Items {
		for _, c := range list.Items[i].Spec.ClusterIPs {
			if cip := net.ParseIP(c); cip != nil && cip.Equal(ip) {
				return &list.Items[i], nil
			}
		}
	}
	return nil, nil
}

func ptrValue(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
