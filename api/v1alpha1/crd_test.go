package v1alpha1_test

import (
	"context"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
)

func TestMain(m *testing.M) { clustertest.Main(m) }

func printer(name string) *v1alpha1.Operator {
	return &v1alpha1.Operator{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.OperatorSpec{
			Resource: v1alpha1.Resource{
				Group: "demo.example.com", Kind: "Printer",
				Versions: []v1alpha1.ResourceVersion{{
					Name: "v1",
					Schema: &apiextensionsv1.JSONSchemaProps{Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"text": {Type: "string", MaxLength: ptr.To(int64(256))},
					}},
					PrinterColumns: []apiextensionsv1.CustomResourceColumnDefinition{{Name: "Text", Type: "string", JSONPath: ".spec.text"}},
				}},
			},
			Children: []v1alpha1.Child{{
				ID:       "pod",
				Template: apiextensionsv1.JSON{Raw: []byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"${self.metadata.name}-print"}}`)},
			}},
			Status: map[string]string{"phase": "${children.pod.status.phase}"},
		},
	}
}

// hookSecret is a webhook source's Secret key.
var hookSecret = v1alpha1.SecretKeySelector{Namespace: "ops", Name: "hook", Key: "secret"}

func TestOperatorCRDAcceptsValidAndRefusesInvalidOperators(t *testing.T) {
	env := clustertest.New(t)
	ctx := t.Context()
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	installOperatorCRD(t, c)
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		return c.Create(ctx, printer("printer")) == nil, nil
	})
	if err != nil {
		t.Fatalf("a valid Operator was not accepted: %v", c.Create(ctx, printer("printer-again")))
	}
	var got v1alpha1.Operator
	if err := c.Get(ctx, client.ObjectKey{Name: "printer"}, &got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.Resource.Versions[0].Schema.Properties["text"].MaxLength == nil || len(got.Spec.Children) != 1 {
		t.Errorf("the stored Operator lost fields: %+v", got.Spec)
	}
	// An Operator of webhook sources alone, with every verification.
	hooks := &v1alpha1.Operator{ObjectMeta: metav1.ObjectMeta{Name: "hooks"}, Spec: v1alpha1.OperatorSpec{
		Sources: []v1alpha1.Source{
			{Name: "github", Webhook: &v1alpha1.WebhookSource{GitHub: &v1alpha1.WebhookSecret{SecretRef: hookSecret}, MaxBodyBytes: 4096}, Filter: "event == 'push'"},
			{Name: "ci", Webhook: &v1alpha1.WebhookSource{HMAC: &v1alpha1.HMACVerification{Header: "X-Signature", Prefix: "sha256=", SecretRef: hookSecret}, DeliveryHeader: "X-Delivery"}},
			{Name: "pager", Webhook: &v1alpha1.WebhookSource{Bearer: &v1alpha1.WebhookSecret{SecretRef: hookSecret}}},
		},
		Handlers: []v1alpha1.Handler{{Name: "notify", On: []string{v1alpha1.OnEvent}, Sources: []string{"github"}, Exec: &v1alpha1.ExecAction{Command: []string{"true"}}}},
	}}
	if err := c.Create(ctx, hooks); err != nil {
		t.Errorf("an Operator with webhook sources was refused: %v", err)
	}
	if err := c.Get(ctx, client.ObjectKey{Name: "hooks"}, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Spec.Sources) != 3 || got.Spec.Sources[1].Webhook.HMAC.Header != "X-Signature" || got.Spec.Handlers[0].Sources[0] != "github" {
		t.Errorf("the stored Operator lost source fields: %+v", got.Spec)
	}

	for _, tc := range []struct {
		name   string
		mutate func(*v1alpha1.Operator)
		want   string
	}{
		{"bad group", func(o *v1alpha1.Operator) { o.Spec.Resource.Group = "nodot" }, "spec.resource.group"},
		{"bad kind", func(o *v1alpha1.Operator) { o.Spec.Resource.Kind = "printer" }, "spec.resource.kind"},
		{"no versions", func(o *v1alpha1.Operator) { o.Spec.Resource.Versions = nil }, "spec.resource.versions"},
		{"two storage versions", func(o *v1alpha1.Operator) {
			o.Spec.Resource.Versions = []v1alpha1.ResourceVersion{{Name: "v1", Storage: true}, {Name: "v2", Storage: true}}
		}, "exactly one version must set storage: true"},
		{"duplicate child id", func(o *v1alpha1.Operator) {
			o.Spec.Children = append(o.Spec.Children, o.Spec.Children[0])
		}, "Duplicate value"},
		{"bad child id", func(o *v1alpha1.Operator) { o.Spec.Children[0].ID = "My-Pod" }, "spec.children[0].id"},
		{"unverified source", func(o *v1alpha1.Operator) {
			o.Spec.Sources = []v1alpha1.Source{{Name: "github", Webhook: &v1alpha1.WebhookSource{}}}
		}, "set exactly one of github, hmac and bearer"},
		{"two verifications", func(o *v1alpha1.Operator) {
			o.Spec.Sources = []v1alpha1.Source{{Name: "github", Webhook: &v1alpha1.WebhookSource{
				GitHub: &v1alpha1.WebhookSecret{SecretRef: hookSecret}, Bearer: &v1alpha1.WebhookSecret{SecretRef: hookSecret}}}}
		}, "set exactly one of github, hmac and bearer"},
		{"conversion on the storage version", func(o *v1alpha1.Operator) {
			o.Spec.Resource.Versions[0].Storage = true
			o.Spec.Resource.Versions[0].Conversion = &v1alpha1.VersionConversion{}
		}, "the storage version is the hub"},
		{"conversion one way only", func(o *v1alpha1.Operator) {
			o.Spec.Resource.Versions = append(o.Spec.Resource.Versions, v1alpha1.ResourceVersion{Name: "v2", Storage: true})
			o.Spec.Resource.Versions[0].Conversion = &v1alpha1.VersionConversion{Fields: []v1alpha1.FieldConversion{{Field: "spec.text", ToStorage: "self"}}}
		}, "give toStorage and fromStorage together"},
		{"body over 25 MiB", func(o *v1alpha1.Operator) {
			o.Spec.Sources = []v1alpha1.Source{{Name: "github", Webhook: &v1alpha1.WebhookSource{GitHub: &v1alpha1.WebhookSecret{SecretRef: hookSecret}, MaxBodyBytes: 26214401}}}
		}, "spec.sources[0].webhook.maxBodyBytes"},
	} {
		op := printer("invalid")
		tc.mutate(op)
		err := c.Create(ctx, op)
		if err == nil {
			_ = c.Delete(ctx, op)
			t.Errorf("%s: accepted", tc.name)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %q does not mention %q", tc.name, err, tc.want)
		}
	}
}
