package cli

import (
	"errors"
	"os"
	"os/exec"

	"github.com/spf13/cobra"

	"github.com/opkit-dev/opkit/internal/devcluster"
)

func newKubectlCommand() *cobra.Command {
	var stateDir string
	cmd := &cobra.Command{
		Use:   "kubectl [ARGS...]",
		Short: "Run the cached kubectl against the local control plane",
		Long: `Run kubectl ` + devcluster.KubernetesVersion + ` (built with the control plane) with KUBECONFIG set to the
running local control plane. Every argument is passed to kubectl unchanged:
  opkit kubectl get namespaces`,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			st, running, err := runningState(stateDir)
			if err != nil {
				return err
			}
			if !running || st.Kubeconfig == "" {
				return errNotRunning(stateDir)
			}
			bins, err := (&devcluster.Cache{Log: cmd.ErrOrStderr()}).Ensure(cmd.Context())
			if err != nil {
				return err
			}
			kubectl := exec.CommandContext(cmd.Context(), bins.Path(devcluster.Kubectl), args...)
			kubectl.Env = append(os.Environ(), "KUBECONFIG="+st.Kubeconfig)
			kubectl.Stdin, kubectl.Stdout, kubectl.Stderr = cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr()
			err = kubectl.Run()
			if ee, ok := errors.AsType[*exec.ExitError](err); ok {
				// kubectl has said what went wrong; pass its exit code on.
				return &exitError{code: ee.ExitCode(), err: errors.New("kubectl " + ee.String())}
			}
			return err
		},
	}
	stateDir = defaultStateDir()
	return cmd
}
