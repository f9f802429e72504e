package definition

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiservercel "k8s.io/apiserver/pkg/cel"

	"github.com/opkit-dev/opkit/api/v1alpha1"
)

// The checks of spec.states as a whole, each an error at the field at
// fault: names, the initial state, targets, reachability, ways out, the
// rules of final states and of states that need a person, timeouts,
// reasons, and the fields a state refuses to change.

// checkStates checks the compiled machine m of d.
func checkStates(l *errorList, d *Definition, m *StateMachine) {
	op := d.Operator
	checkStateNames(l, m)
	checkInitial(l, m)
	for i, s := range m.States {
		checkState(l, d, m, s, op.Spec.States[i])
	}
	checkReachable(l, m)
	for i := range op.Spec.Resource.Versions {
		v := &op.Spec.Resource.Versions[i]
		if v.StatusSchema == nil {
			continue
		}
		if _, ok := v.StatusSchema.Properties[stateStatus]; ok {
			l.add(fmt.Sprintf("spec.resource.versions[%d].statusSchema.properties.%s", i, stateStatus),
				"%q is written and typed by opkit for an Operator with states (the object's current state); choose another name", stateStatus)
		}
	}
}

func checkStateNames(l *errorList, m *StateMachine) {
	seen := map[string]bool{}
	for _, s := range m.States {
		field := s.Field + ".name"
		switch {
		case s.Name == "":
			l.add(field, "required: a name like Ready or NeedsAttention")
		case len(s.Name) > MaxStateName:
			l.add(field, "%q is %d characters long: a state's name has at most %d", s.Name, len(s.Name), MaxStateName)
		case !stateNameRE.MatchString(s.Name):
			l.add(field, "%q is not a state name: expected an identifier starting with an upper-case letter, like Ready or NeedsAttention", s.Name)
		case seen[s.Name]:
			l.add(field, "duplicate state %q: each state needs its own name", s.Name)
		}
		seen[s.Name] = true
	}
}

func checkInitial(l *errorList, m *StateMachine) {
	var initial []*State
	for _, s := range m.States {
		if s.initial {
			initial = append(initial, s)
		}
	}
	switch {
	case len(initial) == 0:
		l.add("spec.states", "no state is initial: mark the one a new object starts in with initial: true (states: %s)", strings.Join(m.names(), ", "))
	case len(initial) > 1:
		for _, s := range initial[1:] {
			l.add(s.Field+".initial", "states %s and %s both set initial: exactly one state is where a new object starts", initial[0].Name, s.Name)
		}
	}
}

func checkState(l *errorList, d *Definition, m *StateMachine, s *State, decl v1alpha1.State) {
	field := s.Field
	if s.Final {
		if len(s.Transitions) > 0 {
			l.add(field+".transitions", "state %s is final: it has no way out, and so no transitions; remove them, or final", s.Name)
		}
		if s.Timeout != nil {
			l.add(field+".timeout", "state %s is final: it has no way out, and so no timeout; remove it, or final", s.Name)
		}
		if s.NeedsPerson {
			l.add(field+".needsPerson", "state %s is final: no decision leaves it; remove needsPerson, or final", s.Name)
		}
	} else if len(s.Transitions) == 0 && s.Timeout == nil && !s.NeedsPerson {
		l.add(field, "state %s has no way out (no transition, no timeout) and is not final: add a transition or a timeout, or mark it final: true", s.Name)
	}
	if s.NeedsPerson {
		switch {
		case s.Question == "":
			l.add(field+".needsPerson.question", "required: what the person is asked, like \"Roll back, or accept the new version?\"")
		case len(s.Transitions) == 0 && !s.Final:
			l.add(field+".needsPerson", "state %s needs a person, who chooses one of its transitions: declare at least one", s.Name)
		}
		if s.Timeout != nil {
			l.add(field+".timeout", "state %s needs a person: only a decision leaves it, so it has no timeout", s.Name)
		}
	}
	unguarded := -1
	for j, t := range s.Transitions {
		tf := t.Field
		checkTarget(l, m, tf+".to", t.To)
		checkReason(l, tf+".reason", decl.Transitions[j].Reason)
		if s.NeedsPerson && decl.Transitions[j].When != "" {
			l.add(tf+".when", "state %s needs a person, who chooses among its transitions: a choice has no guard", s.Name)
		}
		for k, u := range s.Transitions[:j] {
			same := u.To == t.To && (s.NeedsPerson || decl.Transitions[k].When == decl.Transitions[j].When)
			if same && t.To != "" {
				what := "the same target and guard"
				if s.NeedsPerson {
					what = "the same target: a person chooses by it"
				}
				l.add(tf, "duplicate transition: %s.transitions[%d] has %s (to %s)", field, k, what, t.To)
				break
			}
		}
		if t.readsRun && len(s.Enter) == 0 {
			l.warn(d, tf+".when", "reads run, the state's last finished enter run, but no handler runs on entering %s: run stays empty, and the guard never holds; add a handler on enter with states: [%s]", s.Name, s.Name)
		}
		switch {
		case s.NeedsPerson:
		case unguarded >= 0:
			l.warn(d, tf, "never taken: transition %d (to %s) comes before it and has no guard, so it is always taken first; move this one up, or give that one a guard", unguarded, s.Transitions[unguarded].To)
		case t.When == nil && !t.broken:
			unguarded = j
		}
	}
	if to := s.Timeout; to != nil {
		switch {
		case to.After < MinStateTimeout:
			l.add(to.Field+".after", "%s is shorter than the %s minimum", to.After, MinStateTimeout)
		}
		checkTarget(l, m, to.Field+".to", to.To)
		checkReason(l, to.Field+".reason", decl.Timeout.Reason)
	}
	for k, r := range s.Refuses {
		rf := fmt.Sprintf("%s.refuses[%d]", field, k)
		if slices.Contains(s.Refuses[:k], r) {
			l.add(rf, "%q is listed twice", r)
			continue
		}
		checkRefused(l, d, rf, r)
	}
}

func checkTarget(l *errorList, m *StateMachine, field, to string) {
	switch {
	case to == "":
		l.add(field, "required: the state it leads to (states: %s)", strings.Join(m.names(), ", "))
	case m.State(to) == nil:
		l.add(field, "%s", m.notAState(to))
	}
}

// notAState says that name is not one of m's states, and which is
// nearest.
func (m *StateMachine) notAState(name string) string {
	hint := ""
	if near := nearest(name, m.names()); near != "" {
		hint = fmt.Sprintf(": did you mean %s?", near)
	}
	return fmt.Sprintf("%q is not a state of the Operator%s (states: %s)", name, hint, strings.Join(m.names(), ", "))
}

// checkReason checks a declared reason (not a default one).
func checkReason(l *errorList, field, reason string) {
	switch {
	case reason == "":
	case len(reason) > MaxStateName || !stateNameRE.MatchString(reason):
		l.add(field, "%q is not a reason: expected a CamelCase word of at most %d characters, like VersionChanged", reason, MaxStateName)
	}
}

// checkReachable reports each state no path of transitions and timeouts
// leads to from the initial state.
func checkReachable(l *errorList, m *StateMachine) {
	if m.Initial == nil {
		return // reported
	}
	reached := map[*State]bool{m.Initial: true}
	queue := []*State{m.Initial}
	for len(queue) > 0 {
		s := queue[0]
		queue = queue[1:]
		for _, to := range s.targets() {
			if next := m.State(to); next != nil && !reached[next] {
				reached[next] = true
				queue = append(queue, next)
			}
		}
	}
	for _, s := range m.States {
		if !reached[s] && m.State(s.Name) == s {
			l.add(s.Field, "state %s cannot be reached from the initial state %s: no transition or timeout of a state that can be reached leads to it; add one, or remove the state", s.Name, m.Initial.Name)
		}
	}
}

// targets are the states the state's transitions and timeout lead to.
func (s *State) targets() []string {
	var out []string
	for _, t := range s.Transitions {
		out = append(out, t.To)
	}
	if s.Timeout != nil {
		out = append(out, s.Timeout.To)
	}
	return out
}

// checkRefused checks a refused path against every version's schema.
func checkRefused(l *errorList, d *Definition, field, path string) {
	versions := d.Operator.Spec.Resource.Versions
	for _, v := range versions {
		if _, err := resolveRefused(v.Schema, path); err != nil {
			if len(versions) > 1 {
				err = fmt.Errorf("version %s: %w", v.Name, err)
			}
			l.add(field, "%v", err)
			return
		}
	}
}

// resolveRefused checks a refused path against a version's spec schema
// and returns the field names below spec (none for spec itself): a rule
// reads it with has() and compares it, so it goes through typed objects
// and maps only.
func resolveRefused(schema *apiextensionsv1.JSONSchemaProps, path string) ([]string, error) {
	if path == "spec" {
		return nil, nil
	}
	rest, ok := strings.CutPrefix(path, "spec.")
	if !ok {
		return nil, fmt.Errorf("%q is not a field of the spec: write a dotted path like spec.version, or spec for all of it", path)
	}
	names := strings.Split(rest, ".")
	node := schema
	for i, name := range names {
		at := strings.Join(append([]string{"spec"}, names[:i]...), ".")
		if name == "" {
			return nil, fmt.Errorf("%q is not a dotted path like spec.version", path)
		}
		if _, ok := apiservercel.Escape(name); !ok {
			return nil, fmt.Errorf("%q: the field name %q cannot be named in a CEL rule; refuse %s whole", path, name, at)
		}
		var prop *apiextensionsv1.JSONSchemaProps
		switch {
		case node == nil:
			return nil, fmt.Errorf("%q: the version has no schema, so its fields cannot be named; refuse spec whole, or declare the field under schema.properties", path)
		case node.Type == "array":
			return nil, fmt.Errorf("%q goes through %s, a list: refuse the whole list (%s)", path, at, at)
		case len(node.Properties) == 0 && node.AdditionalProperties != nil && node.AdditionalProperties.Schema != nil:
			prop = node.AdditionalProperties.Schema // a map's key
		case len(node.Properties) == 0:
			return nil, fmt.Errorf("%q: %s is an open object whose fields the schema does not name; refuse %s whole", path, at, at)
		default:
			p, ok := node.Properties[name]
			if !ok {
				return nil, fmt.Errorf("%q: the schema has no field %s.%s (it has %s)", path, at, name, strings.Join(slices.Sorted(maps.Keys(node.Properties)), ", "))
			}
			prop = &p
		}
		node = prop
	}
	return names, nil
}

// nearest is the name in names closest to s (at most a third of it
// differs, or only case), or "".
func nearest(s string, names []string) string {
	best, bestD := "", len(s)/3+1
	for _, n := range names {
		if strings.EqualFold(n, s) {
			return n
		}
		if d := editDistance(s, n); d < bestD {
			best, bestD = n, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}
