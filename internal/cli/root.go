// Package cli implements the opkit command line. Each command is built by a
// function returning a *cobra.Command; Main wires them and maps errors to exit
// codes: 0 for success, 1 for any error, printed as one "opkit: ..." line.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

// exitError carries a specific exit code out of a command.
type exitError struct {
	code int
	err  error
	// said: the command has told the user already (kubectl's own
	// error), and Main prints nothing more.
	said bool
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// Main runs the CLI with args and returns the process exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := NewRootCommand()
	root.SetArgs(goTestFlags(args))
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	ee, ok := errors.AsType[*exitError](err)
	if _, logged := errors.AsType[*loggedError](err); !logged && (!ok || !ee.said) {
		fmt.Fprintf(stderr, "opkit: %v\n", err)
	}
	if ok {
		return ee.code
	}
	return 1
}

// NewRootCommand returns the opkit command with all its subcommands.
func NewRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "opkit",
		Short:         "opkit: Kubernetes operators from a manifest, with every run recorded",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newVersionCommand(), newClusterCommand(), newKubectlCommand(), newRunCommand(), newDevCommand(),
		newRunsCommand(), newLogsCommand(), newEventsCommand(), newRetryCommand(), newPauseCommand(), newResumeCommand(), newScheduleCommand(), newDecideCommand(), newConsoleCommand(), newGenerateCommand(), newTestCommand(), newLintCommand(), newMigrateCommand(), newAgentCommand())
	root.AddCommand(newStatesCommand())
	root.AddCommand(newRerunCommand(), newReplayCommand(), newWhyCommand(), newInitCommand())
	root.AddCommand(newPlanCommand(), newRolloutCommand())
	return root
}
