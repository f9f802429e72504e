package engine_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
)

func TestHostilePrinterTextIsRefusedOrPrintedVerbatim(t *testing.T) {
	t.Parallel()
	env := clustertest.New(t)
	startEngine(t, env, "../../examples/printer/operator.yaml")
	ctx := t.Context()

	// Refused by the schema, with the field named.
	for name, text := range map[string]string{"ten-kb": strings.Repeat("0123456789", 1024), "empty": ""} {
		err := env.Client.Create(ctx, printer(env.Namespace, name, text))
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.text") {
			t.Errorf("Printer %s: created or refused for another reason: %v", name, err)
		}
	}

	// Printed as one argument, exactly.
	texts := map[string]string{
		"subshell":  "$(rm -rf /)",
		"variable":  "$(HOME) $(OPKIT_POD_ROOT) $HOME",
		"dollars":   "$$ $$(HOME) $",
		"semicolon": "; echo pwned",
		"quotes":    `"double" 'single' \back\slash`,
		"newlines":  "line one\nline two\n\ttabbed",
		"template":  "${self.metadata.name} $${x}",
		"unicode":   "héllo 世界 \u00ff\u202e",
		"max":       strings.Repeat("y", 256),
	}
	for name, text := range texts {
		if err := env.Client.Create(ctx, printer(env.Namespace, name, text)); err != nil {
			t.Fatalf("Printer %s: %v", name, err)
		}
	}
	// Bytes that are not UTF-8, sent raw: the API server stores them as
	// U+FFFD (or refuses them); what it stores is what gets printed.
	hc, err := rest.HTTPClientFor(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	body := fmt.Sprintf(`{"apiVersion":"demo.example.com/v1","kind":"Printer","metadata":{"name":"not-utf8"},"spec":{"text":"a%sb"}}`, "\xff\xfe")
	resp, err := hc.Post(env.Config.Host+"/apis/demo.example.com/v1/namespaces/"+env.Namespace+"/printers", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	t.Logf("a Printer with bytes that are not UTF-8: %s", resp.Status)
	if resp.StatusCode == http.StatusCreated {
		p := printer(env.Namespace, "not-utf8", "")
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
			t.Fatal(err)
		}
		stored, _, _ := unstructured.NestedString(p.Object, "spec", "text")
		if !utf8.ValidString(stored) {
			t.Errorf("the API server stored invalid UTF-8: %q", stored)
		}
		texts["not-utf8"] = stored
	} else if resp.StatusCode != http.StatusBadRequest && resp.StatusCode != http.StatusUnprocessableEntity {
		t.Errorf("a Printer with bytes that are not UTF-8: %s", resp.Status)
	}

	for name, text := range texts {
		pod := &corev1.Pod{}
		eventually(t, 90*time.Second, "the Pod of "+name+" succeeds", func(ctx context.Context) (bool, error) {
			if err := env.Client.Get(ctx, client.ObjectKey{Namespace: env.Namespace, Name: name + "-print"}, pod); err != nil {
				return false, client.IgnoreNotFound(err)
			}
			return pod.Status.Phase == corev1.PodSucceeded, nil
		})
		if n := len(pod.Spec.Containers[0].Command); n != 2 {
			t.Errorf("%s: %d arguments, want 2: %q", name, n, pod.Spec.Containers[0].Command)
		}
		if log := kubectl(t, "logs", "-n", env.Namespace, name+"-print"); log != text+"\n" {
			t.Errorf("%s: printed %q, want %q", name, log, text+"\n")
		}
	}
}
