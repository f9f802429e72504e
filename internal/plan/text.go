package plan

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// WriteText writes p as opkit plan prints it: the lint findings, the
// summary, then each object that changes.
func (p *Plan) WriteText(w io.Writer) {
	for _, f := range p.Lint {
		fmt.Fprintln(w, f.Text)
	}
	if p.Refused != "" {
		fmt.Fprintf(w, "operator %s: refused, nothing planned: %s\n", p.Operator, p.Refused)
		return
	}
	if p.Paused != "" {
		fmt.Fprintln(w, p.Paused)
	}
	s := p.Summary
	if !s.Changes() && s.Errors == 0 && len(p.Objects) == 0 {
		fmt.Fprintf(w, "operator %s: no changes (%s planned)\n", p.Operator, count1(s.Objects, p.kind()+" object", p.kind()+" objects"))
		return
	}
	fmt.Fprintf(w, "operator %s: %s, %d with changes\n", p.Operator, count1(s.Objects, p.kind()+" object", p.kind()+" objects"), s.Changed)
	fmt.Fprintf(w, "  children: %d created, %d changed, %d re-created, %d pruned, %d unchanged\n", s.Created, s.Updated, s.Recreated, s.Pruned, s.Unchanged)
	fmt.Fprintf(w, "  handlers: %s; status: %s; states: %s\n", count1(s.HandlerRuns, "run", "runs"), count1(s.StatusChanges, "field changes", "fields change"), count1(s.StateEffects, "effect", "effects"))
	if s.Errors > 0 {
		fmt.Fprintf(w, "  %s could not be planned in full\n", count1(s.Errors, "object", "objects"))
	}
	if len(p.Rollout) > 0 {
		fmt.Fprintf(w, "  rolled out in %s (spec.rollout), the next once the objects moved are healthy:\n", count1(len(p.Rollout), "step", "steps"))
		for i, st := range p.Rollout {
			fmt.Fprintf(w, "    %d. %s: %s\n", i+1, st.Step, listObjects(st.Objects))
		}
	}
	for _, o := range p.Objects {
		fmt.Fprintf(w, "\n%s %s\n", p.kind(), qualified(o.Namespace, o.Name))
		for _, c := range o.Children {
			fmt.Fprintf(w, "  %s %s %s (child %s)%s\n", sign(c.Action), c.Kind, qualified(c.Namespace, c.Name), c.ID, verb(c.Action))
			for _, ch := range c.Changes {
				fmt.Fprintf(w, "      %s\n", ch)
			}
		}
		for _, h := range o.Handlers {
			when := ""
			if h.AtResume {
				when = " at the operator's resume"
			}
			fmt.Fprintf(w, "  > handler %s runs%s (%s): %s\n", h.Handler, when, h.Trigger, h.Reason)
		}
		for _, ch := range o.Status {
			fmt.Fprintf(w, "  ~ %s\n", ch)
		}
		for _, st := range o.States {
			fmt.Fprintf(w, "  ! %s\n", st)
		}
		for _, e := range o.Errors {
			fmt.Fprintf(w, "  error: %s\n", e)
		}
	}
}

func (p *Plan) kind() string {
	kind, _, _ := strings.Cut(p.Resource, ".")
	return kind
}

// String is the change as one line: path: old -> new.
func (c Change) String() string {
	switch c.Op {
	case "add":
		return fmt.Sprintf("%s: + %s", c.Path, value(c.New))
	case "remove":
		return fmt.Sprintf("%s: - %s", c.Path, value(c.Old))
	}
	return fmt.Sprintf("%s: %s -> %s", c.Path, value(c.Old), value(c.New))
}

// value is v as JSON, cut when long.
func value(v any) string {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	if len(data) > 120 {
		return string(data[:117]) + "..."
	}
	return string(data)
}

func sign(action string) string {
	switch action {
	case Create:
		return "+"
	case Prune:
		return "-"
	case Recreate:
		return "-/+"
	case Waiting:
		return "?"
	}
	return "~"
}

func verb(action string) string {
	switch action {
	case Create:
		return " created"
	case Update:
		return " changed"
	case Recreate:
		return " deleted and re-created (a field it changes is immutable)"
	case Prune:
		return " pruned: no longer rendered"
	case Waiting:
		return " waits for a child it reads"
	}
	return ""
}

func qualified(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}

// count1 is "1 thing" or "n things".
func count1(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// listObjects names up to 5 objects, and counts the others.
func listObjects(objs []string) string {
	switch {
	case len(objs) == 0:
		return "no object"
	case len(objs) <= 5:
		return strings.Join(objs, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(objs[:5], ", "), len(objs)-5)
}
