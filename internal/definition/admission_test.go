package definition

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opkit-dev/opkit/api/v1alpha1"
)

func TestAdmissionHandlersCompileApartWithDefaults(t *testing.T) {
	d, err := compileFile(t, "app.yaml", base+`  handlers:
  - name: check
    on: [validate]
    exec: {command: [./check.py]}
  - name: defaults
    on: [mutate]
    admission:
      operations: [UPDATE, CREATE]
      failurePolicy: Ignore
      timeout: 3s
      matchConditions:
      - {name: not-admin, expression: 'request.userInfo.username != "system:admin"'}
    http: {url: "https://defaults.example.com/"}
  - name: announce
    on: [create]
    exec: {command: [echo]}
`)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Handlers) != 1 || d.Handlers[0].Name != "announce" {
		t.Fatalf("handlers %d; want announce alone beside the admission handlers", len(d.Handlers))
	}
	if len(d.Admission) != 2 {
		t.Fatalf("%d admission handlers; want 2", len(d.Admission))
	}
	check, defaults := d.Admission[0].Admission, d.Admission[1].Admission
	if check.Mutate || check.Trigger() != v1alpha1.OnValidate || check.FailurePolicy != v1alpha1.FailurePolicyFail ||
		check.Timeout != 10*time.Second || !slices.Equal(check.Operations, []string{"CREATE", "UPDATE"}) {
		t.Errorf("validate defaults: %+v", check)
	}
	if !defaults.Mutate || defaults.FailurePolicy != v1alpha1.FailurePolicyIgnore || defaults.Timeout != 3*time.Second ||
		!slices.Equal(defaults.Operations, []string{"CREATE", "UPDATE"}) || len(defaults.MatchConditions) != 1 {
		t.Errorf("mutate policy: %+v", defaults)
	}
	if d.AdmissionHandler("check") != d.Admission[0] || d.AdmissionHandler("announce") != nil {
		t.Error("AdmissionHandler finds the wrong handler")
	}
}

func TestInvalidAdmissionHandlersNameEachProblemWithItsLine(t *testing.T) {
	_, err := compileFile(t, "app.yaml", base+`  handlers:
  - name: job
    on: [validate]
    job: {image: busybox}
  - name: both
    on: [validate, create]
    exec: {command: [echo]}
  - name: policy
    on: [mutate]
    admission:
      operations: [DELETE, PATCH]
      failurePolicy: Maybe
      timeout: 45s
      matchConditions:
      - {name: bad, expression: 'object.spec.replicas +'}
      - {name: "", expression: 'true'}
      - {name: number, expression: '1 + 1'}
    exec: {command: [echo]}
  - name: stray
    on: [create]
    admission: {failurePolicy: Fail}
    exec: {command: [echo]}
  - name: retried
    on: [validate]
    retry: {maxAttempts: 2}
    exec: {command: [echo]}
`)
	var errs Errors
	if !errors.As(err, &errs) {
		t.Fatalf("error %v is not Errors", err)
	}
	for _, want := range []string{
		`app.yaml:18: spec.handlers[0].job: an admission handler must answer within its timeout`,
		`app.yaml:20: spec.handlers[1].on: a handler on validate answers the API server's admission requests: it cannot have other triggers`,
		`app.yaml:25: spec.handlers[2].admission.operations[0]: a mutate handler cannot change an object being deleted`,
		`app.yaml:25: spec.handlers[2].admission.operations[1]: unknown operation "PATCH"`,
		`app.yaml:26: spec.handlers[2].admission.failurePolicy: "Maybe": expected Fail`,
		`app.yaml:27: spec.handlers[2].admission.timeout: 45s is outside 1s to 30s`,
		`app.yaml:29: spec.handlers[2].admission.matchConditions[0].expression: object.spec.replicas +: compilation failed`,
		`app.yaml:30: spec.handlers[2].admission.matchConditions[1].name: required`,
		`app.yaml:31: spec.handlers[2].admission.matchConditions[2].expression: 1 + 1: must evaluate to bool`,
		`app.yaml:35: spec.handlers[3].admission: admission is for handlers on validate or mutate`,
		`app.yaml:39: spec.handlers[4].retry: an admission handler is not retried`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing error %q in:\n%v", want, err)
		}
	}
}
