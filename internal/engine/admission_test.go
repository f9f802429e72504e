package engine_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/devcluster"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
	"github.com/opkit-dev/opkit/internal/engine"
)

// admissionHandlerEnv makes the test binary an admission handler that
// misbehaves: crash kills itself, hang never answers (and ignores
// SIGTERM).
const admissionHandlerEnv = "OPKIT_TEST_ADMISSION"

func testAdmissionHandler(mode string) int {
	switch mode {
	case "crash":
		fmt.Fprintln(os.Stderr, "about to crash")
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	case "hang":
		signal.Ignore(syscall.SIGTERM)
		fmt.Fprintln(os.Stderr, "thinking very hard")
		time.Sleep(time.Hour)
	}
	return 2
}

// admissionExample is the Website with admission handlers.
const admissionExample = "../../examples/website/admission/operator.yaml"

// admissionDefinition writes the example with its handlers' commands made
// absolute and each of replace's strings replaced, and returns its path.
func admissionDefinition(t *testing.T, replace ...string) string {
	t.Helper()
	data, err := os.ReadFile(admissionExample)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := filepath.Abs(filepath.Dir(admissionExample))
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	for i := 0; i+1 < len(replace); i += 2 {
		if !strings.Contains(s, replace[i]) {
			t.Fatalf("the example has no %q", replace[i])
		}
		s = strings.ReplaceAll(s, replace[i], replace[i+1])
	}
	for _, script := range []string{"check-content.py", "created-by.py"} {
		s = strings.ReplaceAll(s, "[./"+script+"]", fmt.Sprintf("[%q]", filepath.Join(dir, script)))
	}
	path := filepath.Join(t.TempDir(), "operator.yaml")
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// startAdmissionEngine runs an engine of the test's namespace serving
// admission on loopback, with w's certificate options, and returns it, its
// archive and what stops it. The webhook configurations go with the test.
func startAdmissionEngine(t *testing.T, env *clustertest.Env, file string, w *engine.WebhookOptions) (*engine.Engine, *archive.SQLite, func()) {
	t.Helper()
	if w == nil {
		w = &engine.WebhookOptions{}
	}
	w.Addr = "127.0.0.1:0"
	store := newArchive(t)
	e, stop := runEngineWith(t, engine.Options{Config: env.Config, Namespace: env.Namespace, Webhook: w, Archive: store}, file)
	name := engine.WebhookConfigName("website", env.Namespace)
	t.Cleanup(func() {
		ctx := context.Background()
		_ = env.Client.Delete(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}})
		_ = env.Client.Delete(ctx, &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}})
	})
	return e, store, stop
}

// applyWebsite applies a Website of this content with the plane's
// kubectl, and returns its output (stdout and stderr), how long it took
// and its error.
func applyWebsite(t *testing.T, env *clustertest.Env, name, content string, args ...string) (string, time.Duration, error) {
	t.Helper()
	manifest := fmt.Sprintf("apiVersion: demo.example.com/v1\nkind: Website\nmetadata: {name: %s}\nspec:\n  content: %q\n", name, content)
	file := filepath.Join(t.TempDir(), name+".yaml")
	if err := os.WriteFile(file, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	bins, err := (&devcluster.Cache{}).Binaries()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), bins.Path(devcluster.Kubectl), append([]string{"apply", "-n", env.Namespace, "-f", file}, args...)...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+clustertest.Cluster(t).KubeconfigPath())
	start := time.Now()
	out, err := cmd.CombinedOutput()
	return string(out), time.Since(start), err
}

// admissionRuns returns the runs of the operator's admission handlers of
// a trigger, newest first.
func admissionRuns(t *testing.T, store *archive.SQLite, trigger string, outcome archive.Outcome) []archive.Run {
	t.Helper()
	page, err := store.List(t.Context(), archive.Query{Operator: "website", Trigger: trigger, Outcome: outcome})
	if err != nil {
		t.Fatal(err)
	}
	return page.Runs
}

func TestAValidateHandlerDeniesAScriptInAWebsiteAndAMutateHandlerSetsADefault(t *testing.T) {
	t.Parallel()
	env := clustertest.New(t)
	_, store, _ := startAdmissionEngine(t, env, admissionDefinition(t), nil)
	const denial = "spec.content must not contain <script>: a Website serves static pages only"

	// Denied, with the handler's message in kubectl's output.
	out, took, err := applyWebsite(t, env, "bad", "<h1>Hi</h1><script>alert(1)</script>")
	if err == nil || !strings.Contains(out, denial) || !strings.Contains(out, "denied the request") {
		t.Fatalf("kubectl apply of a Website with a script: %v, in %s:\n%s", err, took, out)
	}
	t.Logf("denied in %s: %s", took.Round(time.Millisecond), strings.TrimSpace(out))
	if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: env.Namespace, Name: "bad"}, website(env.Namespace, "bad")); err == nil {
		t.Error("the denied Website exists")
	}
	// A server-side dry run is asked too, and recorded as one.
	if out, _, err := applyWebsite(t, env, "bad", "<script>1</script>", "--dry-run=server"); err == nil || !strings.Contains(out, denial) {
		t.Errorf("a dry run of a Website with a script: %v:\n%s", err, out)
	}

	// Allowed; the mutate handler records who created it.
	if out, _, err := applyWebsite(t, env, "good", "<h1>Hi</h1>"); err != nil {
		t.Fatalf("kubectl apply of a clean Website: %v:\n%s", err, out)
	}
	good := website(env.Namespace, "good")
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(good), good); err != nil {
		t.Fatal(err)
	}
	if by := good.GetAnnotations()["demo.example.com/created-by"]; by == "" {
		t.Errorf("the mutate handler's default is missing: annotations %v", good.GetAnnotations())
	}

	// The denials are in the archive, with why, the dry run marked, and
	// the handler's log.
	denied := admissionRuns(t, store, "validate", archive.Denied)
	if len(denied) != 2 {
		t.Fatalf("%d denied validate runs; want 2 (one a dry run)", len(denied))
	}
	for _, r := range denied {
		if r.Error != denial || r.Handler != "check-content" || r.Kind != "Website" || r.Name != "bad" || r.FinishedAt.IsZero() {
			t.Errorf("a denied run: %+v", r)
		}
	}
	if !strings.Contains(strings.Join(denied[0].Writes, " "), "dryRun") || strings.Contains(strings.Join(denied[1].Writes, " "), "dryRun") {
		t.Errorf("the dry run's record does not say so, or the other's does: %v, %v", denied[0].Writes, denied[1].Writes)
	}
	log, err := logData(store.Logs(t.Context(), denied[1].ID, 0))
	if err != nil || !strings.Contains(string(log), "CREATE of bad by") {
		t.Errorf("the denied run's log: %q, %v", log, err)
	}
	if allowed := admissionRuns(t, store, "validate", archive.Allowed); len(allowed) != 1 || allowed[0].Name != "good" {
		t.Errorf("allowed validate runs: %+v", allowed)
	}
	mutated := admissionRuns(t, store, "mutate", archive.Allowed)
	if len(mutated) == 0 || !strings.Contains(strings.Join(mutated[0].Writes, " "), "patch: metadata.annotations.demo.example.com/created-by") {
		t.Errorf("the mutate run's record: %+v", mutated)
	}
}

func TestAHandlerThatCrashesOrHangsAnswersByItsFailurePolicyInTime(t *testing.T) {
	t.Parallel()
	bin := clustertest.HandlerBinary(t)
	for _, tc := range []struct {
		mode, policy string
		// timeout is the webhook's: a hang's answer is the engine's
		// before the API server's; a crash needs the time a process of
		// the handlers' binary takes to start on a loaded machine.
		timeout  string
		want     string // in kubectl's output
		allowed  bool
		recorded string // in the run's error
	}{
		{"crash", "Fail", "10s", "its failurePolicy Fail denies the request", false, "killed by signal"},
		{"hang", "Fail", "3s", "gave no answer (no answer within 2.5s", false, "no answer within 2.5s"},
		{"hang", "Ignore", "3s", "its failurePolicy Ignore allowed the request", true, "no answer within 2.5s"},
	} {
		t.Run(tc.mode+"-"+tc.policy, func(t *testing.T) {
			env := clustertest.New(t)
			file := admissionDefinition(t,
				"      failurePolicy: Fail\n      timeout: 10s\n    exec: {command: [./check-content.py]}",
				fmt.Sprintf("      failurePolicy: %s\n      timeout: %s\n    exec: {command: [%q], env: [{name: %s, value: %s}]}", tc.policy, tc.timeout, bin, admissionHandlerEnv, tc.mode))
			_, store, _ := startAdmissionEngine(t, env, file, nil)
			out, took, err := applyWebsite(t, env, "site", "<h1>Hi</h1>")
			t.Logf("kubectl apply returned in %s: %v\n%s", took.Round(time.Millisecond), err, out)
			if (err == nil) != tc.allowed || !strings.Contains(out, tc.want) {
				t.Fatalf("kubectl apply: %v; want allowed %v, saying %q", err, tc.allowed, tc.want)
			}
			// The answer is the engine's own (its words, above), given
			// before the API server's timeout of the webhook (3s) would
			// have answered for it, in words of its own: no bound on
			// kubectl's time is needed, which a loaded machine could break.
			// The call's end is recorded with the answer, or just after
			// it when the archive is slower than the webhook's timeout.
			var failed []archive.Run
			eventually(t, 10*time.Second, "the call's end recorded", func(context.Context) (bool, error) {
				failed = admissionRuns(t, store, "validate", archive.Failed)
				return len(failed) > 0, nil
			})
			if len(failed) != 1 || !strings.Contains(failed[0].Error, tc.recorded) {
				t.Fatalf("failed validate runs: %+v; want one whose error says %q", failed, tc.recorded)
			}
		})
	}
}

// bundleCAs returns the CAs of the caBundle of the operator's validating
// and mutating webhooks, as their common names; nil while either is
// missing.
func bundleCAs(ctx context.Context, env *clustertest.Env) ([]string, []string, error) {
	name := engine.WebhookConfigName("website", env.Namespace)
	var v admissionregistrationv1.ValidatingWebhookConfiguration
	var m admissionregistrationv1.MutatingWebhookConfiguration
	if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, &v); err != nil {
		return nil, nil, client.IgnoreNotFound(err)
	}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, &m); err != nil {
		return nil, nil, client.IgnoreNotFound(err)
	}
	return commonNames(v.Webhooks[0].ClientConfig.CABundle), commonNames(m.Webhooks[0].ClientConfig.CABundle), nil
}

func commonNames(bundle []byte) []string {
	var out []string
	for {
		var block *pem.Block
		block, bundle = pem.Decode(bundle)
		if block == nil {
			return out
		}
		if c, err := x509.ParseCertificate(block.Bytes); err == nil {
			out = append(out, c.Subject.CommonName)
		}
	}
}

// servedIssuer is the common name of the CA that signed the certificate
// the server gives a new connection.
func servedIssuer(addr string) (string, error) {
	conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // the issuer is all that is read
	if err != nil {
		return "", err
	}
	defer func() { _ = conn.Close() }()
	return conn.ConnectionState().PeerCertificates[0].Issuer.CommonName, nil
}

func TestAForcedCertificateRotationFailsNoRequest(t *testing.T) {
	t.Parallel()
	env := clustertest.New(t)
	// Certificates of two hours issued an hour ago (by the fake clock),
	// backdated an hour: valid in real time, and due for rotation when
	// the clock reaches real time.
	clk := clocktesting.NewFakeClock(time.Now().Add(-time.Hour))
	w := &engine.WebhookOptions{Clock: clk, CALifetime: 2 * time.Hour, ServingLifetime: 2 * time.Hour, Grace: time.Minute, CheckEvery: 100 * time.Millisecond}
	// The handlers' timeout is the API server's most (30s), not the
	// example's 10s: what fails a request here must be the certificates,
	// and a Python process per call, with this test's client calling
	// without a pause, took more than 9s to answer on a loaded machine.
	e, _, _ := startAdmissionEngine(t, env, admissionDefinition(t, "timeout: 10s", "timeout: 30s"), w)
	ctx := t.Context()

	// A client creates Websites (server-side dry runs: both webhooks are
	// called, nothing is stored) throughout.
	var ok, failed atomic.Int64
	var mu sync.Mutex
	var errs []string
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			site := website(env.Namespace, fmt.Sprintf("site-%d", i))
			if err := env.Client.Create(ctx, site, client.DryRunAll); err != nil {
				failed.Add(1)
				mu.Lock()
				errs = append(errs, err.Error())
				mu.Unlock()
				continue
			}
			ok.Add(1)
		}
	}()
	stopClient := sync.OnceFunc(func() { close(stop); <-done })
	defer stopClient()
	requests := func(n int64, what string) {
		t.Helper()
		from := ok.Load()
		eventually(t, 60*time.Second, fmt.Sprintf("%d requests %s", n, what), func(context.Context) (bool, error) {
			return ok.Load() >= from+n, nil
		})
	}
	requests(5, "before the rotation")
	var first []string
	eventually(t, 30*time.Second, "the bundle injected", func(ctx context.Context) (bool, error) {
		v, _, err := bundleCAs(ctx, env)
		first = v
		return len(v) == 1, err
	})

	// The CA is due: a new one joins the bundle.
	clk.Step(time.Hour + time.Minute)
	var both []string
	eventually(t, 30*time.Second, "the new CA in both configurations' bundles", func(ctx context.Context) (bool, error) {
		v, m, err := bundleCAs(ctx, env)
		both = v
		return len(v) == 2 && len(m) == 2 && v[0] == first[0], err
	})
	// The grace: the API server's informer takes the new bundle.
	time.Sleep(3 * time.Second)
	requests(5, "with two CAs trusted")

	// The serving certificate switches to the new CA.
	clk.Step(time.Minute)
	eventually(t, 30*time.Second, "the new CA's certificate served", func(context.Context) (bool, error) {
		issuer, err := servedIssuer(e.WebhookAddr())
		return issuer == both[1], err
	})
	requests(10, "with the new certificate")

	// The old CA leaves the bundle.
	clk.Step(time.Minute)
	eventually(t, 30*time.Second, "the old CA removed", func(ctx context.Context) (bool, error) {
		v, m, err := bundleCAs(ctx, env)
		return len(v) == 1 && len(m) == 1 && v[0] == both[1] && m[0] == both[1], err
	})
	requests(10, "after the rotation")
	stopClient()
	t.Logf("%d requests, %d failed", ok.Load(), failed.Load())
	if failed.Load() > 0 {
		t.Errorf("%d requests failed during the rotation: %s", failed.Load(), strings.Join(errs[:min(len(errs), 5)], "\n"))
	}
	var secret corev1.Secret
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: env.Namespace, Name: engine.DefaultWebhookSecret}, &secret); err != nil || len(secret.Data["tls.crt"]) == 0 {
		t.Errorf("the certificates' Secret: %v", err)
	}
}

// website is a Website of clean content, or an empty one to Get into.
func website(ns, name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "demo.example.com/v1", "kind": "Website",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec":     map[string]any{"content": "<p>hello</p>"},
	}}
}

func TestAnEngineInTheClusterIsReachedThroughItsServiceWhichNamesTheActingReplica(t *testing.T) {
	t.Parallel()
	env := clustertest.New(t)
	ctx := t.Context()
	// What the manifests make: the Service without a selector, and its
	// empty EndpointSlice.
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: env.Namespace, Name: "opkit-webhook"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "webhook", Port: 443, TargetPort: intstr.FromInt32(7383)}}}}
	if err := env.Client.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	slice := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: env.Namespace, Name: "opkit-webhook",
		Labels: map[string]string{discoveryv1.LabelServiceName: "opkit-webhook"}}, AddressType: discoveryv1.AddressTypeIPv4}
	if err := env.Client.Create(ctx, slice); err != nil {
		t.Fatal(err)
	}
	// The Pod's address is a documentation address: the API refuses a
	// loopback one in a slice, and routing it is the Service proxy's part.
	w := &engine.WebhookOptions{
		Service:  &engine.WebhookService{Namespace: env.Namespace, Name: "opkit-webhook", Port: 443},
		Endpoint: &engine.HooksEndpoint{Namespace: env.Namespace, Name: "opkit-webhook", IP: "192.0.2.10", Pod: "opkit-0"},
	}
	e, _, stop := startAdmissionEngine(t, env, admissionDefinition(t), w)
	_, port, _ := net.SplitHostPort(e.WebhookAddr())
	eventually(t, 30*time.Second, "the acting engine's address in the EndpointSlice", func(ctx context.Context) (bool, error) {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(slice), slice); err != nil {
			return false, err
		}
		return len(slice.Endpoints) == 1 && slice.Endpoints[0].Addresses[0] == "192.0.2.10" &&
			len(slice.Ports) == 1 && *slice.Ports[0].Name == "webhook" && fmt.Sprint(*slice.Ports[0].Port) == port, nil
	})
	var v admissionregistrationv1.ValidatingWebhookConfiguration
	if err := env.Client.Get(ctx, client.ObjectKey{Name: engine.WebhookConfigName("website", env.Namespace)}, &v); err != nil {
		t.Fatal(err)
	}
	ref := v.Webhooks[0].ClientConfig.Service
	if ref == nil || ref.Name != "opkit-webhook" || ref.Namespace != env.Namespace || *ref.Port != 443 || *ref.Path != "/validate/website/check-content" || v.Webhooks[0].ClientConfig.URL != nil {
		t.Fatalf("the webhook's client config %+v; want the Service opkit-webhook:443, path /validate/website/check-content", v.Webhooks[0].ClientConfig)
	}
	// The serving certificate is for the name the API server calls.
	conn, err := tls.Dial("tcp", e.WebhookAddr(), &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // the certificate's names are what is read
	if err != nil {
		t.Fatal(err)
	}
	if name := "opkit-webhook." + env.Namespace + ".svc"; conn.ConnectionState().PeerCertificates[0].VerifyHostname(name) != nil {
		t.Errorf("the serving certificate is not valid for %s: %v", name, conn.ConnectionState().PeerCertificates[0].DNSNames)
	}
	_ = conn.Close()
	// An engine of one namespace takes its webhooks with it.
	stop()
	if v, m, err := bundleCAs(ctx, env); err != nil || v != nil || m != nil {
		t.Errorf("after the engine stopped: webhooks %v, %v (%v); want none", v, m, err)
	}
}

func TestTheWebhooksGoWhenTheOperatorNoLongerHasAdmissionHandlers(t *testing.T) {
	t.Parallel()
	env := clustertest.New(t)
	withHandlers := admissionDefinition(t)
	e, _, _ := startAdmissionEngine(t, env, withHandlers, nil)
	ctx := t.Context()
	present := func() bool {
		t.Helper()
		v, m, err := bundleCAs(ctx, env)
		if err != nil {
			t.Fatal(err)
		}
		return v != nil || m != nil
	}
	if !present() {
		t.Fatal("no webhooks for the operator's admission handlers")
	}
	apply := func(file string) {
		t.Helper()
		defs, err := definition.CompileFiles(file)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Apply(ctx, defs[0]); err != nil {
			t.Fatal(err)
		}
	}
	apply("../../examples/website/operator.yaml") // the same operator, without them
	if present() {
		t.Error("the webhooks stay after the operator lost its admission handlers")
	}
	if out, _, err := applyWebsite(t, env, "bad", "<script>1</script>"); err != nil {
		t.Errorf("without admission handlers a Website is refused: %v\n%s", err, out)
	}
	apply(withHandlers)
	if !present() {
		t.Fatal("no webhooks once the handlers are back")
	}
	e.Remove(ctx, "website")
	if present() {
		t.Error("the webhooks stay after the operator is removed")
	}
}

func TestAnHTTPAdmissionHandlerAnswersWithTheBindingContextItIsPosted(t *testing.T) {
	t.Parallel()
	env := clustertest.New(t)
	var got atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var ctx struct {
			Operation string         `json:"operation"`
			Object    map[string]any `json:"object"`
			Request   struct{ Name string }
		}
		if err := json.NewDecoder(r.Body).Decode(&ctx); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		got.Store(ctx.Operation + " " + ctx.Request.Name)
		fmt.Fprint(w, `{"allowed": false, "message": "websites are closed today", "warnings": ["come back tomorrow"]}`)
	}))
	defer srv.Close()
	file := admissionDefinition(t, "    exec: {command: [./check-content.py]}", fmt.Sprintf("    http: {url: %q}", srv.URL))
	startAdmissionEngine(t, env, file, nil)
	out, _, err := applyWebsite(t, env, "site", "<h1>Hi</h1>")
	if err == nil || !strings.Contains(out, "websites are closed today") || !strings.Contains(out, "come back tomorrow") {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
	if g, _ := got.Load().(string); g != "CREATE site" {
		t.Errorf("the handler was posted %q; want the CREATE of site", g)
	}
}

// TestTheFinalizerPolicyGoesWhenNoEngineAsksForIt: the admission policy
// that AdmissionFinalizers installs is removed by an engine started
// without it, by the engine that removes its operator, and, for an
// Operator read from the cluster, with the Operator even while no engine
// runs: otherwise every deletion would wait for an engine that no longer
// removes the finalizer.
func TestTheFinalizerPolicyGoesWhenNoEngineAsksForIt(t *testing.T) {
	runsClusterOperators(t)
	env := clustertest.New(t)
	file, _ := tasksOperator(t)
	cleanUpTasks(t, env) // registered first: runs after the engines stop
	ctx := t.Context()
	// The policy of an engine that acts in one namespace is its own.
	policyOf := func(operator string) string { return "opkit-finalizer." + operator + "." + env.Namespace }
	present := func(name string) (policy, binding bool) {
		t.Helper()
		for _, obj := range []client.Object{&admissionregistrationv1.MutatingAdmissionPolicy{}, &admissionregistrationv1.MutatingAdmissionPolicyBinding{}} {
			err := env.Client.Get(ctx, client.ObjectKey{Name: name}, obj)
			if err != nil && !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}
			if _, isPolicy := obj.(*admissionregistrationv1.MutatingAdmissionPolicy); isPolicy {
				policy = err == nil
			} else {
				binding = err == nil
			}
		}
		return policy, binding
	}
	waitGoneAll := func(name, what string) {
		t.Helper()
		eventually(t, time.Minute, what, func(context.Context) (bool, error) {
			p, b := present(name)
			return !p && !b, nil
		})
	}
	with := engine.Options{Config: env.Config, Namespace: env.Namespace, AdmissionFinalizers: true}
	without := engine.Options{Config: env.Config, Namespace: env.Namespace}

	_, stop := runEngineWith(t, with, file)
	if p, b := present(policyOf("tasks")); !p || !b {
		t.Fatalf("with AdmissionFinalizers: policy %v, binding %v; want both", p, b)
	}
	stop()
	if p, b := present(policyOf("tasks")); !p || !b {
		t.Fatalf("after the engine stopped: policy %v, binding %v; want both kept", p, b)
	}
	_, stop = runEngineWith(t, without, file)
	waitGoneAll(policyOf("tasks"), "the policy removed by an engine started without AdmissionFinalizers")
	stop()

	// Removing the operator removes its policy.
	e, stop := runEngineWith(t, with, file)
	if p, _ := present(policyOf("tasks")); !p {
		t.Fatal("no policy once AdmissionFinalizers is back")
	}
	e.Remove(ctx, "tasks")
	waitGoneAll(policyOf("tasks"), "the policy of the removed operator")
	stop()

	// An Operator in the cluster owns its policy: deleting it while no
	// engine runs deletes the policy too.
	def, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	name := "chores-" + strings.ToLower(archive.NewID(time.Now())[12:])
	chores := strings.NewReplacer("name: tasks}", "name: "+name+"}", "group: handlers.example.com", "group: "+name+".example.com").Replace(string(def))
	e, stop = runEngineWith(t, with)
	watching, stopWatching := context.WithCancel(ctx)
	watched := make(chan error, 1)
	go func() { watched <- e.WatchOperators(watching) }()
	putOperator(t, env.Client, operatorObject(t, chores))
	waitOperator(t, env.Client, name, metav1.ConditionTrue, engine.ReasonRunning)
	if p, b := present(policyOf(name)); !p || !b {
		t.Fatalf("the cluster Operator's policy %v, binding %v; want both", p, b)
	}
	stopWatching()
	if err := <-watched; err != nil {
		t.Fatal(err)
	}
	stop()
	if err := env.Client.Delete(ctx, &v1alpha1.Operator{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
	waitGoneAll(policyOf(name), "the policy of the Operator deleted while no engine ran (garbage collected)")
}
