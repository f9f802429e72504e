package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/opkit-dev/opkit/internal/devcluster"
)

func newKubectlCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "kubectl [ARGS...]",
		Short: "Run the cached kubectl against the local control plane",
		Long: `Run kubectl ` + devcluster.KubernetesVersion + ` (built with the control plane). Every argument is passed
to kubectl unchanged:
  opkit kubectl get namespaces

The cluster is, in this order: the one --kubeconfig names, or $KUBECONFIG
when it is set; else the plane of ` + "`opkit cluster start`" + `; else the plane of a
running ` + "`opkit dev`" + `. ` + "`opkit kubectl help`" + ` prints kubectl's own help.
The exit code is kubectl's.`,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
				return cmd.Help()
			}
			env := os.Environ()
			if !hasKubeconfigFlag(args) && os.Getenv("KUBECONFIG") == "" {
				path, err := localKubeconfig(defaultStateDir())
				if err != nil {
					return err
				}
				env = append(env, "KUBECONFIG="+path)
			}
			bins, err := (&devcluster.Cache{Log: cmd.ErrOrStderr()}).Ensure(cmd.Context())
			if err != nil {
				return err
			}
			kubectl := exec.CommandContext(cmd.Context(), bins.Path(devcluster.Kubectl), args...)
			kubectl.Env = env
			kubectl.Stdin, kubectl.Stdout, kubectl.Stderr = cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr()
			err = kubectl.Run()
			if ee, ok := errors.AsType[*exec.ExitError](err); ok && ee.ExitCode() > 0 {
				// kubectl has said what went wrong: its exit code is passed
				// on, and nothing is added to its error.
				return &exitError{code: ee.ExitCode(), err: fmt.Errorf("kubectl: %w", err), said: true}
			}
			if err != nil {
				return fmt.Errorf("kubectl: %w", err) // killed by a signal, or not started
			}
			return nil
		},
	}
	return cmd
}

// hasKubeconfigFlag reports whether kubectl's arguments name a kubeconfig.
func hasKubeconfigFlag(args []string) bool {
	return slices.ContainsFunc(args, func(a string) bool {
		return a == "--kubeconfig" || strings.HasPrefix(a, "--kubeconfig=")
	})
}

// localKubeconfig finds the kubeconfig of a local plane: the one `opkit
// cluster start` runs, else the one of a running `opkit dev`.
func localKubeconfig(stateDir string) (string, error) {
	st, running, err := runningState(stateDir)
	if err != nil {
		return "", err
	}
	if running && st.Kubeconfig != "" {
		return st.Kubeconfig, nil
	}
	if path, ok := devKubeconfig(stateDir); ok {
		return path, nil
	}
	return "", fmt.Errorf("no local control plane is running (state directory %s): start one with `opkit cluster start` or `opkit dev`, or set KUBECONFIG", stateDir)
}

// devPlaneFile, in the state directory, names the kubeconfig of the plane
// of a running `opkit dev`, and its process.
const devPlaneFile = "dev-plane.json"

type devPlane struct {
	PID        int    `json:"pid"`
	Kubeconfig string `json:"kubeconfig"`
}

// announceDevPlane records the plane of this `opkit dev` for `opkit
// kubectl`; the returned function removes the record, if it is still
// this process's.
func announceDevPlane(stateDir, kubeconfig string) (func(), error) {
	path := filepath.Join(stateDir, devPlaneFile)
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, err
	}
	data, _ := json.Marshal(devPlane{PID: os.Getpid(), Kubeconfig: kubeconfig})
	tmp := path + fmt.Sprintf(".%d", os.Getpid())
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return nil, err
	}
	if err := os.Rename(tmp, path); err != nil {
		return nil, err
	}
	return func() {
		if p, ok := readDevPlane(path); ok && p.PID == os.Getpid() {
			_ = os.Remove(path)
		}
	}, nil
}

// devKubeconfig returns the kubeconfig of a running `opkit dev`, if any.
func devKubeconfig(stateDir string) (string, bool) {
	p, ok := readDevPlane(filepath.Join(stateDir, devPlaneFile))
	if !ok || p.PID <= 0 || syscall.Kill(p.PID, 0) != nil {
		return "", false // none, or left by a process that is gone
	}
	if _, err := os.Stat(p.Kubeconfig); err != nil {
		return "", false
	}
	return p.Kubeconfig, true
}

func readDevPlane(path string) (devPlane, bool) {
	var p devPlane
	data, err := os.ReadFile(path)
	if err != nil || json.Unmarshal(data, &p) != nil {
		return p, false
	}
	return p, true
}
