package scenario

import (
	"encoding/json"
	"reflect"
	"slices"
	"testing"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
)

func TestSchemaIsJSONWithATitleForEveryField(t *testing.T) {
	var doc map[string]any
	if err := json.Unmarshal(Schema(), &doc); err != nil {
		t.Fatal(err)
	}
	if _, err := compiledSchema(); err != nil {
		t.Fatal(err)
	}
	var walk func(path string, s map[string]any)
	walk = func(path string, s map[string]any) {
		props, _ := s["properties"].(map[string]any)
		for name, p := range props {
			p, ok := p.(map[string]any)
			if !ok {
				continue // false: a field that is not allowed
			}
			if propertyTitle("#"+path, name) == "" && p["$ref"] != "#/$defs/"+name {
				t.Errorf("%s/properties/%s has no title", path, name)
			}
			walk(path+"/properties/"+name, p)
		}
	}
	walk("", doc)
	for name, def := range doc["$defs"].(map[string]any) {
		walk("/$defs/"+name, def.(map[string]any))
		if def.(map[string]any)["title"] == nil {
			t.Errorf("$defs/%s has no title", name)
		}
	}
}

func TestSchemaStepsAreTheStepKinds(t *testing.T) {
	got := propertyNames(schemaURL + "#/$defs/step")
	if want := append(append([]string{"name"}, stepKinds...), "refused"); !reflect.DeepEqual(got, want) {
		t.Errorf("step properties: got %v, want %v", got, want)
	}
	if got := choices(schemaURL+"#/$defs/step", "oneOf"); !reflect.DeepEqual(got, stepKinds) {
		t.Errorf("step oneOf: got %v, want %v", got, stepKinds)
	}
}

func TestSchemaEnumsAreTheEnginesValues(t *testing.T) {
	enum := func(path ...string) []string {
		var out []string
		for _, n := range schemaAt(schemaURL+"#/$defs", path...).Content {
			out = append(out, n.Value)
		}
		return out
	}
	// Every trigger a run records, as opkit runs --trigger takes them:
	// the handlers', then the state transitions'.
	triggers := []string{v1alpha1.OnCreate, v1alpha1.OnUpdate, v1alpha1.OnDelete, v1alpha1.OnResume,
		v1alpha1.OnSchedule, v1alpha1.OnWhen, v1alpha1.OnEvent, v1alpha1.TriggerRequeue,
		v1alpha1.OnValidate, v1alpha1.OnMutate, v1alpha1.OnEnter, v1alpha1.OnExit}
	triggers = append(triggers, TransitionTriggers...)
	if got := enum("expectRun", "properties", "trigger", "enum"); !reflect.DeepEqual(got, triggers) {
		t.Errorf("triggers: got %v, want %v", got, triggers)
	}
	if got := enum("expectRun", "if", "properties", "trigger", "enum"); !reflect.DeepEqual(got, TransitionTriggers) {
		t.Errorf("the transitions' triggers of the schema's if: got %v, want %v", got, TransitionTriggers)
	}
	var outcomes []string
	for _, o := range []archive.Outcome{archive.Running, archive.Succeeded, archive.Failed, archive.GaveUp, archive.Cancelled, archive.Skipped, archive.Allowed, archive.Denied} {
		outcomes = append(outcomes, string(o))
	}
	if got := enum("expectRun", "properties", "outcome", "enum"); !reflect.DeepEqual(got, outcomes) {
		t.Errorf("outcomes: got %v, want %v", got, outcomes)
	}
}

func TestSchemaReturnsACopy(t *testing.T) {
	s := Schema()
	s[0] = 'x'
	if slices.Equal(s, Schema()) {
		t.Error("changing what Schema returned changed the schema")
	}
}
