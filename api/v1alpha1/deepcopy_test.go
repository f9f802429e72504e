package v1alpha1

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/randfill"
)

func TestDeepCopyIsEqualAndIndependent(t *testing.T) {
	f := randfill.New().NilChance(0.2).NumElements(1, 2).MaxDepth(5)
	for range 50 {
		var in Operator
		f.Fill(&in)
		out := in.DeepCopy()
		if !equality.Semantic.DeepEqual(&in, out) {
			t.Fatalf("copy differs:\n%+v\n%+v", in, *out)
		}
		// Mutating the copy must not touch the original.
		before := in.DeepCopy()
		for i := range out.Spec.Children {
			out.Spec.Children[i].Template.Raw = append(out.Spec.Children[i].Template.Raw, 'x')
			out.Spec.Children[i].IncludeWhen = append(out.Spec.Children[i].IncludeWhen, "mutated")
		}
		for i := range out.Spec.Resource.Versions {
			if out.Spec.Resource.Versions[i].Served != nil {
				*out.Spec.Resource.Versions[i].Served = !*out.Spec.Resource.Versions[i].Served
			}
			if imm := out.Spec.Resource.Versions[i].Immutable; len(imm) > 0 {
				imm[0] = "mutated"
			}
			if c := out.Spec.Resource.Versions[i].Conversion; c != nil {
				for j := range c.Fields {
					c.Fields[j].ToStorage = "mutated"
				}
			}
		}
		if w := out.Spec.Watch; w != nil {
			w.Namespaces = append(w.Namespaces, "mutated")
			if w.Selector != nil {
				w.Selector.MatchExpressions = append(w.Selector.MatchExpressions, metav1.LabelSelectorRequirement{Key: "mutated"})
			}
		}
		for i := range out.Spec.Handlers {
			h := &out.Spec.Handlers[i]
			h.On = append(h.On, "mutated")
			if h.Exec != nil {
				h.Exec.Command = append(h.Exec.Command, "mutated")
				for j := range h.Exec.Env {
					h.Exec.Env[j].Value = "mutated"
				}
			}
			if h.Retry != nil && h.Retry.Jitter != nil {
				*h.Retry.Jitter++
			}
			if h.Job != nil && h.Job.TTLSecondsAfterFinished != nil {
				*h.Job.TTLSecondsAfterFinished++
			}
			if h.HTTP != nil && h.HTTP.TokenSecret != nil {
				h.HTTP.TokenSecret.Key = "mutated"
			}
			if h.Schedule != nil {
				h.Schedule.Cron = "mutated"
			}
		}
		for k := range out.Spec.Status {
			out.Spec.Status[k] = "mutated"
		}
		for i := range out.Spec.Related {
			for k := range out.Spec.Related[i].Selector {
				out.Spec.Related[i].Selector[k] = "mutated"
			}
		}
		if r := out.Spec.Rollout; r != nil {
			for i := range r.Steps {
				if r.Steps[i].Count != nil {
					*r.Steps[i].Count++
				}
				if r.Steps[i].Selector != nil {
					r.Steps[i].Selector.MatchLabels = map[string]string{"mutated": "x"}
				}
			}
		}
		if !equality.Semantic.DeepEqual(&in, before) {
			t.Fatal("mutating the copy changed the original")
		}
	}
}
