package cli

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/statemachine"
)

// The formats of opkit states.
const (
	statesText = "text"
	statesDot  = "dot"
)

func newStatesCommand() *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "states FILE [--format text|dot]",
		Short: "Print the state machine of each Operator in FILE",
		Long: `Load FILE as opkit run would (every error with its file and line, exit code
1 when it does not load) and print the state machine (spec.states) of each
Operator in it: as text, each state with its marks (initial, final, needs a
person and the question), the fields it refuses to change, its enter and
exit handlers, its transitions in the order they are tried (reason and
guard) and its timeout; or, with --format dot, as a Graphviz digraph.
Warnings go to standard error, so that the dot output can be piped.`,
		Example: `  opkit states examples/database/operator.yaml
  opkit states examples/database/operator.yaml --format dot | dot -Tsvg > database.svg`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if format != statesText && format != statesDot {
				return fmt.Errorf("states: --format %q: expected %s or %s", format, statesText, statesDot)
			}
			return printStates(cmd.OutOrStdout(), cmd.ErrOrStderr(), args[0], format)
		},
	}
	cmd.Flags().StringVar(&format, "format", statesText, "text, or dot for Graphviz")
	return cmd
}

// printStates loads file and prints the state machine of each of its
// Operators that declares one.
func printStates(w, warnings io.Writer, file, format string) error {
	defs, err := compileFiles([]string{file})
	if err != nil {
		return err
	}
	printWarnings(warnings, defs...)
	printed := 0
	for _, d := range defs {
		m := d.States
		if m == nil {
			continue
		}
		if format == statesDot {
			fmt.Fprint(w, statemachine.Dot(m, d.Operator.Name))
			continue
		}
		if printed > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "Operator %s: the life cycle of each %s, %s\n\n", d.Operator.Name, d.GVK.GroupKind(), plural(len(m.States), "state", "states"))
		fmt.Fprint(w, statemachine.Text(m))
		printed++
	}
	if !hasStates(defs) {
		return fmt.Errorf("%s: no Operator in it declares states: declare them under spec.states (docs/states.md)", file)
	}
	return nil
}

func hasStates(defs []*definition.Definition) bool {
	for _, d := range defs {
		if d.States != nil {
			return true
		}
	}
	return false
}
