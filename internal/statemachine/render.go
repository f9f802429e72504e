package statemachine

import (
	"fmt"
	"strings"

	"github.com/opkit-dev/opkit/internal/definition"
)

// The renderings of a compiled state machine for a person: Text for a
// terminal (opkit states), Dot for Graphviz (opkit states --format dot |
// dot -Tsvg). Both list the states in the order declared, each
// transition in the order it is tried, and say what the definition says,
// defaults included (the reasons a transition without one gets).

// Text renders m as text: each state with its marks (initial, final,
// needs a person, and the question asked), the fields it refuses to
// change, its enter and exit handlers, its transitions with their reasons
// and guards (or the choice's description), and its timeout.
func Text(m *definition.StateMachine) string {
	var b strings.Builder
	for i, s := range m.States {
		if i > 0 {
			b.WriteString("\n")
		}
		b.WriteString(s.Name)
		if marks := stateMarks(m, s); len(marks) > 0 {
			fmt.Fprintf(&b, " [%s]", strings.Join(marks, ", "))
		}
		b.WriteString("\n")
		if s.NeedsPerson {
			fmt.Fprintf(&b, "  asks: %s\n", oneLine(s.Question))
		}
		if len(s.Refuses) > 0 {
			fmt.Fprintf(&b, "  refuses: %s\n", strings.Join(s.Refuses, ", "))
		}
		if len(s.Enter) > 0 {
			fmt.Fprintf(&b, "  on enter: %s\n", handlerNames(s.Enter))
		}
		if len(s.Exit) > 0 {
			fmt.Fprintf(&b, "  on exit: %s\n", handlerNames(s.Exit))
		}
		for _, t := range s.Transitions {
			fmt.Fprintf(&b, "  -> %s (%s)", t.To, t.Reason)
			switch {
			case s.NeedsPerson && t.Description != "":
				fmt.Fprintf(&b, " if a person chooses it: %s", oneLine(t.Description))
			case s.NeedsPerson:
				b.WriteString(" if a person chooses it")
			case t.When != nil:
				fmt.Fprintf(&b, " when %s", oneLine(t.When.Source))
			default:
				b.WriteString(" always")
			}
			if len(t.Set) > 0 {
				fmt.Fprintf(&b, "; sets %s", setWords(t.Set))
			}
			b.WriteString("\n")
		}
		if to := s.Timeout; to != nil {
			fmt.Fprintf(&b, "  -> %s (%s) after %s\n", to.To, to.Reason, definition.ShortDuration(to.After))
		}
		if s.Final {
			b.WriteString("  (no way out)\n")
		}
	}
	return b.String()
}

// Dot renders m as a Graphviz digraph named name: each state a node (a
// final one a double circle, one that needs a person a filled octagon
// with its question as tooltip), a point with an arrow to the initial
// state, each transition an edge labelled with its reason and guard (a
// long guard shortened; a person's choice bold), each timeout a dashed
// edge. Every name and label
// is quoted and escaped.
func Dot(m *definition.StateMachine, name string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "digraph %s {\n", dotQuote(name))
	b.WriteString("  rankdir=LR;\n")
	b.WriteString("  node [shape=box, style=rounded, fontname=\"Helvetica\"];\n")
	b.WriteString("  edge [fontname=\"Helvetica\", fontsize=10];\n")
	if m.Initial != nil {
		b.WriteString("  \"_start\" [shape=point, label=\"\"];\n")
		fmt.Fprintf(&b, "  \"_start\" -> %s;\n", dotQuote(m.Initial.Name))
	}
	for _, s := range m.States {
		var attrs []string
		label := s.Name
		switch {
		case s.Final:
			attrs = append(attrs, "shape=doublecircle", "style=\"\"")
		case s.NeedsPerson:
			label += "\n(needs a person)"
			attrs = append(attrs, "shape=octagon", "style=filled", "fillcolor=\"#fff2b3\"", "tooltip="+dotQuote(s.Question))
		}
		if len(s.Refuses) > 0 {
			label += "\nrefuses " + strings.Join(s.Refuses, ", ")
		}
		if label != s.Name {
			attrs = append([]string{"label=" + dotQuote(label)}, attrs...)
		}
		if len(attrs) == 0 {
			fmt.Fprintf(&b, "  %s;\n", dotQuote(s.Name))
			continue
		}
		fmt.Fprintf(&b, "  %s [%s];\n", dotQuote(s.Name), strings.Join(attrs, ", "))
	}
	for _, s := range m.States {
		for _, t := range s.Transitions {
			label, style := t.Reason, ""
			switch {
			case s.NeedsPerson:
				label += "\na person's choice"
				style = ", style=bold"
			case t.When != nil:
				label += "\nwhen " + shorten(oneLine(t.When.Source), 60)
			}
			fmt.Fprintf(&b, "  %s -> %s [label=%s%s];\n", dotQuote(s.Name), dotQuote(t.To), dotQuote(label), style)
		}
		if to := s.Timeout; to != nil {
			fmt.Fprintf(&b, "  %s -> %s [label=%s, style=dashed];\n", dotQuote(s.Name), dotQuote(to.To), dotQuote(to.Reason+"\nafter "+definition.ShortDuration(to.After)))
		}
	}
	b.WriteString("}\n")
	return b.String()
}

func stateMarks(m *definition.StateMachine, s *definition.State) []string {
	var marks []string
	if m.Initial == s {
		marks = append(marks, "initial")
	}
	if s.Final {
		marks = append(marks, "final")
	}
	if s.NeedsPerson {
		marks = append(marks, "needs a person")
	}
	return marks
}

func handlerNames(hs []*definition.Handler) string {
	names := make([]string, len(hs))
	for i, h := range hs {
		names[i] = h.Name
	}
	return strings.Join(names, ", ")
}

// oneLine joins the lines of s (a folded guard, a long question) with
// single spaces.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// shorten cuts s to at most n runes, ending it with "..." when cut.
func shorten(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-3]) + "..."
}

// dotQuote is s as a Graphviz quoted string: backslashes and quotes
// escaped, a newline a centred line break (\n).
func dotQuote(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\r\n", `\n`, "\n", `\n`, "\r", `\n`)
	return `"` + r.Replace(s) + `"`
}

// setWords is what a transition sets: status.name = template, ...
func setWords(set []*definition.StatusField) string {
	parts := make([]string, len(set))
	for i, f := range set {
		parts[i] = "status." + f.Name + " = " + oneLine(f.Template)
	}
	return strings.Join(parts, ", ")
}
