package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/opkit-dev/opkit/internal/devcluster"
)

// Version is opkit's version, set at link time with
// -ldflags "-X github.com/opkit-dev/opkit/internal/cli.Version=v1.2.3".
// Defaults to the module version recorded in the binary.
var Version = ""

func version() string {
	if Version != "" {
		return Version
	}
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" {
		return info.Main.Version
	}
	return "(devel)"
}

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print opkit's version and the control-plane versions it runs",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintf(cmd.OutOrStdout(), "opkit %s (%s, %s/%s)\nlocal control plane: Kubernetes %s, etcd %s\n",
				version(), runtime.Version(), runtime.GOOS, runtime.GOARCH,
				devcluster.KubernetesVersion, devcluster.EtcdVersion)
			return nil
		},
	}
}
