package engine

import (
	"encoding/json"
	"os"
	"testing"
	"time"

	openapispec "k8s.io/kube-openapi/pkg/validation/spec"
	"k8s.io/kube-openapi/pkg/validation/strfmt"
	"k8s.io/kube-openapi/pkg/validation/validate"

	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/cause"
	"github.com/opkit-dev/opkit/internal/executor"
	"github.com/opkit-dev/opkit/internal/run"
)

// The JSON Schemas in docs/schemas describe what the code does: a binding
// context the engine builds validates, and the schema of results accepts
// and refuses what executor.ParseResult does.

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

func TestBindingContextMatchesItsSchema(t *testing.T) {
	t.Parallel()
	s := loadSchema(t, "../../docs/schemas/binding-context.schema.json")
	old := map[string]any{"text": "a", "size": int64(1)}
	cur := map[string]any{"text": "b", "color": "red"}
	ctx := run.BindingContext{
		Operator: "printer", Handler: "announce", Trigger: "update", RunID: archive.NewID(nowForTest()),
		IdempotencyKey: "0b6a3f2e-1c1d-4b8e-9a39-2f1d7f4b1a11/3/announce", Attempt: 2,
		Object: map[string]any{"apiVersion": "demo.example.com/v1", "kind": "Printer", "metadata": map[string]any{"name": "p"}, "spec": cur},
		Old:    old, Diff: cause.Diff(old, cur),
		Children: run.RedactSecrets(map[string]map[string]any{
			"pod":    {"apiVersion": "v1", "kind": "Pod"},
			"secret": {"apiVersion": "v1", "kind": "Secret", "data": map[string]any{"password": "c2VjcmV0"}},
		}),
		Related: run.RedactRelatedSecrets(map[string]any{
			"app":  map[string]any{"apiVersion": "apps/v1", "kind": "Deployment"},
			"keys": []any{map[string]any{"apiVersion": "v1", "kind": "Secret", "data": map[string]any{"k": "dg=="}}},
		}),
	}
	if err := validates(s, ctx); err != nil {
		t.Errorf("a binding context does not match its schema: %v", err)
	}
	if _, leaked := ctx.Children["secret"]["data"]; leaked {
		t.Error("a Secret child's data reached the binding context")
	}
	if _, leaked := ctx.Related["keys"].([]any)[0].(map[string]any)["data"]; leaked {
		t.Error("a related Secret's data reached the binding context")
	}
	create := ctx
	create.Trigger, create.Old, create.Diff, create.Children = "create", nil, nil, nil
	if err := validates(s, create); err != nil {
		t.Errorf("a create context does not match: %v", err)
	}
	event := run.BindingContext{
		Operator: "deployer", Handler: "acknowledge", Trigger: "event", RunID: archive.NewID(nowForTest()),
		IdempotencyKey: "deployer/event/github/72d3162e/acknowledge", Attempt: 1,
		Event: &run.EventContext{ID: archive.NewID(nowForTest()), Source: "github", DeliveryID: "72d3162e", Event: "issue_comment",
			ReceivedAt: nowForTest().Format(time.RFC3339Nano), Headers: map[string]string{"x-github-event": "issue_comment"},
			Payload: json.RawMessage(`{"action": "created"}`)},
	}
	if err := validates(s, event); err != nil {
		t.Errorf("an event run's context does not match: %v", err)
	}
	bad := ctx
	bad.Trigger = "explode"
	if validates(s, bad) == nil {
		t.Error("the schema accepts an unknown trigger")
	}
}

func TestResultSchemaAgreesWithParseResult(t *testing.T) {
	t.Parallel()
	s := loadSchema(t, "../../docs/schemas/result.schema.json")
	for _, c := range []struct {
		name, result string
	}{
		{"empty", `{}`},
		{"full", `{"status": {"url": "https://x"}, "events": [{"type": "Warning", "reason": "Slow", "message": "took long"}], "requeueAfter": "1m30s"}`},
		{"error", `{"error": {"message": "quota exceeded", "permanent": true}}`},
		{"reserved status", `{"status": {"conditions": []}}`},
		{"own status", `{"status": {"opkit": {}}}`},
		{"event type", `{"events": [{"type": "Loud", "reason": "X", "message": "m"}]}`},
		{"event reason", `{"events": [{"reason": "", "message": "m"}]}`},
		{"unknown field", `{"stauts": {}}`},
		{"requeue", `{"requeueAfter": "soon"}`},
		{"error message", `{"error": {"permanent": true}}`},
		{"refuse", `{"refuse": "mallory is not a member of org/deployers"}`},
		{"admission answer", `{"allowed": false, "message": "no <script>", "warnings": ["w"]}`},
		{"admission patch", `{"allowed": true, "patch": {"spec": {"replicas": 1}}}`},
		{"admission allowed", `{"allowed": "yes"}`},
	} {
		var doc any
		if err := json.Unmarshal([]byte(c.result), &doc); err != nil {
			t.Fatal(err)
		}
		_, parseErr := executor.ParseResult([]byte(c.result))
		schemaErr := validate.AgainstSchema(s, doc, strfmt.Default)
		if (parseErr == nil) != (schemaErr == nil) {
			t.Errorf("%s: ParseResult says %v, the schema says %v", c.name, parseErr, schemaErr)
		}
	}
}

func nowForTest() time.Time { return time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC) }
