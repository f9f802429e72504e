package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/mod/semver"

	"github.com/opkit-dev/opkit/internal/scaffold"
)

func newInitCommand() *cobra.Command {
	var o scaffold.Options
	cmd := &cobra.Command{
		Use:   "init DIR --lang python|go|typescript|bash",
		Short: "Write a new operator project: a definition, a typed handler, a scenario",
		Long: `Write a new operator project into DIR: operator.yaml (a custom resource
with a spec, a status field, and one handler on create and update), the
handler in the language asked for on opkit's SDK for it, the types of the
definition (api.py, api.go, api.ts: opkit generate types), a scenario
(NAME.test.yaml), an example object and a README with the commands that
run it. What it writes passes opkit lint and opkit test as written.

DIR is created if missing; nothing in it is overwritten. The Operator's
name is DIR's name unless --name says; the kind is the name in PascalCase,
the group NAME.example.com.

--lang go writes a module that requires github.com/opkit-dev/opkit at this
opkit's version; a development build, which no module proxy serves, needs
--opkit-source, the checkout it was built from.`,
		Example: `  opkit init hello --lang python
  opkit init deploy-watcher --lang typescript --kind DeployWatcher --group ops.example.com
  opkit init hello --lang go --opkit-source ~/src/opkit`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Dir = args[0]
			if o.Lang == "" {
				return fmt.Errorf("--lang is required: one of %s", strings.Join(scaffold.Languages, ", "))
			}
			if o.Lang == scaffold.Go {
				v := version()
				switch {
				case o.OpkitSource != "":
					abs, err := filepath.Abs(o.OpkitSource)
					if err != nil {
						return err
					}
					if _, err := os.Stat(filepath.Join(abs, "pkg", "handler")); err != nil {
						return fmt.Errorf("--opkit-source %s: not a checkout of opkit (no pkg/handler)", o.OpkitSource)
					}
					o.OpkitSource = abs
				case !semver.IsValid(v) || semver.Build(v) != "" || strings.Contains(v, "dirty"):
					return fmt.Errorf("this opkit is a development build (%s): github.com/opkit-dev/opkit at its version is in no module proxy; give --opkit-source, the checkout it was built from", v)
				default:
					o.OpkitVersion = v
				}
			}
			files, err := scaffold.Write(o)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "wrote %s: %s\n", o.Dir, strings.Join(files, ", "))
			fmt.Fprintf(out, "next:\n  cd %s\n", o.Dir)
			if o.Lang == scaffold.TypeScript {
				fmt.Fprintln(out, "  npm install                          # TypeScript's compiler, for npm run build after a change")
			}
			fmt.Fprintln(out, "  opkit test .                         # its scenario, on a local control plane")
			fmt.Fprintln(out, "  opkit dev . --apply example.yaml     # run it, and try it with kubectl")
			return nil
		},
	}
	cmd.Flags().StringVar(&o.Lang, "lang", "", "the handler's language: "+strings.Join(scaffold.Languages, ", "))
	cmd.Flags().StringVar(&o.Name, "name", "", "the Operator's name (default: DIR's name)")
	cmd.Flags().StringVar(&o.Kind, "kind", "", "the custom resource's kind (default: the name in PascalCase)")
	cmd.Flags().StringVar(&o.Group, "group", "", "the custom resource's API group (default: NAME.example.com)")
	cmd.Flags().StringVar(&o.OpkitSource, "opkit-source", "", "--lang go: the opkit checkout the handler's module uses instead of a released version")
	return cmd
}
