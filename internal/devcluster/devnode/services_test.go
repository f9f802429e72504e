package devnode_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
)

// probe is what the Pod of
// TestAPodReachesServicesByNameAndTheAPIAsItsServiceAccountWithRenewedTokens
// runs: it prints its pod root, the body of GET URL (through the proxy
// $HTTPS_PROXY names, as any Go program's default client does), and who
// the API server says $KUBECONFIG authenticates, then waits to be killed.
func probe(args []string) int {
	if args[0] == "serve" {
		ln, err := net.Listen("tcp", args[1])
		if err != nil {
			fmt.Println(err)
			return 1
		}
		// The test dials only once this is said: a Pod without a
		// readiness probe is ready when its process starts, as in
		// Kubernetes, which may be before it listens.
		fmt.Println("listening")
		err = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "hello from %s", r.Host)
		}))
		fmt.Println(err)
		return 1
	}
	fmt.Printf("root %s\n", os.Getenv("OPKIT_POD_ROOT"))
	resp, err := http.Get(args[0])
	if err != nil {
		fmt.Println("fetch error:", err)
		return 1
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Printf("fetched %d %s\n", resp.StatusCode, body)
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		fmt.Println("kubeconfig error:", err)
		return 1
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fmt.Println("client error:", err)
		return 1
	}
	review, err := cs.AuthenticationV1().SelfSubjectReviews().Create(context.Background(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		fmt.Println("whoami error:", err)
		return 1
	}
	fmt.Printf("user %s\n", review.Status.UserInfo.Username)
	select {}
}

// A Pod's process dials a Service by the name a cluster's DNS gives it
// (NAME.NAMESPACE.svc) and reaches its ready endpoint, through the node's
// proxy; it reaches the API server as its ServiceAccount with the token
// the node mounted ($KUBECONFIG); and that token is renewed before it
// expires (here within seconds, see TestMain), the new one valid for the
// Pod.
func TestAPodReachesServicesByNameAndTheAPIAsItsServiceAccountWithRenewedTokens(t *testing.T) {
	env := clustertest.New(t)
	ctx := t.Context()
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// A Pod serving on a port of the host, selected by a Service whose
	// port is another.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	server := devPod(env.Namespace, "web", corev1.RestartPolicyNever, exe, "serve", ":"+strconv.Itoa(port))
	server.Labels = map[string]string{"app": "web"}
	server.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: int32(port)}}
	if err := env.Client.Create(ctx, server); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: env.Namespace},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "web"},
			Ports:    []corev1.ServicePort{{Name: "web", Port: 80, TargetPort: intstr.FromString("http")}},
		},
	}
	if _, err := cs.CoreV1().Services(env.Namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "the Service's EndpointSlice names the Pod, ready", func(ctx context.Context) (bool, error) {
		slices, err := cs.DiscoveryV1().EndpointSlices(env.Namespace).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=web"})
		if err != nil {
			return false, err
		}
		for _, s := range slices.Items {
			for _, ep := range s.Endpoints {
				if ep.Conditions.Ready != nil && *ep.Conditions.Ready {
					return true, nil
				}
			}
		}
		return false, nil
	})
	eventually(t, time.Minute, "the web Pod listens", func(ctx context.Context) (bool, error) {
		data, err := cs.CoreV1().Pods(env.Namespace).GetLogs(server.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
		return err == nil && strings.Contains(string(data), "listening"), nil
	})
	url := "http://web." + env.Namespace + ".svc:80/"
	pod := devPod(env.Namespace, "probe", corev1.RestartPolicyNever, exe, "probe", url)
	if err := env.Client.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	var log string
	eventually(t, time.Minute, "the probe reports who it is", func(ctx context.Context) (bool, error) {
		data, err := cs.CoreV1().Pods(env.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
		log = string(data)
		return err == nil && strings.Contains(log, "user ") || strings.Contains(log, "error"), nil
	})
	lines := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(log), "\n") {
		k, v, _ := strings.Cut(line, " ")
		lines[k] = v
	}
	if want := "200 hello from web." + env.Namespace + ".svc:80"; lines["fetched"] != want {
		t.Errorf("GET %s through the node's proxy: %q; want %q (log:\n%s)", url, lines["fetched"], want, log)
	}
	if want := "system:serviceaccount:" + env.Namespace + ":default"; lines["user"] != want {
		t.Errorf("the Pod reaches the API server as %q; want its ServiceAccount, %q (log:\n%s)", lines["user"], want, log)
	}

	// The Service at its ClusterIP, as kube-apiserver dials an
	// APIService's: the proxy finds the Service that has it.
	created, err := cs.CoreV1().Services(env.Namespace).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	byIP := "http://" + net.JoinHostPort(created.Spec.ClusterIP, "80") + "/"
	ipPod := devPod(env.Namespace, "probe-ip", corev1.RestartPolicyNever, exe, "probe", byIP)
	if err := env.Client.Create(ctx, ipPod); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "the second probe fetches "+byIP, func(ctx context.Context) (bool, error) {
		data, err := cs.CoreV1().Pods(env.Namespace).GetLogs(ipPod.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
		log = string(data)
		return err == nil && strings.Contains(log, "fetch"), nil
	})
	if want := "fetched 200 hello from " + net.JoinHostPort(created.Spec.ClusterIP, "80"); !strings.Contains(log, want) {
		t.Errorf("GET %s through the node's proxy: %s; want %q", byIP, log, want)
	}

	// The token file, renewed: a new token, valid, for the Pod.
	tokenFile := filepath.Join(lines["root"], "var/run/secrets/kubernetes.io/serviceaccount/token")
	first, err := os.ReadFile(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	var renewed []byte
	eventually(t, time.Minute, "the Pod's token is renewed", func(context.Context) (bool, error) {
		renewed, err = os.ReadFile(tokenFile)
		return err == nil && len(renewed) > 0 && string(renewed) != string(first), nil
	})
	tr, err := cs.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: string(renewed)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !tr.Status.Authenticated || tr.Status.User.Username != "system:serviceaccount:"+env.Namespace+":default" || !strings.Contains(fmt.Sprint(tr.Status.User.Extra), "probe") {
		t.Errorf("the renewed token: authenticated %v as %q (%v); want the Pod's ServiceAccount, bound to the Pod", tr.Status.Authenticated, tr.Status.User.Username, tr.Status.User.Extra)
	}
}
