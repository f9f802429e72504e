package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/opkit-dev/opkit/internal/console"
	"github.com/opkit-dev/opkit/internal/runsserver"
	"github.com/opkit-dev/opkit/internal/stack"
)

// consoleFlags are the console's settings, shared by run, dev and console.
type consoleFlags struct {
	// anyPort: the address is the default, not the user's; when its port
	// is taken, another is chosen.
	anyPort   bool
	addrFlag  string
	addr      string
	auth      string
	tokenFile string
	url       string
	// namespace is where its Redeliver button creates Redeliveries: the
	// namespace opkit runs in (kubeconfigNamespace), which the command
	// sets; "" is default.
	namespace string
}

// register adds the flags; addrFlag names the address flag.
func (f *consoleFlags) register(cmd *cobra.Command, addrFlag, addrDefault, addrUsage string) {
	f.addrFlag = addrFlag
	cmd.Flags().StringVar(&f.addr, addrFlag, addrDefault, addrUsage)
	cmd.Flags().StringVar(&f.auth, "console-auth", "none", "who may use the console: none (loopback addresses only), token (--console-token-file or $OPKIT_CONSOLE_TOKEN) or kubernetes (a Kubernetes bearer token, checked by TokenReview, with RBAC on each operator's resource: its custom resource, the kind it watches, or its Operator)")
	cmd.Flags().StringVar(&f.tokenFile, "console-token-file", "", "the file holding the console's token, for --console-auth token")
	cmd.Flags().StringVar(&f.url, "console-url", os.Getenv("OPKIT_CONSOLE_URL"), "the console's public base URL, linked from Events and the CLI (env OPKIT_CONSOLE_URL; default: http://ADDR)")
}

// validate checks the flags before anything starts: the auth, and an
// address beyond loopback only with auth.
func (f *consoleFlags) validate(cmd *cobra.Command) error {
	if f == nil || f.addr == "" {
		return nil
	}
	f.anyPort = !cmd.Flags().Changed(f.addrFlag)
	auth, err := f.authOptions()
	if err != nil {
		return err
	}
	if auth == (console.Auth{}) && !console.IsLoopback(f.addr) {
		return fmt.Errorf("--%s %s is not a loopback address: serving the console there needs --console-auth token or kubernetes", f.addrFlag, f.addr)
	}
	return nil
}

func (f *consoleFlags) authOptions() (console.Auth, error) {
	switch f.auth {
	case "", "none":
		return console.Auth{}, nil
	case "kubernetes":
		return console.Auth{Kubernetes: true}, nil
	case "token":
		token := os.Getenv("OPKIT_CONSOLE_TOKEN")
		if f.tokenFile != "" {
			data, err := os.ReadFile(f.tokenFile)
			if err != nil {
				return console.Auth{}, fmt.Errorf("--console-token-file: %w", err)
			}
			token = string(data)
		}
		token = strings.TrimSpace(token)
		if len(token) < 16 {
			return console.Auth{}, errors.New("--console-auth token needs a token of at least 16 characters, in --console-token-file or $OPKIT_CONSOLE_TOKEN")
		}
		return console.Auth{Token: token}, nil
	}
	return console.Auth{}, fmt.Errorf("--console-auth %q: want none, token or kubernetes", f.auth)
}

// console is the console these flags serve, for stack.Options.Console
// or opkit console; nil when the address is empty. validate has checked
// the flags.
func (f *consoleFlags) console() *stack.Console {
	if f == nil || f.addr == "" {
		return nil
	}
	auth, _ := f.authOptions() // checked by validate
	ns := f.namespace
	if ns == "" {
		ns = "default"
	}
	return &stack.Console{Addr: f.addr, AnyPort: f.anyPort, URL: f.url, Auth: auth, RedeliveryNamespace: ns}
}

// explain names the flag to change when err is the console's address
// taken or refused.
func (f *consoleFlags) explain(err error) error {
	if le, ok := errors.AsType[*stack.ListenError](err); ok && le.Listener == "console" {
		return fmt.Errorf("%w (choose another address with --%s)", err, f.addrFlag)
	}
	return err
}

func newConsoleCommand() *cobra.Command {
	var archivePath, kubeconfig string
	f := &consoleFlags{}
	af := &runsAPIFlags{}
	cmd := &cobra.Command{
		Use:   "console",
		Short: "Serve the web console from a run archive and a kubeconfig, without an engine",
		Long: `Serve the web console: the operators and their objects by condition (the
objects watch operators have state for, and operator-wide schedules), each
object's timeline of runs, each run's diff, log and outcome, and the failures
inbox, with the actions retry, pause and resume on custom resources, and
Redeliver on a webhook delivery. opkit run --console and
opkit dev serve the same console beside their engine; this command serves it
from an archive (--archive) and a cluster alone. See docs/console.md.

It listens on loopback unless --console-auth is token or kubernetes.

With --runs-api-addr, it also serves the archive to the API server's
aggregation layer as runs.opkit.dev/v1alpha1, as opkit run does, so that
kubectl get runs reads an archive no engine serves (--listen "" for the runs
API alone): see docs/runs-api.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.validate(cmd); err != nil {
				return err
			}
			// Operator-wide runs and deliveries are served in the namespace
			// of the kubeconfig, as opkit run serves them in its own.
			f.namespace = kubeconfigNamespace(kubeconfig)
			runsOpts, err := af.options(f.namespace)
			if err != nil {
				return err
			}
			c := f.console()
			if c == nil && runsOpts == nil {
				return errors.New("--listen is empty and --runs-api-addr is 0: nothing to serve")
			}
			cfg, err := loadKubeconfig(kubeconfig)
			if err != nil {
				return err
			}
			store, err := openExistingArchive(cmd.Context(), archivePath)
			if err != nil {
				return err
			}
			defer func() { _ = store.Close() }()
			ctx, stop := context.WithCancel(cmd.Context())
			defer stop()
			var g errgroup.Group
			if runsOpts != nil {
				runsOpts.Archive = store
				srv, err := runsserver.New(cfg, *runsOpts, newLogger(cmd.ErrOrStderr()).WithName("runs-api"))
				if err != nil {
					return err
				}
				g.Go(func() error {
					defer stop() // the console is of no use to kubectl users without it
					return srv.Start(ctx)
				})
				fmt.Fprintf(cmd.ErrOrStderr(), "runs API: https://%s, registered as the APIService %s (kubectl get runs -A; Ctrl-C removes it)\n", srv.Addr(), runsserver.Name)
			}
			if c != nil {
				served, err := c.Serve(ctx, console.Options{Archive: store, Config: cfg})
				if err != nil {
					stop()
					_ = g.Wait()
					return f.explain(err)
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "console: %s (Ctrl-C stops it)\n", served.URL)
				g.Go(func() error {
					defer stop()
					return served.Wait()
				})
			}
			return g.Wait()
		},
	}
	archiveFlag(cmd, &archivePath)
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
	f.register(cmd, "listen", "127.0.0.1:7380", "the address to serve the console on; empty for none")
	af.register(cmd, "0", "")
	return cmd
}
