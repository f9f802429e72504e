package webhook

import (
	"slices"
	"testing"

	"github.com/opkit-dev/opkit/internal/definition"
)

// TestAnAdmissionHandlerIsCalledAtTheVersionHandlersRead: the webhook's
// rule names the version the operator reads (readVersion here, not the
// storage version), so that the API server, with the Equivalent match
// policy, converts a request made at another version before calling: the
// handler's object is of the version its generated types are.
func TestAnAdmissionHandlerIsCalledAtTheVersionHandlersRead(t *testing.T) {
	src, err := definition.Load("op.yaml", []byte(`apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: versions}
spec:
  resource:
    group: demo.example.com
    kind: Thing
    readVersion: v1beta1
    versions:
    - {name: v1alpha1, schema: {type: object, properties: {size: {type: string}}}}
    - {name: v1beta1, schema: {type: object, properties: {size: {type: string}}}}
    - {name: v1, storage: true, schema: {type: object, properties: {size: {type: string}}}}
  handlers:
  - name: check
    "on": [validate]
    exec: {command: [./check.sh]}
`))
	if err != nil {
		t.Fatal(err)
	}
	d, err := definition.Compile(src[0])
	if err != nil {
		t.Fatal(err)
	}
	o := &Operators{Server: &Server{}, Service: &Service{Namespace: "opkit", Name: "opkit-webhook"}}
	w := o.admissionWebhook(d, d.Admission[0])
	if got := w.Rules[0].APIVersions; !slices.Equal(got, []string{"v1beta1"}) {
		t.Errorf("the webhook's rule names versions %v; want [v1beta1], the version handlers read", got)
	}
	if w.MatchPolicy == nil || *w.MatchPolicy != "Equivalent" {
		t.Errorf("match policy %v; want Equivalent, so that other versions are converted", w.MatchPolicy)
	}
}
