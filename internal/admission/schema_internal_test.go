package admission

import (
	"encoding/json"
	"os"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	openapispec "k8s.io/kube-openapi/pkg/validation/spec"
	"k8s.io/kube-openapi/pkg/validation/strfmt"
	"k8s.io/kube-openapi/pkg/validation/validate"

	"github.com/opkit-dev/opkit/internal/archive"
)

// docs/schemas/admission-context.schema.json describes the binding
// context an admission handler gets.

func loadSchema(t *testing.T, path string) *openapispec.Schema {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := &openapispec.Schema{}
	if err := json.Unmarshal(data, s); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return s
}

func validates(s *openapispec.Schema, v any) error {
	data, _ := json.Marshal(v)
	var doc any
	_ = json.Unmarshal(data, &doc)
	return validate.AgainstSchema(s, doc, strfmt.Default)
}

func TestAdmissionContextMatchesItsSchema(t *testing.T) {
	s := loadSchema(t, "../../docs/schemas/admission-context.schema.json")
	ctx := admissionContext{
		Operator: "website", Handler: "check-content", Trigger: "validate", RunID: archive.NewID(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)), Operation: "CREATE",
		Object:   map[string]any{"apiVersion": "demo.example.com/v1", "kind": "Website", "metadata": map[string]any{"name": "bad"}, "spec": map[string]any{"content": "x"}},
		UserInfo: authenticationv1.UserInfo{Username: "admin", Groups: []string{"system:masters"}},
		Request: admissionRequest{UID: "5e4c", Kind: metav1.GroupVersionKind{Group: "demo.example.com", Version: "v1", Kind: "Website"},
			Resource: metav1.GroupVersionResource{Group: "demo.example.com", Version: "v1", Resource: "websites"}, Namespace: "default", Name: "bad"},
	}
	if err := validates(s, ctx); err != nil {
		t.Errorf("an admission context does not match its schema: %v", err)
	}
	del := ctx
	del.Operation, del.Object, del.OldObject, del.DryRun = "DELETE", nil, ctx.Object, true
	if err := validates(s, del); err != nil {
		t.Errorf("a delete's context does not match: %v", err)
	}
}
