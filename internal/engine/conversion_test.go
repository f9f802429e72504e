package engine_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
	"github.com/opkit-dev/opkit/internal/engine"
	"github.com/opkit-dev/opkit/internal/migrate"
)

// The conversion tests run docs/examples/website-v2 in a group of their
// own: the Website CRD of demo.example.com is other tests'.
const (
	convGroup = "conversion.example.com"
	convCRD   = "websites." + convGroup
	convOp    = "conv-website"
)

// conversionExample writes docs/examples/website-v2 in convGroup, named
// convOp, with each of replace's strings replaced, and returns its path.
func conversionExample(t *testing.T, replace ...string) string {
	t.Helper()
	data, err := os.ReadFile("../../docs/examples/website-v2/operator.yaml")
	if err != nil {
		t.Fatal(err)
	}
	replace = append([]string{"group: demo.example.com", "group: " + convGroup, "  name: website\nspec:", "  name: " + convOp + "\nspec:"}, replace...)
	s := string(data)
	for i := 0; i+1 < len(replace); i += 2 {
		if !strings.Contains(s, replace[i]) {
			t.Fatalf("the example has no %q", replace[i])
		}
		s = strings.ReplaceAll(s, replace[i], replace[i+1])
	}
	path := filepath.Join(t.TempDir(), "operator.yaml")
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// websiteV1Only is the Website before it gained v2: v1 alone, stored.
const websiteV1Only = `apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: ` + convOp + `}
spec:
  resource:
    group: ` + convGroup + `
    kind: Website
    names: {shortNames: [site]}
    versions:
    - name: v1
      schema:
        type: object
        required: [content]
        properties:
          content: {type: string, maxLength: 65536}
          replicas: {type: integer, minimum: 0, maximum: 10, default: 1}
          size: {type: string, enum: [small, large]}
          legacy:
            type: object
            properties:
              banner: {type: string}
              color: {type: string}
      printerColumns:
      - {name: Replicas, jsonPath: .spec.replicas, type: integer}
      - {name: Size, jsonPath: .spec.size, type: string}
  children:
  - id: content
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: "${self.metadata.name}-content"
      data:
        index.html: "${self.spec.content}"
`

// convKubectl applies a manifest with the plane's kubectl (verb: apply or
// replace).
func convKubectl(t *testing.T, env *clustertest.Env, verb, manifest string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "object.yaml")
	if err := os.WriteFile(file, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	kubectl(t, verb, "-n", env.Namespace, "-f", file)
}

// getAt reads a Website at a version with kubectl get -o json.
func getAt(t *testing.T, env *clustertest.Env, version, name string) map[string]any {
	t.Helper()
	out := kubectl(t, "get", "websites."+version+"."+convGroup, name, "-n", env.Namespace, "-o", "json")
	var obj map[string]any
	if err := json.Unmarshal([]byte(out), &obj); err != nil {
		t.Fatalf("kubectl get %s at %s: %v", name, version, err)
	}
	return obj
}

func specOf(obj map[string]any) map[string]any {
	spec, _ := obj["spec"].(map[string]any)
	return spec
}

func annotationsOf(obj map[string]any) map[string]any {
	meta, _ := obj["metadata"].(map[string]any)
	a, _ := meta["annotations"].(map[string]any)
	return a
}

// storedVersions reads the CRD's status.storedVersions.
func storedVersions(t *testing.T, env *clustertest.Env) []string {
	t.Helper()
	var crd apiextensionsv1.CustomResourceDefinition
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: convCRD}, &crd); err != nil {
		t.Fatal(err)
	}
	return crd.Status.StoredVersions
}

// conversionCAs are the common names of the CAs of the CRD's conversion
// webhook's caBundle.
func conversionCAs(ctx context.Context, env *clustertest.Env) ([]string, error) {
	var crd apiextensionsv1.CustomResourceDefinition
	if err := env.Client.Get(ctx, client.ObjectKey{Name: convCRD}, &crd); err != nil {
		return nil, err
	}
	c := crd.Spec.Conversion
	if c == nil || c.Webhook == nil || c.Webhook.ClientConfig == nil {
		return nil, fmt.Errorf("the CRD has no conversion webhook: %+v", c)
	}
	return commonNames(c.Webhook.ClientConfig.CABundle), nil
}

// TestTheWebsiteGainsAV2ServedByTheEnginesConversionWebhook is the
// issue's acceptance: v1 and v2 served, v2 stored, objects written as v1
// read back as v2 and as v1 unchanged, through the engine's conversion
// webhook (across a rotation of its certificates); opkit migrate then
// turning v1 off leaves every object readable and storedVersions == [v2].
func TestTheWebsiteGainsAV2ServedByTheEnginesConversionWebhook(t *testing.T) {
	t.Parallel()
	env := clustertest.New(t)
	ctx := t.Context()
	v1Only := filepath.Join(t.TempDir(), "v1.yaml")
	if err := os.WriteFile(v1Only, []byte(websiteV1Only), 0o644); err != nil {
		t.Fatal(err)
	}
	// Certificates backdated an hour by the fake clock, due for rotation
	// when it reaches real time (as TestAForcedCertificateRotationFailsNoRequest).
	clk := clocktesting.NewFakeClock(time.Now().Add(-time.Hour))
	w := &engine.WebhookOptions{Clock: clk, CALifetime: 2 * time.Hour, ServingLifetime: 2 * time.Hour, Grace: time.Minute, CheckEvery: 100 * time.Millisecond}
	e, _, stop := startAdmissionEngine(t, env, v1Only, w)
	t.Cleanup(func() {
		_ = env.Client.Delete(context.Background(), &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: convCRD}})
	})

	// Before v2: Websites written as v1, stored as v1.
	for _, site := range []struct{ name, size string }{{"small", "small"}, {"large", "large"}} {
		convKubectl(t, env, "apply", fmt.Sprintf("apiVersion: %s/v1\nkind: Website\nmetadata: {name: %s}\nspec: {content: hi, size: %s, legacy: {banner: old}}\n", convGroup, site.name, site.size))
	}
	written := map[string]any{"content": "hi", "replicas": int64(1), "size": "small", "legacy": map[string]any{"banner": "old"}}

	// v2 stored, v1 converting: the change of storage version is not
	// breaking (the engine refuses breaking changes here), for the CRD
	// converts.
	v2, err := definition.CompileFiles(conversionExample(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Apply(ctx, v2[0]); err != nil {
		t.Fatalf("Apply of the Website with v2 stored and v1 converting: %v", err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := env.Client.Get(ctx, client.ObjectKey{Name: convCRD}, &crd); err != nil {
		t.Fatal(err)
	}
	if c := crd.Spec.Conversion; c == nil || c.Strategy != apiextensionsv1.WebhookConverter || c.Webhook.ClientConfig.URL == nil ||
		*c.Webhook.ClientConfig.URL != "https://"+e.WebhookAddr()+"/convert/"+convOp || len(c.Webhook.ClientConfig.CABundle) == 0 {
		t.Fatalf("the CRD's conversion: %+v; want the webhook at https://%s/convert/%s with a caBundle", c, e.WebhookAddr(), convOp)
	}

	badConversionRequests(t, e.WebhookAddr())

	// Written as v1: read as v2 (converted by the engine), and as v1
	// unchanged.
	small := getAt(t, env, "v2", "small")
	if got := specOf(small); !reflect.DeepEqual(got, map[string]any{"content": "hi", "replicas": float64(1), "resources": map[string]any{"memory": "512Mi"}}) {
		t.Errorf("small read as v2: spec %v; want memory 512Mi, and no legacy", got)
	}
	if a := annotationsOf(small); a["opkit.dev/conversion.v1"] == nil {
		t.Errorf("small read as v2: annotations %v; want v1's legacy kept in opkit.dev/conversion.v1", a)
	}
	if got := specOf(getAt(t, env, "v2", "large"))["resources"]; !reflect.DeepEqual(got, map[string]any{"memory": "2Gi"}) {
		t.Errorf("large read as v2: resources %v; want memory 2Gi", got)
	}
	v1 := getAt(t, env, "v1", "small")
	if got, _ := json.Marshal(specOf(v1)); string(got) != mustJSON(t, written) {
		t.Errorf("small read as v1: spec %s; want it as written, %s", got, mustJSON(t, written))
	}
	for k := range annotationsOf(v1) {
		if strings.HasPrefix(k, "opkit.dev/conversion.") {
			t.Errorf("small read as v1 carries %s", k)
		}
	}

	// The children are rendered from the Website as v2.
	eventually(t, 60*time.Second, "the Deployment of small with the memory of v2", func(ctx context.Context) (bool, error) {
		var d appsv1.Deployment
		err := env.Client.Get(ctx, client.ObjectKey{Namespace: env.Namespace, Name: "small"}, &d)
		if err != nil {
			return false, client.IgnoreNotFound(err)
		}
		return d.Spec.Template.Spec.Containers[0].Resources.Limits.Memory().String() == "512Mi", nil
	})

	// A v2-only field survives a read-modify-write through v1.
	convKubectl(t, env, "apply", fmt.Sprintf("apiVersion: %s/v2\nkind: Website\nmetadata: {name: secure}\nspec: {content: hi, resources: {memory: 1Gi}, tls: {enabled: true}}\n", convGroup))
	// (The engine writes it too, its finalizer and status: a conflict is
	// read again, as a client does.)
	eventually(t, 60*time.Second, "secure replaced through v1", func(ctx context.Context) (bool, error) {
		asV1 := getAt(t, env, "v1", "secure")
		if s := specOf(asV1); s["size"] != "large" || s["tls"] != nil {
			return false, fmt.Errorf("secure read as v1: spec %v; want size large and no tls", s)
		}
		specOf(asV1)["content"] = "changed through v1"
		data, err := json.Marshal(asV1)
		if err != nil {
			return false, err
		}
		file := filepath.Join(t.TempDir(), "secure.json")
		if err := os.WriteFile(file, data, 0o644); err != nil {
			return false, err
		}
		_, err = clustertest.Kubectl(t, clustertest.Cluster(t).KubeconfigPath(), "replace", "-n", env.Namespace, "-f", file)
		if err != nil && strings.Contains(err.Error(), "the object has been modified") {
			return false, nil
		}
		return err == nil, err
	})
	asV2 := getAt(t, env, "v2", "secure")
	if s := specOf(asV2); s["content"] != "changed through v1" || !reflect.DeepEqual(s["tls"], map[string]any{"enabled": true}) ||
		!reflect.DeepEqual(s["resources"], map[string]any{"memory": "1Gi"}) {
		t.Errorf("secure read as v2 after its v1 write: spec %v; want the new content, tls enabled and 1Gi kept", s)
	}
	if a := annotationsOf(asV2); a["opkit.dev/conversion.v2"] != nil {
		t.Errorf("secure read as v2 still carries what v1 kept of it: %v", a)
	}

	// A forced rotation of the certificates, then a restart of the
	// operator: a client lists the Websites as v1 (each converted from v2
	// or v1) throughout, and none fails.
	var ok, failed atomic.Int64
	var mu sync.Mutex
	var errs []string
	halt := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-halt:
				return
			default:
			}
			list := &unstructured.UnstructuredList{}
			list.SetAPIVersion(convGroup + "/v1")
			list.SetKind("WebsiteList")
			if err := env.Client.List(ctx, list, client.InNamespace(env.Namespace)); err != nil || len(list.Items) != 3 {
				failed.Add(1)
				mu.Lock()
				errs = append(errs, fmt.Sprintf("%d items, %v", len(list.Items), err))
				mu.Unlock()
				continue
			}
			ok.Add(1)
		}
	}()
	stopClient := sync.OnceFunc(func() { close(halt); <-done })
	defer stopClient()
	reads := func(n int64, what string) {
		t.Helper()
		from := ok.Load()
		eventually(t, 60*time.Second, fmt.Sprintf("%d reads %s", n, what), func(context.Context) (bool, error) {
			return ok.Load() >= from+n, nil
		})
	}
	reads(5, "before the rotation")
	first, err := conversionCAs(ctx, env)
	if err != nil || len(first) != 1 {
		t.Fatalf("the CRD's caBundle before the rotation: %v, %v; want one CA", first, err)
	}
	clk.Step(time.Hour + time.Minute)
	var both []string
	eventually(t, 30*time.Second, "the new CA in the CRD's caBundle", func(ctx context.Context) (bool, error) {
		v, err := conversionCAs(ctx, env)
		both = v
		return len(v) == 2 && v[0] == first[0], err
	})
	// The grace: the API server takes the new bundle.
	time.Sleep(3 * time.Second)
	reads(5, "with two CAs trusted")
	clk.Step(time.Minute)
	eventually(t, 30*time.Second, "the new CA's certificate served", func(context.Context) (bool, error) {
		issuer, err := servedIssuer(e.WebhookAddr())
		return issuer == both[1], err
	})
	reads(10, "with the new certificate")
	clk.Step(time.Minute)
	eventually(t, 30*time.Second, "the old CA removed from the CRD's caBundle", func(ctx context.Context) (bool, error) {
		v, err := conversionCAs(ctx, env)
		return len(v) == 1 && v[0] == both[1], err
	})
	reads(10, "after the rotation")
	// The operator restarts (its definition applied again): its
	// conversion is answered throughout.
	if err := e.Apply(ctx, v2[0]); err != nil {
		t.Fatalf("Apply again: %v", err)
	}
	reads(10, "after the operator restarted")
	stopClient()
	t.Logf("%d reads as v1 during the rotation and the restart, %d failed", ok.Load(), failed.Load())
	if failed.Load() > 0 {
		t.Errorf("%d reads failed during the rotation or the restart: %s", failed.Load(), strings.Join(errs[:min(len(errs), 5)], "\n"))
	}

	// opkit migrate: every object stored as v2, storedVersions [v2].
	if got := storedVersions(t, env); !slices.Equal(got, []string{"v1", "v2"}) {
		t.Errorf("storedVersions before the migration: %v; want [v1 v2]", got)
	}
	report, err := migrate.CRD(ctx, convCRD, migrate.Options{Config: env.Config})
	if err != nil {
		t.Fatalf("migrate: %v", err)
	}
	if report.Counts.Failed > 0 || report.Counts.Total() != 3 {
		t.Errorf("migrate: %s; want 3 objects and none failed", report)
	}
	if got := storedVersions(t, env); !slices.Equal(got, []string{"v2"}) {
		t.Fatalf("storedVersions after the migration: %v; want [v2]", got)
	}

	// Turning v1 off is breaking: refused without --allow-breaking.
	off, err := definition.CompileFiles(conversionExample(t, "    - name: v1\n", "    - name: v1\n      served: false\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Apply(ctx, off[0]); !errors.As(err, new(*engine.BreakingChangeError)) {
		t.Fatalf("Apply of v1 no longer served without AllowBreaking: %v; want a BreakingChangeError", err)
	}
	// An engine that allows it, on the same certificates.
	stop()
	e2, _ := runEngineWith(t, engine.Options{Config: env.Config, Namespace: env.Namespace, Archive: newArchive(t), AllowBreaking: true,
		Webhook: &engine.WebhookOptions{Addr: "127.0.0.1:0"}}, conversionExample(t, "    - name: v1\n", "    - name: v1\n      served: false\n"))
	if err := env.Client.Get(ctx, client.ObjectKey{Name: convCRD}, &crd); err == nil {
		if got := *crd.Spec.Conversion.Webhook.ClientConfig.URL; got != "https://"+e2.WebhookAddr()+"/convert/"+convOp {
			t.Errorf("the CRD's conversion webhook after the restart: %s; want the new engine's", got)
		}
	}
	readable := func(what string) {
		t.Helper()
		for _, name := range []string{"small", "large", "secure"} {
			if s := specOf(getAt(t, env, "v2", name)); s["content"] == nil || s["resources"] == nil {
				t.Errorf("%s, %s: spec %v read as v2", what, name, s)
			}
		}
		if got := storedVersions(t, env); !slices.Equal(got, []string{"v2"}) {
			t.Errorf("%s: storedVersions %v; want [v2]", what, got)
		}
	}
	readable("v1 no longer served")
	if out, err := clustertest.Kubectl(t, clustertest.Cluster(t).KubeconfigPath(), "get", "websites.v1."+convGroup, "small", "-n", env.Namespace); err == nil {
		t.Errorf("v1 no longer served, and kubectl get at v1 gives %s", out)
	}

	// v1 removed: the CRD has no conversion left.
	gone, err := definition.CompileFiles(withoutV1(t, conversionExample(t)))
	if err != nil {
		t.Fatal(err)
	}
	if err := e2.Apply(ctx, gone[0]); err != nil {
		t.Fatalf("Apply of the Website without v1: %v", err)
	}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: convCRD}, &crd); err != nil {
		t.Fatal(err)
	}
	if len(crd.Spec.Versions) != 1 || crd.Spec.Versions[0].Name != "v2" || crd.Spec.Conversion.Strategy != apiextensionsv1.NoneConverter {
		t.Errorf("the CRD without v1: versions %v, conversion %s; want v2 alone, None", crd.Spec.Versions, crd.Spec.Conversion.Strategy)
	}
	readable("v1 removed")
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: env.Namespace, Name: "small"}, &appsv1.Deployment{}); apierrors.IsNotFound(err) {
		t.Errorf("the Deployment of small is gone")
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// withoutV1 rewrites the example of file without its version v1.
func withoutV1(t *testing.T, file string) string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	from, to := strings.Index(s, "    - name: v1\n"), strings.Index(s, "    - name: v2\n")
	if from < 0 || to < from {
		t.Fatalf("%s has no v1 before v2", file)
	}
	if err := os.WriteFile(file, []byte(s[:from]+s[to:]), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// badConversionRequests posts what no API server sends to the conversion
// path: each gets a status and an error that says what is wrong.
func badConversionRequests(t *testing.T, addr string) {
	t.Helper()
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the answers are read, not trusted
	url := "https://" + addr + "/convert/" + convOp
	review := `{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{"uid":"u1","desiredAPIVersion":"other.example.com/v1","objects":[{"apiVersion":"` + convGroup + `/v1","kind":"Website","metadata":{"name":"x"}}]}}`
	for _, c := range []struct {
		what, method, url, body string
		status                  int
		says                    string
	}{
		{"a GET", http.MethodGet, url, "", http.StatusMethodNotAllowed, "POSTed"},
		{"not JSON", http.MethodPost, url, "<html>", http.StatusBadRequest, "not a ConversionReview with a request"},
		{"no request", http.MethodPost, url, `{"kind":"ConversionReview"}`, http.StatusBadRequest, "not a ConversionReview with a request"},
		{"another operator", http.MethodPost, "https://" + addr + "/convert/nope", review, http.StatusNotFound, `no conversion of operator "nope"`},
		{"a body over the cap", http.MethodPost, url, `{"x":"` + strings.Repeat("a", 9<<20) + `"}`, http.StatusRequestEntityTooLarge, "larger than"},
		{"another group", http.MethodPost, url, review, http.StatusOK, "is not of group " + convGroup},
	} {
		req, err := http.NewRequestWithContext(t.Context(), c.method, c.url, strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", c.what, err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != c.status || !strings.Contains(string(body), c.says) {
			t.Errorf("%s: %d %s; want %d saying %q", c.what, resp.StatusCode, body, c.status, c.says)
		}
	}
}
