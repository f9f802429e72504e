package aggregate_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"

	"github.com/opkit-dev/opkit/internal/aggregate"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
)

func TestMain(m *testing.M) { clustertest.Main(m) }

// widgets is the test's aggregated API: one resource, widgets, whose
// objects are served as the request's user saw them.
type widgets struct {
	gv     string
	header *aggregate.RequestHeader

	mu   sync.Mutex
	seen []seenRequest
}

type seenRequest struct {
	user    aggregate.User
	authErr error
	certs   []*x509.Certificate // the client's chain, leaf first
}

func (w *widgets) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	user, err := w.header.Authenticate(r)
	seen := seenRequest{user: user, authErr: err}
	if r.TLS != nil {
		seen.certs = r.TLS.PeerCertificates
	}
	w.mu.Lock()
	w.seen = append(w.seen, seen)
	w.mu.Unlock()
	if err != nil {
		http.Error(rw, err.Error(), http.StatusUnauthorized)
		return
	}
	rw.Header().Set("Content-Type", "application/json")
	if r.URL.Path == "/apis/"+w.gv {
		_ = json.NewEncoder(rw).Encode(metav1.APIResourceList{
			TypeMeta:     metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"},
			GroupVersion: w.gv,
			APIResources: []metav1.APIResource{{Name: "widgets", SingularName: "widget", Namespaced: true, Kind: "Widget", Verbs: metav1.Verbs{"get", "list"}}},
		})
		return
	}
	name := r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:]
	_ = json.NewEncoder(rw).Encode(map[string]any{
		"apiVersion": w.gv, "kind": "Widget",
		"metadata": map[string]any{"name": name},
		"seenBy":   map[string]any{"user": user.Name, "groups": user.Groups},
	})
}

func (w *widgets) requests() []seenRequest {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.seen)
}

func TestAnAggregatedServerOnTheHostIsReachedThroughTheAPIServerAndItsOutageIsContained(t *testing.T) {
	env := clustertest.New(t)
	ctx := t.Context()
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := aggregate.NewRegistrar(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	// What a real aggregated server reads to trust the front proxy.
	header, err := aggregate.ReadRequestHeader(ctx, cs)
	if err != nil {
		t.Fatal(err)
	}
	api := aggregate.API{
		Group: "aggtest.opkit.dev", Version: "v1",
		Service:      types.NamespacedName{Namespace: env.Namespace, Name: "widgets"},
		ExternalName: "127.0.0.1",
	}
	gv := api.Group + "/" + api.Version
	handler := &widgets{gv: gv, header: header}
	srv, err := aggregate.NewServer(aggregate.ServerOptions{
		API: api, Registrar: reg, Addr: "127.0.0.1:0", Secrets: cs.CoreV1(),
	})
	if err != nil {
		t.Fatal(err)
	}
	srv.Handle("/", handler)
	srvCtx, stopServer := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- srv.Start(srvCtx) }()
	t.Cleanup(func() {
		stopServer()
		if err := <-served; err != nil {
			t.Error(err)
		}
		if err := reg.Unregister(context.WithoutCancel(ctx), api); err != nil {
			t.Error(err)
		}
	})

	// Discovery, as `kubectl api-resources` does it, within 10s of the
	// server's start (which registers the API).
	dc, err := discovery.NewDiscoveryClientForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, 10*time.Second, "discovery lists widgets", func(context.Context) (bool, error) {
		lists, err := dc.ServerPreferredResources()
		if err != nil && !discovery.IsGroupDiscoveryFailedError(err) {
			return false, err
		}
		for _, l := range lists {
			if l.GroupVersion == gv && slices.ContainsFunc(l.APIResources, func(r metav1.APIResource) bool { return r.Name == "widgets" }) {
				return true, nil
			}
		}
		return false, nil
	})
	if err := reg.WaitAvailable(ctx, api, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	// Found by kubectl's plural, and the resource's verbs are the server's.
	out, err := clustertest.Kubectl(t, clustertest.Cluster(t).KubeconfigPath(), "api-resources", "--api-group="+api.Group, "-o", "name")
	if err != nil || !strings.Contains(out, "widgets."+api.Group) {
		t.Errorf("kubectl api-resources --api-group=%s = %q, %v; want widgets", api.Group, out, err)
	}

	// A GET through the API server reaches the server as the admin, by
	// the front proxy's certificate, which verifies against the CA the
	// API server publishes.
	raw, err := cs.Discovery().RESTClient().Get().AbsPath("/apis", gv, "namespaces", env.Namespace, "widgets", "w1").DoRaw(ctx)
	if err != nil {
		t.Fatalf("GET widgets/w1 through the API server: %v", err)
	}
	var got struct {
		SeenBy struct {
			User   string   `json:"user"`
			Groups []string `json:"groups"`
		} `json:"seenBy"`
	}
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatalf("widget: %v: %s", err, raw)
	}
	if got.SeenBy.User != "opkit-admin" || !slices.Contains(got.SeenBy.Groups, "system:masters") {
		t.Errorf("the server saw user %q groups %v, want opkit-admin in system:masters (the admin's client certificate)", got.SeenBy.User, got.SeenBy.Groups)
	}
	// Checked here apart from Authenticate: the chain verifies against
	// the ConfigMap's CA for client authentication.
	auth, err := cs.CoreV1().ConfigMaps("kube-system").Get(ctx, "extension-apiserver-authentication", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM([]byte(auth.Data["requestheader-client-ca-file"])) {
		t.Fatalf("requestheader-client-ca-file holds no certificate: %q", auth.Data["requestheader-client-ca-file"])
	}
	seen := handler.requests()
	if len(seen) == 0 {
		t.Fatal("the server saw no request")
	}
	for _, s := range seen {
		if len(s.certs) == 0 {
			t.Errorf("a request through the API server came without a client certificate")
			continue
		}
		if _, err := s.certs[0].Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("client certificate %q does not verify against the requestheader CA: %v", s.certs[0].Subject.CommonName, err)
		}
		if cn := s.certs[0].Subject.CommonName; cn != "front-proxy-client" {
			t.Errorf("client certificate %q, want front-proxy-client", cn)
		}
		if s.authErr != nil {
			t.Errorf("Authenticate refused a request through the API server: %v", s.authErr)
		}
	}

	// Headers alone, without the front proxy's certificate, are no user:
	// a client that reaches the server directly cannot pass for one.
	forged := directGet(t, srv.Addr(), api.ServingName(), "/apis/"+gv+"/namespaces/x/widgets/w1", nil)
	if forged != http.StatusUnauthorized {
		t.Errorf("a direct request with forged X-Remote-User got HTTP %d, want 401", forged)
	}
	admin, err := tls.LoadX509KeyPair(env.Config.CertFile, env.Config.KeyFile)
	if env.Config.CertFile == "" {
		admin, err = tls.X509KeyPair(env.Config.CertData, env.Config.KeyData)
	}
	if err != nil {
		t.Fatal(err)
	}
	if code := directGet(t, srv.Addr(), api.ServingName(), "/apis/"+gv+"/namespaces/x/widgets/w1", &admin); code != http.StatusUnauthorized {
		t.Errorf("a direct request with the admin's certificate (the plane's main CA) got HTTP %d, want 401", code)
	}
	var refused int
	for _, s := range handler.requests()[len(seen):] {
		if errors.Is(s.authErr, aggregate.ErrNotFrontProxy) {
			refused++
		}
	}
	if refused != 2 {
		t.Errorf("%d requests refused as not from the front proxy, want the 2 direct ones", refused)
	}

	// The server stops: the APIService reports it, and the API server
	// serves everything else.
	stopServer()
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	served <- nil // for the cleanup
	clustertest.Eventually(t, 90*time.Second, "the APIService reports Available=False", func(ctx context.Context) (bool, error) {
		a, err := reg.Status(ctx, api)
		return err == nil && !a.Available && a.Reason != "", err
	})
	err = reg.WaitAvailable(ctx, api, time.Second)
	if err == nil || !strings.Contains(err.Error(), api.Name()) || !strings.Contains(err.Error(), "not Available: ") {
		t.Errorf("WaitAvailable on a stopped server = %v; want an error naming %s and its condition", err, api.Name())
	}
	if _, err := cs.CoreV1().ConfigMaps(env.Namespace).List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("listing ConfigMaps while the aggregated server is down: %v", err)
	}
	_, err = cs.Discovery().RESTClient().Get().AbsPath("/apis", gv, "namespaces", env.Namespace, "widgets", "w1").DoRaw(ctx)
	if !apierrors.IsServiceUnavailable(err) {
		t.Errorf("GET widgets/w1 with the server down = %v, want 503", err)
	}

	// Unregister removes the APIService and the ExternalName Service.
	if err := reg.Unregister(ctx, api); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Status(ctx, api); !apierrors.IsNotFound(err) {
		t.Errorf("APIService after Unregister: %v, want NotFound", err)
	}
	if _, err := cs.CoreV1().Services(env.Namespace).Get(ctx, api.Service.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("Service after Unregister: %v, want NotFound", err)
	}
}

// directGet GETs path from the server at addr, not through the API
// server, with a forged X-Remote-User and cert as its client certificate
// (nil: none), and returns the status code. It trusts any server
// certificate: what is tested is the server's check of its client.
func directGet(t *testing.T, addr, serverName, path string, cert *tls.Certificate) int {
	t.Helper()
	cfg := &tls.Config{ServerName: serverName, InsecureSkipVerify: true} //nolint:gosec // see the doc
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "https://"+addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Remote-User", "system:admin")
	req.Header.Set("X-Remote-Group", "system:masters")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("direct GET %s: %v", path, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
