package cli

import (
	"fmt"
	"os"
	"strings"

	"github.com/go-logr/logr/funcr"
	"github.com/spf13/cobra"

	"github.com/opkit-dev/opkit/internal/agent"
)

func newAgentCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "opkit's agent in a runner Pod: runs exec handlers that name an image (exec.image)",
		Long: `In a cluster, an exec handler with exec.image runs in a warm runner Pod of
that image. The Pod's init container runs "opkit agent install /opkit/bin" to
copy opkit into a shared volume, and its container, of the handler's image,
runs "/opkit/bin/opkit agent run": the agent pulls the operator's runs from the
engine over HTTPS and runs each command as a local exec handler runs (argv
only, stdin the binding context, stdout the result, stderr streamed to the
run's log, a timeout that kills the process group). See docs/production.md.

opkit generate manifests and the Helm chart make the runners' Deployments;
you run these commands yourself only to try a runner by hand.`,
	}
	cmd.AddCommand(newAgentInstallCommand(), newAgentRunCommand())
	return cmd
}

func newAgentInstallCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "install DIR",
		Short: "Copy this opkit executable to DIR/opkit (mode 0755), for a runner's container",
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			return agent.Install(args[0])
		},
	}
}

func newAgentRunCommand() *cobra.Command {
	var opts agent.Options
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Pull the runs of one operator's exec handlers of one image from the engine, and run them",
		Long: `Pull the runs of --operator's exec handlers whose exec.image is --image from
the engine's runner API (--engine, https, its certificate checked against
--ca-file) and run them, --parallel at a time, until interrupted.

The agent authenticates with the ServiceAccount token in --token-file (a
projected token of audience opkit.dev/runner, read again for each request); the
engine accepts the ServiceAccount opkit-runner-OPERATOR of its own namespace,
for OPERATOR's runs only. A handler's relative command path and working
directory resolve from --files, the operator's files. The runner's name in
run records is $POD_NAME.

Every flag can be set by an environment variable OPKIT_AGENT_<FLAG>, e.g.
OPKIT_AGENT_ENGINE; a flag given wins.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.Name == "" {
				opts.Name = os.Getenv("POD_NAME")
			}
			if opts.Name == "" {
				opts.Name, _ = os.Hostname()
			}
			opts.Log = funcr.New(func(prefix, args string) {
				fmt.Fprintln(cmd.ErrOrStderr(), strings.TrimSpace(prefix+" "+args))
			}, funcr.Options{})
			fmt.Fprintf(cmd.ErrOrStderr(), "agent %s: taking runs of operator %s, image %s, from %s\n", opts.Name, opts.Operator, opts.Image, opts.Engine)
			return agent.Run(cmd.Context(), opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Engine, "engine", env("ENGINE", ""), "the engine's runner API, https://SERVICE.NAMESPACE.svc:PORT")
	f.StringVar(&opts.Operator, "operator", env("OPERATOR", ""), "the operator whose runs to take")
	f.StringVar(&opts.Image, "image", env("IMAGE", ""), "the image of the handlers whose runs to take (their exec.image, as written)")
	f.StringVar(&opts.Files, "files", env("FILES", ""), "the operator's files: relative command paths and working directories resolve from here (default: the working directory)")
	f.StringVar(&opts.CAFile, "ca-file", env("CA_FILE", ""), "PEM of the CAs that sign the engine's certificate (ConfigMap opkit-runners-ca)")
	f.StringVar(&opts.TokenFile, "token-file", env("TOKEN_FILE", ""), "the runner's ServiceAccount token, of audience opkit.dev/runner")
	f.StringVar(&opts.Name, "name", env("NAME", ""), "the runner's name in run records (default: $POD_NAME, else the host name)")
	f.IntVar(&opts.Parallel, "parallel", envInt("PARALLEL", 4), "how many runs at once")
	return cmd
}

// env is $OPKIT_AGENT_<name>, or def.
func env(name, def string) string {
	if v, ok := os.LookupEnv("OPKIT_AGENT_" + name); ok {
		return v
	}
	return def
}

// envInt is $OPKIT_AGENT_<name> as a number, or def.
func envInt(name string, def int) int {
	var n int
	if _, err := fmt.Sscan(env(name, ""), &n); err == nil {
		return n
	}
	return def
}
