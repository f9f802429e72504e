package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/runsclient"
)

// runSource is the archive a triage command reads (opkit runs, logs,
// rerun, retry, events), and what it is, for its messages.
type runSource struct {
	archive.Reader
	// location is the archive's file or database (its password redacted),
	// with what the command adds of why it reads it; "" for the runs API.
	location string
	// api names the runs API of a cluster it reads; "" for an archive.
	api string
}

// remote reports whether it reads the runs API of a cluster.
func (s *runSource) remote() bool { return s.api != "" }

// where names what it reads, for messages.
func (s *runSource) where() string {
	if s.remote() {
		return s.api
	}
	return "the archive " + s.location
}

// runSourceFlags adds --archive and --kubeconfig, the two ways to say
// which archive a triage command reads.
func runSourceFlags(cmd *cobra.Command, archivePath, kubeconfig *string) {
	archiveFlag(cmd, archivePath)
	cmd.Flags().Lookup("archive").Usage += "; without it (nor the variable), the runs API of the kubeconfig's cluster when it serves one, else the default file"
	if cmd.Flags().Lookup("kubeconfig") == nil {
		cmd.Flags().StringVar(kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
	}
}

// openRunSource opens the archive a triage command reads:
//
//   - --archive or $OPKIT_ARCHIVE, when given: that file or database;
//   - else the runs API of the kubeconfig's cluster, when it serves one
//     (an engine in it runs with --runs-api): the engine's own archive,
//     read as the kubeconfig's user, as RBAC allows;
//   - else the default file, which opkit dev and opkit run write: no
//     kubeconfig, or a cluster that serves no runs API, or one that
//     cannot be reached (said on stderr, with why).
//
// A cluster that has the runs API registered but cannot serve it (the
// engine down) is an error: another archive would show other runs.
// openRunSourceOf is openRunSource for a command about one run, id,
// which is checked first.
func openRunSourceOf(cmd *cobra.Command, id, archivePath, kubeconfig string) (*runSource, error) {
	if err := checkRunID(id); err != nil {
		return nil, err
	}
	return openRunSource(cmd, archivePath, kubeconfig)
}

// checkRunID refuses what is not a run id, saying where ids are found.
func checkRunID(id string) error {
	if !archive.ValidID(id) {
		return fmt.Errorf("%q is not a run id (opkit runs lists them)", id)
	}
	return nil
}

func openRunSource(cmd *cobra.Command, archivePath, kubeconfig string) (*runSource, error) {
	ctx := cmd.Context()
	if archiveGiven(cmd) {
		return openArchiveSource(ctx, archivePath)
	}
	cfg, err := loadKubeconfig(kubeconfig)
	if err != nil {
		if !clientcmd.IsEmptyConfig(errors.Unwrap(err)) && !clientcmd.IsEmptyConfig(err) {
			note(cmd.ErrOrStderr(), "no cluster to read the runs of (%v): reading %s", err, archive.RedactDSN(archivePath))
		}
		return openArchiveSource(ctx, archivePath)
	}
	askCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	r, err := runsclient.Open(askCtx, cfg)
	switch {
	case err == nil:
		return &runSource{Reader: r, api: r.String()}, nil
	case runsclient.IsNotServed(err):
		src, oerr := openArchiveSource(ctx, archivePath)
		why := fmt.Sprintf("the cluster at %s serves no runs API: an engine installed with --runs-api serves its archive there, docs/runs-api.md", cfg.Host)
		if oerr != nil {
			return nil, fmt.Errorf("%w; %s", oerr, why)
		}
		src.location += " (" + why + ")"
		return src, nil
	case errors.Is(err, runsclient.ErrUnavailable):
		return nil, err
	default:
		note(cmd.ErrOrStderr(), "%v: reading %s instead", err, archive.RedactDSN(archivePath))
		return openArchiveSource(ctx, archivePath)
	}
}

// archiveGiven reports whether the user named an archive: --archive, or
// $OPKIT_ARCHIVE.
func archiveGiven(cmd *cobra.Command) bool {
	return cmd.Flags().Changed("archive") || os.Getenv("OPKIT_ARCHIVE") != ""
}

func openArchiveSource(ctx context.Context, location string) (*runSource, error) {
	store, err := openExistingArchive(ctx, location)
	if err != nil {
		return nil, err
	}
	return &runSource{Reader: store, location: archive.RedactDSN(location)}, nil
}

// note writes one line on w, prefixed opkit:.
func note(w io.Writer, format string, args ...any) {
	fmt.Fprintf(w, "opkit: "+format+"\n", args...)
}
