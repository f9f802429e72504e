package definition_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/opkit-dev/opkit/internal/definition"
)

const rolloutOperator = `apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: sites}
spec:
  resource:
    group: demo.example.com
    kind: Site
    versions: [{name: v1, schema: {type: object}}]
  rollout:
%s
`

func compileRollout(t *testing.T, rollout string) (*definition.Definition, error) {
	t.Helper()
	srcs, err := definition.Load("sites.yaml", fmt.Appendf(nil, rolloutOperator, rollout))
	if err != nil {
		t.Fatal(err)
	}
	return definition.Compile(srcs[0])
}

func TestARolloutsStepsMoveTheObjectsTheySayInOrder(t *testing.T) {
	d, err := compileRollout(t, `    steps: [{selector: {matchLabels: {canary: "yes"}}}, {count: 3}, {percent: 50}]`)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(d.Rollout.Steps); got != 4 || d.Rollout.Steps[3].Percent != 100 || d.Rollout.Settle != definition.DefaultSettle {
		t.Fatalf("steps %v, settle %s; want the three declared and 100%% implied, settle %s", d.Rollout.Steps, d.Rollout.Settle, definition.DefaultSettle)
	}
	var objs []definition.Candidate
	for i := range 10 {
		c := definition.Candidate{Key: fmt.Sprintf("ns/s%d", i)}
		if i == 4 || i == 7 {
			c.Labels = map[string]string{"canary": "yes"}
		}
		objs = append(objs, c)
	}
	moved := map[string]bool{}
	want := [][]string{{"ns/s4", "ns/s7"}, {"ns/s0"}, {"ns/s1", "ns/s2"}, {"ns/s3", "ns/s5", "ns/s6", "ns/s8", "ns/s9"}}
	for i, w := range want {
		if got := d.Rollout.Take(i, objs, moved); !slices.Equal(got, w) {
			t.Errorf("step %d (%s) moved %v; want %v", i+1, d.Rollout.Steps[i], got, w)
		}
	}
	if len(moved) != 10 {
		t.Errorf("%d objects moved in the end; want 10", len(moved))
	}
	if d.Hash() == "" {
		t.Error("no hash")
	}
}

func TestARolloutsHashIgnoresTheRolloutItself(t *testing.T) {
	a, err := compileRollout(t, `    steps: [{count: 1}]`)
	if err != nil {
		t.Fatal(err)
	}
	b, err := compileRollout(t, `    steps: [{percent: 10}]
    settle: 5m`)
	if err != nil {
		t.Fatal(err)
	}
	if a.Hash() != b.Hash() {
		t.Errorf("hashes %s and %s: a change of spec.rollout alone changes the definition's hash", a.Hash(), b.Hash())
	}
}

func TestABadRolloutIsRefusedNamingTheStep(t *testing.T) {
	for _, tc := range []struct{ rollout, want string }{
		{`    steps: []`, "spec.rollout.steps"},
		{`    steps: [{count: 1, percent: 10}]`, "spec.rollout.steps[0]: set exactly one of count, percent and selector"},
		{`    steps: [{}]`, "spec.rollout.steps[0]: set exactly one"},
		{`    steps: [{percent: 50}, {percent: 20}]`, "spec.rollout.steps[1].percent: 20% is less than the step before it"},
		{`    steps: [{selector: {}}]`, "spec.rollout.steps[0].selector: selects every object"},
		{`    steps: [{count: 1}]
    settle: -1s`, "spec.rollout.settle"},
	} {
		_, err := compileRollout(t, tc.rollout)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("rollout %q: %v; want an error containing %q", tc.rollout, err, tc.want)
		}
	}
}
