package v1alpha1

import (
	"maps"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// The deep copies below are written by hand: the types are few, and a
// generator would bring the markers this project does without.

var (
	_ runtime.Object = &Operator{}
	_ runtime.Object = &OperatorList{}
)

// DeepCopyObject implements runtime.Object.
func (o *Operator) DeepCopyObject() runtime.Object { return o.DeepCopy() }

// DeepCopy returns a deep copy.
func (o *Operator) DeepCopy() *Operator {
	if o == nil {
		return nil
	}
	out := &Operator{TypeMeta: o.TypeMeta}
	o.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Spec = *o.Spec.DeepCopy()
	out.Status = *o.Status.DeepCopy()
	return out
}

// DeepCopyObject implements runtime.Object.
func (l *OperatorList) DeepCopyObject() runtime.Object { return l.DeepCopy() }

// DeepCopy returns a deep copy.
func (l *OperatorList) DeepCopy() *OperatorList {
	if l == nil {
		return nil
	}
	out := &OperatorList{TypeMeta: l.TypeMeta}
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	if l.Items != nil {
		out.Items = make([]Operator, len(l.Items))
		for i := range l.Items {
			out.Items[i] = *l.Items[i].DeepCopy()
		}
	}
	return out
}

// DeepCopy returns a deep copy.
func (s *OperatorSpec) DeepCopy() *OperatorSpec {
	out := &OperatorSpec{Resource: *s.Resource.DeepCopy()}
	if s.Watch != nil {
		w := *s.Watch
		w.Namespaces = copyStrings(s.Watch.Namespaces)
		w.Selector = s.Watch.Selector.DeepCopy()
		out.Watch = &w
	}
	if s.Related != nil {
		out.Related = make([]Related, len(s.Related))
		for i, r := range s.Related {
			out.Related[i] = r
			out.Related[i].Namespaces = copyStrings(r.Namespaces)
			if r.Selector != nil {
				out.Related[i].Selector = make(map[string]string, len(r.Selector))
				for k, v := range r.Selector {
					out.Related[i].Selector[k] = v
				}
			}
		}
	}
	if s.Children != nil {
		out.Children = make([]Child, len(s.Children))
		for i, c := range s.Children {
			out.Children[i] = *c.DeepCopy()
		}
	}
	if s.Status != nil {
		out.Status = make(map[string]string, len(s.Status))
		for k, v := range s.Status {
			out.Status[k] = v
		}
	}
	if s.Handlers != nil {
		out.Handlers = make([]Handler, len(s.Handlers))
		for i := range s.Handlers {
			out.Handlers[i] = *s.Handlers[i].DeepCopy()
		}
	}
	if s.Sources != nil {
		out.Sources = make([]Source, len(s.Sources))
		for i := range s.Sources {
			out.Sources[i] = *s.Sources[i].DeepCopy()
		}
	}
	if s.States != nil {
		out.States = make([]State, len(s.States))
		for i := range s.States {
			out.States[i] = *s.States[i].DeepCopy()
		}
	}
	if s.Rollout != nil {
		r := *s.Rollout
		if s.Rollout.Steps != nil {
			r.Steps = make([]RolloutStep, len(s.Rollout.Steps))
			for i, st := range s.Rollout.Steps {
				r.Steps[i] = RolloutStep{Count: copyPtr(st.Count), Percent: copyPtr(st.Percent), Selector: st.Selector.DeepCopy()}
			}
		}
		out.Rollout = &r
	}
	return out
}

// DeepCopy returns a deep copy.
func (s *State) DeepCopy() *State {
	out := *s
	out.NeedsPerson = copyPtr(s.NeedsPerson)
	out.Timeout = copyPtr(s.Timeout)
	out.Refuses = copyStrings(s.Refuses)
	if s.Transitions != nil {
		out.Transitions = make([]Transition, len(s.Transitions))
		for i, t := range s.Transitions {
			out.Transitions[i] = t
			out.Transitions[i].Set = maps.Clone(t.Set)
		}
	}
	return &out
}

// DeepCopy returns a deep copy.
func (s *Source) DeepCopy() *Source {
	out := *s
	if s.Webhook != nil {
		w := *s.Webhook
		w.GitHub = copyPtr(s.Webhook.GitHub)
		w.HMAC = copyPtr(s.Webhook.HMAC)
		w.Bearer = copyPtr(s.Webhook.Bearer)
		out.Webhook = &w
	}
	if s.CloudEvents != nil {
		c := *s.CloudEvents
		c.HMAC = copyPtr(s.CloudEvents.HMAC)
		c.Bearer = copyPtr(s.CloudEvents.Bearer)
		out.CloudEvents = &c
	}
	if s.GitHubPoll != nil {
		g := *s.GitHubPoll
		g.TokenSecretRef = copyPtr(s.GitHubPoll.TokenSecretRef)
		g.App = copyPtr(s.GitHubPoll.App)
		out.GitHubPoll = &g
	}
	if s.NATS != nil {
		n := *s.NATS
		n.Subjects = copyStrings(s.NATS.Subjects)
		n.TokenSecretRef = copyPtr(s.NATS.TokenSecretRef)
		n.CredsSecretRef = copyPtr(s.NATS.CredsSecretRef)
		n.PasswordSecretRef = copyPtr(s.NATS.PasswordSecretRef)
		n.TLS = s.NATS.TLS.DeepCopy()
		out.NATS = &n
	}
	if s.Kafka != nil {
		k := *s.Kafka
		k.Brokers = copyStrings(s.Kafka.Brokers)
		k.Topics = copyStrings(s.Kafka.Topics)
		k.SASL = copyPtr(s.Kafka.SASL)
		k.TLS = s.Kafka.TLS.DeepCopy()
		out.Kafka = &k
	}
	if s.Object != nil {
		out.Object = &apiextensionsv1.JSON{}
		s.Object.DeepCopyInto(out.Object)
	}
	return &out
}

// DeepCopy returns a deep copy.
func (h *Handler) DeepCopy() *Handler {
	out := *h
	out.On = copyStrings(h.On)
	out.Fields = copyStrings(h.Fields)
	out.Sources = copyStrings(h.Sources)
	out.States = copyStrings(h.States)
	out.Schedule = copyPtr(h.Schedule)
	if h.Retry != nil {
		r := *h.Retry
		r.Jitter = copyPtr(h.Retry.Jitter)
		out.Retry = &r
	}
	if h.Exec != nil {
		e := *h.Exec
		e.Command = copyStrings(h.Exec.Command)
		e.Env = copyEnv(h.Exec.Env)
		e.ServiceAccount = copyPtr(h.Exec.ServiceAccount)
		out.Exec = &e
	}
	if h.Job != nil {
		j := *h.Job
		j.Command = copyStrings(h.Job.Command)
		j.Args = copyStrings(h.Job.Args)
		j.Env = copyEnv(h.Job.Env)
		j.TTLSecondsAfterFinished = copyPtr(h.Job.TTLSecondsAfterFinished)
		out.Job = &j
	}
	if h.HTTP != nil {
		a := *h.HTTP
		a.TokenSecret = copyPtr(h.HTTP.TokenSecret)
		out.HTTP = &a
	}
	if h.Admission != nil {
		a := *h.Admission
		a.Operations = copyStrings(h.Admission.Operations)
		a.MatchConditions = copySlice(h.Admission.MatchConditions)
		out.Admission = &a
	}
	return &out
}

// copyEnv copies environment variables, with their sources.
func copyEnv(env []EnvVar) []EnvVar {
	out := copySlice(env)
	for i, v := range out {
		if v.ValueFrom != nil {
			from := EnvVarSource{SecretKeyRef: copyPtr(v.ValueFrom.SecretKeyRef)}
			out[i].ValueFrom = &from
		}
	}
	return out
}

// copyPtr copies what p points to, for types without pointers inside.
func copyPtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// copySlice copies a slice of types without pointers inside.
func copySlice[T any](s []T) []T {
	if s == nil {
		return nil
	}
	return append([]T(nil), s...)
}

// DeepCopy returns a deep copy.
func (r *Resource) DeepCopy() *Resource {
	out := *r
	out.Names.ShortNames = copyStrings(r.Names.ShortNames)
	out.Names.Categories = copyStrings(r.Names.Categories)
	if r.Versions != nil {
		out.Versions = make([]ResourceVersion, len(r.Versions))
		for i, v := range r.Versions {
			out.Versions[i] = *v.DeepCopy()
		}
	}
	return &out
}

// DeepCopy returns a deep copy.
func (v *ResourceVersion) DeepCopy() *ResourceVersion {
	out := *v
	if v.Served != nil {
		served := *v.Served
		out.Served = &served
	}
	out.Schema = v.Schema.DeepCopy()
	out.StatusSchema = v.StatusSchema.DeepCopy()
	if v.PrinterColumns != nil {
		out.PrinterColumns = make([]apiextensionsv1.CustomResourceColumnDefinition, len(v.PrinterColumns))
		copy(out.PrinterColumns, v.PrinterColumns)
	}
	out.Immutable = copyStrings(v.Immutable)
	out.Scale = v.Scale.DeepCopy()
	if v.Conversion != nil {
		out.Conversion = &VersionConversion{Fields: copySlice(v.Conversion.Fields)}
	}
	return &out
}

// DeepCopy returns a deep copy.
func (c *Child) DeepCopy() *Child {
	out := *c
	c.Template.DeepCopyInto(&out.Template)
	out.IncludeWhen = copyStrings(c.IncludeWhen)
	out.ReadyWhen = copyStrings(c.ReadyWhen)
	return &out
}

// DeepCopy returns a deep copy.
func (s *OperatorStatus) DeepCopy() *OperatorStatus {
	out := *s
	if s.Conditions != nil {
		out.Conditions = make([]metav1.Condition, len(s.Conditions))
		for i := range s.Conditions {
			s.Conditions[i].DeepCopyInto(&out.Conditions[i])
		}
	}
	return &out
}

func copyStrings(s []string) []string {
	if s == nil {
		return nil
	}
	return append([]string(nil), s...)
}

// DeepCopy returns a deep copy.
func (t *SourceTLS) DeepCopy() *SourceTLS {
	if t == nil {
		return nil
	}
	return &SourceTLS{CASecretRef: copyPtr(t.CASecretRef)}
}
