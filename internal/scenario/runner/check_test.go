package runner

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/opkit-dev/opkit/internal/scenario"
)

// loadScenario writes a scenario beside the database example's operator
// and loads it.
func loadScenario(t *testing.T, steps string) *scenario.Scenario {
	t.Helper()
	operator, err := filepath.Abs("../../../examples/database/operator.yaml")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "s.test.yaml")
	data := fmt.Sprintf("scenario: s\noperators: [%s]\nsteps:\n%s", operator, steps)
	if err := os.WriteFile(file, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	scs, err := scenario.LoadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return scs[0]
}

func TestCheckTakesTheTriggersOfStateMachines(t *testing.T) {
	sc := loadScenario(t, `- expect: {run: {handler: announce, trigger: enter, outcome: Succeeded}}
- expect: {run: {trigger: initial, to: Provisioning}}
- expect: {run: {trigger: guard, from: Verifying, to: NeedsAttention, count: 1}}
- expect: {run: {trigger: decision}}
- expect: {run: {trigger: timeout, from: Upgrading}}
`)
	if err := Check(sc); err != nil {
		t.Errorf("Check refused expects of enter runs and of transitions:\n%v", err)
	}
}

func TestCheckRefusesARunThatCannotHappen(t *testing.T) {
	sc := loadScenario(t, `- expect: {run: {handler: announce, trigger: exit}}
- expect: {run: {handler: announce, trigger: create}}
- expect: {run: {handler: announce, trigger: requeue}}
- expect: {run: {trigger: guard, to: Redy}}
- expect: {run: {trigger: initial, from: Ready}}
`)
	err := Check(sc)
	var errs scenario.Errors
	if !errors.As(err, &errs) {
		t.Fatalf("got %v, want scenario.Errors", err)
	}
	want := []string{
		"steps[0].expect.run: handler announce never runs on exit: it runs on enter",
		"steps[1].expect.run: handler announce never runs on create: it runs on enter",
		// requeue: any handler that asks for it
		`steps[3].expect.run: operator database has no state "Redy"; its states: Provisioning, Ready, Upgrading, Verifying, NeedsAttention, RollingBack`,
		"steps[4].expect.run: an initial transition leaves no state: remove from",
	}
	var got []string
	for _, e := range errs {
		got = append(got, e.Field+": "+e.Message)
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestCheckRefusesTransitionsOfAnOperatorWithoutStates(t *testing.T) {
	operator, err := filepath.Abs("../../../examples/printer/operator.yaml")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "s.test.yaml")
	if err := os.WriteFile(file, []byte("scenario: s\noperators: ["+operator+"]\nsteps:\n- expect: {run: {trigger: guard}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	scs, err := scenario.LoadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := Check(scs[0]); err == nil || !strings.Contains(err.Error(), "steps[0].expect.run: operator printer has no states: its objects make no state transitions") {
		t.Errorf("got %v", err)
	}
}

func TestRefusalHoldsARequestToWhatItsStepExpects(t *testing.T) {
	gk := schema.GroupKind{Group: "demo.example.com", Kind: "Database"}
	invalid := fmt.Errorf("patching Database/orders: %w", apierrors.NewInvalid(gk, "orders", field.ErrorList{
		field.Forbidden(field.NewPath("spec", "version"), "spec.version cannot change while the Database is NeedsAttention"),
	}))
	denied := apierrors.NewForbidden(schema.GroupResource{Group: "demo.example.com", Resource: "websites"}, "hello", errors.New(`admission webhook "check-content.website.opkit.dev" denied the request: no scripts`))
	notFound := apierrors.NewNotFound(schema.GroupResource{Group: "demo.example.com", Resource: "databases"}, "orders")
	want := func(msg string) *scenario.Refused { return &scenario.Refused{Message: msg} }
	for _, c := range []struct {
		name string
		want *scenario.Refused
		err  error
		fail string // what the failure says; "" when the step passes
	}{
		{"accepted, as expected", nil, nil, ""},
		{"refused by a rule, as expected", want("cannot change while the Database is NeedsAttention"), invalid, ""},
		{"denied by an admission handler, as expected", want("no scripts"), denied, ""},
		{"accepted, where a refusal was expected", want("cannot change"), nil, "accepted, not refused\n  expected: refused, with a message containing \"cannot change\"\n  found:    accepted: the API server made the change"},
		{"refused with another message", want("is immutable"), invalid, "refused with another message\n  expected: a message containing \"is immutable\""},
		{"refused, where acceptance was expected", nil, invalid, "refused by the API server\n  expected: accepted\n  found:    Database.demo.example.com \"orders\" is invalid: spec.version: Forbidden: spec.version cannot change"},
		{"an error that is not a refusal", want("cannot change"), notFound, `expected a refusal with a message containing "cannot change"; failed otherwise: databases.demo.example.com "orders" not found`},
		{"an error that is not a refusal, none expected", nil, notFound, `databases.demo.example.com "orders" not found`},
	} {
		err := refusal(c.want, c.err)
		switch {
		case c.fail == "" && err != nil:
			t.Errorf("%s: the step failed: %v", c.name, err)
		case c.fail != "" && (err == nil || !strings.HasPrefix(err.Error(), c.fail)):
			t.Errorf("%s: got %v, want a failure starting with %q", c.name, err, c.fail)
		}
	}
}
