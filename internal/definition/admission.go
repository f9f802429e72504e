package definition

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	admissioncel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	"k8s.io/apiserver/pkg/cel/environment"

	"github.com/opkit-dev/opkit/api/v1alpha1"
)

// Admission is a compiled admission handler's policy: how the API server
// calls it through the engine's webhook (Handler.Admission).
type Admission struct {
	// Mutate: the handler is on mutate (it may patch the object); else on
	// validate.
	Mutate bool
	// Operations are CREATE, UPDATE and DELETE, in that order, as given
	// (defaults CREATE and UPDATE).
	Operations []string
	// FailurePolicy is v1alpha1.FailurePolicyFail or FailurePolicyIgnore.
	FailurePolicy string
	// Timeout is the API server's wait, 1s to 30s.
	Timeout time.Duration
	// MatchConditions, each compiled as the API server compiles them.
	MatchConditions []v1alpha1.MatchCondition
}

// Trigger is the handler's trigger: v1alpha1.OnValidate or OnMutate.
func (a *Admission) Trigger() string {
	if a.Mutate {
		return v1alpha1.OnMutate
	}
	return v1alpha1.OnValidate
}

// Admission bounds and defaults.
const (
	DefaultAdmissionTimeout = 10 * time.Second
	MinAdmissionTimeout     = time.Second
	// MaxAdmissionTimeout is the API server's own bound.
	MaxAdmissionTimeout = 30 * time.Second
	maxMatchConditions  = 63 // the API server takes 64, and opkit adds one
)

var admissionOperations = []string{v1alpha1.OperationCreate, v1alpha1.OperationUpdate, v1alpha1.OperationDelete}

// conditionCompiler compiles match conditions with the variables and
// environment the API server gives them (object, oldObject, request,
// authorizer; stored expressions).
var conditionCompiler = sync.OnceValue(func() admissioncel.Compiler {
	return admissioncel.NewCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
})

// compileAdmission checks a handler's triggers and admission block: a
// handler on validate or mutate has that trigger alone, an exec or http
// action (a Job starts too slowly for the API server's wait), and no
// policies of other triggers; one on neither has no admission block.
func compileAdmission(l *errorList, field string, h v1alpha1.Handler, c *Handler, subj subject) {
	validate, mutate := c.Fires(v1alpha1.OnValidate), c.Fires(v1alpha1.OnMutate)
	if !validate && !mutate {
		if h.Admission != nil {
			l.add(field+".admission", "admission is for handlers on validate or mutate, and this one is on neither: add validate or mutate to on, or remove admission")
		}
		return
	}
	switch {
	case len(c.On) > 1:
		l.add(field+".on", "a handler on %s answers the API server's admission requests: it cannot have other triggers (%s); give those their own handler", c.On[slices.IndexFunc(c.On, func(t string) bool { return t == v1alpha1.OnValidate || t == v1alpha1.OnMutate })], strings.Join(c.On, ", "))
		return
	case subj != ownedSubject:
		l.add(field+".on", "admission handlers check the operator's own custom resources, and this operator has none (spec.resource)")
		return
	case h.Job != nil:
		l.add(field+".job", "an admission handler must answer within its timeout (at most 30s), and a Job starts too slowly: use exec or http")
	case h.Retry != nil:
		l.add(field+".retry", "an admission handler is not retried: the API server waits for one answer; remove retry (failurePolicy says what a failure answers)")
	case h.Timeout.Duration != 0:
		l.add(field+".timeout", "an admission handler's timeout is admission.timeout (1s to 30s): move it there")
	}
	a := &Admission{Mutate: mutate, FailurePolicy: v1alpha1.FailurePolicyFail, Timeout: DefaultAdmissionTimeout}
	c.Admission = a
	in := h.Admission
	if in == nil {
		in = &v1alpha1.Admission{}
	}
	field += ".admission"
	for i, op := range in.Operations {
		f := fmt.Sprintf("%s.operations[%d]", field, i)
		switch {
		case !slices.Contains(admissionOperations, op):
			l.add(f, "unknown operation %q; expected %s", op, strings.Join(admissionOperations, ", "))
		case slices.Contains(a.Operations, op):
			l.add(f, "operation %q is listed twice", op)
		case mutate && op == v1alpha1.OperationDelete:
			l.add(f, "a mutate handler cannot change an object being deleted: DELETE is for validate handlers")
		default:
			a.Operations = append(a.Operations, op)
		}
	}
	if len(in.Operations) == 0 {
		a.Operations = []string{v1alpha1.OperationCreate, v1alpha1.OperationUpdate}
	}
	slices.SortFunc(a.Operations, func(x, y string) int {
		return slices.Index(admissionOperations, x) - slices.Index(admissionOperations, y)
	})
	switch in.FailurePolicy {
	case "":
	case v1alpha1.FailurePolicyFail, v1alpha1.FailurePolicyIgnore:
		a.FailurePolicy = in.FailurePolicy
	default:
		l.add(field+".failurePolicy", "%q: expected %s (deny when the handler gives no answer) or %s (allow)", in.FailurePolicy, v1alpha1.FailurePolicyFail, v1alpha1.FailurePolicyIgnore)
	}
	switch d := in.Timeout.Duration; {
	case d == 0:
	case d < MinAdmissionTimeout || d > MaxAdmissionTimeout:
		l.add(field+".timeout", "%s is outside %s to %s, the API server's bounds", d, MinAdmissionTimeout, MaxAdmissionTimeout)
	case d%time.Second != 0:
		l.add(field+".timeout", "%s: the API server counts whole seconds; write %s", d, d.Round(time.Second))
	default:
		a.Timeout = d
	}
	if len(in.MatchConditions) > maxMatchConditions {
		l.add(field+".matchConditions", "%d conditions; the API server takes at most %d", len(in.MatchConditions), maxMatchConditions)
		return
	}
	names := map[string]bool{}
	for i, mc := range in.MatchConditions {
		f := fmt.Sprintf("%s.matchConditions[%d]", field, i)
		switch msgs := validation.IsQualifiedName(mc.Name); {
		case mc.Name == "":
			l.add(f+".name", "required: it names the condition in the API server's errors")
		case len(msgs) > 0:
			l.add(f+".name", "%q is not a qualified name: %s", mc.Name, strings.Join(msgs, "; "))
		case names[mc.Name]:
			l.add(f+".name", "duplicate condition name %q", mc.Name)
		}
		names[mc.Name] = true
		if mc.Expression == "" {
			l.add(f+".expression", "required: a CEL condition over object, oldObject, request and authorizer, like request.userInfo.username != \"system:admin\"")
			continue
		}
		res := conditionCompiler().CompileCELExpression(&matchconditions.MatchCondition{Name: mc.Name, Expression: mc.Expression},
			admissioncel.OptionalVariableDeclarations{HasAuthorizer: true}, environment.StoredExpressions)
		if res.Error != nil {
			l.add(f+".expression", "%s: %s", mc.Expression, res.Error.Detail)
			continue
		}
		a.MatchConditions = append(a.MatchConditions, mc)
	}
}

// splitAdmission takes the admission handlers out of hs, in order.
func splitAdmission(hs []*Handler) (handlers, admission []*Handler) {
	for _, h := range hs {
		if h.Admission != nil {
			admission = append(admission, h)
		} else {
			handlers = append(handlers, h)
		}
	}
	return handlers, admission
}

// AdmissionHandler returns the admission handler of this name, or nil.
func (d *Definition) AdmissionHandler(name string) *Handler {
	for _, h := range d.Admission {
		if h.Name == name {
			return h
		}
	}
	return nil
}
