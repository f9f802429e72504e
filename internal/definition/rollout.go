package definition

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/opkit-dev/opkit/api/v1alpha1"
)

// DefaultSettle is spec.rollout.settle's default.
const DefaultSettle = 30 * time.Second

// Rollout is a compiled spec.rollout: the steps a changed definition
// reaches its custom resources in.
type Rollout struct {
	// Steps end with one of 100 percent (implied when not declared).
	Steps  []RolloutStep
	Settle time.Duration
}

// RolloutStep is one step: the objects on the new definition after it,
// counting those before (exactly one of its fields is set).
type RolloutStep struct {
	Count    int
	Percent  int
	Selector labels.Selector
}

// Target is how many of total objects are to be on the new definition
// after the step, for a count or a percentage (rounded up); -1 for a
// selector.
func (s RolloutStep) Target(total int) int {
	switch {
	case s.Selector != nil:
		return -1
	case s.Count > 0:
		return min(s.Count, total)
	}
	return (total*s.Percent + 99) / 100
}

// String says the step as declared: "2 objects", "50%", "objects with
// tier=canary".
func (s RolloutStep) String() string {
	switch {
	case s.Selector != nil:
		return "objects with " + s.Selector.String()
	case s.Count == 1:
		return "1 object"
	case s.Count > 0:
		return fmt.Sprintf("%d objects", s.Count)
	}
	return fmt.Sprintf("%d%%", s.Percent)
}

// Candidate is an object a rollout may move: its key, namespace/name
// (name alone for a cluster-scoped kind), and its labels.
type Candidate struct {
	Key    string
	Labels map[string]string
}

// Take moves into moved the objects step i moves, and returns them, in
// order: a selector's every object it matches; a count's or a
// percentage's the first objects of objs not moved yet, up to its
// target over len(objs). objs must be sorted by Key, so that a rollout
// played again moves the same objects.
func (r *Rollout) Take(i int, objs []Candidate, moved map[string]bool) []string {
	s := r.Steps[i]
	target := s.Target(len(objs))
	n := 0
	for _, o := range objs {
		if moved[o.Key] {
			n++
		}
	}
	var took []string
	for _, o := range objs {
		switch {
		case moved[o.Key]:
			continue
		case s.Selector != nil:
			if !s.Selector.Matches(labels.Set(o.Labels)) {
				continue
			}
		case n >= target:
			return took
		}
		moved[o.Key] = true
		took = append(took, o.Key)
		n++
	}
	return took
}

// compileRollout compiles spec.rollout into d.Rollout.
func compileRollout(l *errorList, d *Definition) {
	r := d.Operator.Spec.Rollout
	if r == nil {
		return
	}
	out := &Rollout{Settle: DefaultSettle}
	if r.Settle.Duration < 0 {
		l.add("spec.rollout.settle", "%s is negative", r.Settle.Duration)
	} else if r.Settle.Duration > 0 {
		out.Settle = r.Settle.Duration
	}
	if len(r.Steps) == 0 {
		l.add("spec.rollout.steps", "required: at least one step (a count, a percent or a selector) before the implied 100%%")
	}
	last := 0 // the last count or percent, to refuse one that goes back
	for i, st := range r.Steps {
		field := fmt.Sprintf("spec.rollout.steps[%d]", i)
		set := 0
		var step RolloutStep
		if st.Count != nil {
			set++
			step.Count = int(*st.Count)
			if step.Count < 1 {
				l.add(field+".count", "%d: at least 1", step.Count)
			}
		}
		if st.Percent != nil {
			set++
			step.Percent = int(*st.Percent)
			if step.Percent < 1 || step.Percent > 100 {
				l.add(field+".percent", "%d: from 1 to 100", step.Percent)
			}
		}
		if st.Selector != nil {
			set++
			sel, err := metav1.LabelSelectorAsSelector(st.Selector)
			switch {
			case err != nil:
				l.add(field+".selector", "%v", err)
			case sel.Empty():
				l.add(field+".selector", "selects every object: give labels, or use percent: 100")
			default:
				step.Selector = sel
			}
		}
		if set != 1 {
			l.add(field, "set exactly one of count, percent and selector")
			continue
		}
		if step.Percent > 0 && step.Percent < last {
			l.add(field+".percent", "%d%% is less than the step before it: each step counts the objects of the steps before", step.Percent)
		}
		if step.Percent > 0 {
			last = step.Percent
		}
		out.Steps = append(out.Steps, step)
	}
	if n := len(out.Steps); n == 0 || out.Steps[n-1].Percent != 100 {
		out.Steps = append(out.Steps, RolloutStep{Percent: 100})
	}
	d.Rollout = out
}

// Hash identifies what the definition does: a digest of its defaulted
// Operator's name and spec without spec.rollout, which says how a change
// rolls out and is not itself rolled out.
func (d *Definition) Hash() string {
	return OperatorHash(d.Operator)
}

// OperatorHash is Definition.Hash of a defaulted Operator.
func OperatorHash(op *v1alpha1.Operator) string {
	spec := op.Spec.DeepCopy()
	spec.Rollout = nil
	data, err := json.Marshal(struct {
		Name string                 `json:"name"`
		Spec *v1alpha1.OperatorSpec `json:"spec"`
	}{op.Name, spec})
	if err != nil {
		panic(err) // an Operator is JSON
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:6])
}
