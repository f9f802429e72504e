package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
)

// defaultRetention bounds the archive of an engine the CLI starts.
var defaultRetention = archive.Retention{MaxAge: 30 * 24 * time.Hour, MaxRuns: 100_000}

// defaultArchivePath is $OPKIT_ARCHIVE, else $XDG_STATE_HOME/opkit/runs.db,
// else ~/.local/state/opkit/runs.db.
func defaultArchivePath() string { return statePath("OPKIT_ARCHIVE", "runs.db") }

// archiveFlag adds --archive: a SQLite file, or a PostgreSQL database by
// its URL (archive.Open chooses). The default shown in the help has its
// password, if $OPKIT_ARCHIVE holds one, redacted.
func archiveFlag(cmd *cobra.Command, location *string) {
	def := defaultArchivePath()
	cmd.Flags().StringVar(location, "archive", def,
		"the run archive: a SQLite file, or a PostgreSQL database as postgres://USER@HOST/DB?PARAMS (docs/archive.md; env OPKIT_ARCHIVE)")
	cmd.Flags().Lookup("archive").DefValue = archive.RedactDSN(def)
}

// openExistingArchive opens an archive for reading; a missing file is an
// error that says where it was looked for. A PostgreSQL archive is opened
// as it is (an empty one has no runs).
func openExistingArchive(ctx context.Context, location string) (archive.Store, error) {
	if !archive.IsDSN(location) {
		if _, err := os.Stat(location); err != nil {
			return nil, fmt.Errorf("no run archive at %s (%w); runs are recorded there by opkit run and opkit dev, or pass --archive", location, err)
		}
	}
	return archive.Open(ctx, location, archive.Options{})
}

func newRunsCommand() *cobra.Command {
	var archivePath, kubeconfig, object, output, consoleURL string
	var q archive.Query
	cmd := &cobra.Command{
		Use:   "runs",
		Short: "List handler runs, newest first",
		Long: `List the handler runs recorded in the archive, newest first, with their
object's kind, trigger, attempt, outcome and error, and the runner Pod that
ran it when a run listed ran in one (an exec handler with exec.image, in a
cluster). Filter by operator, object, kind, handler, trigger or failures;
-o json prints every field. See a run's log with opkit logs RUN.

A run of an operator-wide schedule (an operator with neither a resource nor
a watch) is the Operator's own: its kind is Operator and its object the
operator's name. opkit runs --kind Operator lists those runs.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if object != "" {
				ns, name := splitObjectRef(object)
				if name == "" {
					return fmt.Errorf("--object %q: want NAMESPACE/NAME, or NAME for a cluster-scoped object", object)
				}
				q.Namespace, q.Name = ns, name
			}
			if output != "table" && output != "json" {
				return fmt.Errorf("-o %q: want table or json", output)
			}
			src, err := openRunSource(cmd, archivePath, kubeconfig)
			if err != nil {
				return err
			}
			defer func() { _ = src.Close() }()
			page, err := src.List(cmd.Context(), q)
			if err != nil {
				return err
			}
			noRuns := ""
			if len(page.Runs) == 0 && q.Cursor == "" {
				if noRuns, err = noRunsIn(cmd.Context(), src, q.Operator); err != nil {
					return err
				}
			}
			if output == "json" {
				return writeJSON(cmd.OutOrStdout(), page)
			}
			if len(page.Runs) == 0 {
				fmt.Fprintln(cmd.OutOrStdout(), noRuns)
				return nil
			}
			printRuns(cmd.OutOrStdout(), page.Runs, strings.TrimSuffix(consoleURL, "/"), time.Now())
			if page.Next != "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "more runs: add --cursor %s\n", page.Next)
			}
			return nil
		},
	}
	runSourceFlags(cmd, &archivePath, &kubeconfig)
	cmd.Flags().StringVar(&q.Operator, "operator", "", "only this operator's runs; a name the archive has never seen is an error")
	cmd.Flags().StringVar(&object, "object", "", "only runs for this object, NAMESPACE/NAME; NAME alone matches it in every namespace and none (cluster-scoped objects, operators)")
	cmd.Flags().StringVar(&q.Kind, "kind", "", "only runs for objects of this kind, as written in manifests (Deployment); Operator for operator-wide schedules")
	cmd.Flags().StringVar(&q.Handler, "handler", "", "only this handler's runs")
	cmd.Flags().StringVar(&q.Trigger, "trigger", "", "only runs of this trigger: "+strings.Join(runTriggers, ", "))
	cmd.Flags().BoolVar(&q.Failed, "failed", false, "only failed runs (Failed and GaveUp)")
	cmd.Flags().Var((*outcomeFlag)(&q.Outcome), "outcome", "only runs of this outcome, e.g. Denied (admission handlers' denials), GaveUp")
	cmd.Flags().IntVar(&q.Limit, "limit", 50, "runs per page, at most 1000")
	cmd.Flags().StringVar(&q.Cursor, "cursor", "", "continue after a previous page")
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table or json")
	cmd.Flags().StringVar(&consoleURL, "console-url", os.Getenv("OPKIT_CONSOLE_URL"), "the console's base URL: each run gets its page's link (env OPKIT_CONSOLE_URL)")
	return cmd
}

// writeJSON writes v to w as -o json prints it: indented by two spaces.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// getRun reads run id from the archive at location: an id it does not
// hold is an error naming the archive read, as it may not be the
// engine's.
func getRun(ctx context.Context, src *runSource, id string) (*archive.Run, error) {
	run, err := src.Get(ctx, id)
	if errors.Is(err, archive.ErrNotFound) {
		return nil, fmt.Errorf("run %s is not in %s: opkit runs lists the runs it keeps; an engine records its runs in its own archive (which one a command reads: docs/when-something-fails.md)", id, src.where())
	}
	return run, err
}

// noRunsIn says why opkit runs found no run, naming the archive it read:
// an archive with no run at all may be another than the engine's; with
// --operator, an operator the archive knows (by its runs, its webhook
// deliveries or its records of watched objects and schedules) has none
// that the other flags select, and a name it has never seen is an error
// that lists the operators it has runs of, as a misspelt name is the
// likely cause.
func noRunsIn(ctx context.Context, src *runSource, operator string) (string, error) {
	if src.remote() {
		// The runs API serves no counts: what it read is said.
		return fmt.Sprintf("No runs in %s select these flags.", src.where()), nil
	}
	store, where := src.Reader, src.location
	counts, err := store.Counts(ctx, time.Time{})
	if err != nil {
		return "", err
	}
	if operator == "" {
		if len(counts) == 0 {
			return fmt.Sprintf("No runs: the archive %s has none at all. An engine records its runs in its own archive: --archive names it (an engine in a cluster: docs/when-something-fails.md).", where), nil
		}
		return fmt.Sprintf("No runs in %s select these flags.", where), nil
	}
	if _, ok := counts[operator]; ok {
		return fmt.Sprintf("No runs of operator %s in %s select these flags.", operator, where), nil
	}
	deliveries, err := store.ListDeliveries(ctx, archive.DeliveryQuery{Operator: operator, Limit: 1})
	if err != nil {
		return "", err
	}
	states, err := store.HandlerRecords(ctx, operator)
	if err != nil {
		return "", err
	}
	if len(deliveries.Deliveries) > 0 || len(states) > 0 {
		return fmt.Sprintf("No runs: operator %s has none in the archive %s.", operator, where), nil
	}
	known := slices.Sorted(maps.Keys(counts))
	if len(known) == 0 {
		return "", fmt.Errorf("operator %s: the archive %s has no runs, webhook deliveries or records of it, nor runs of any operator", operator, where)
	}
	const shown = 20
	list := strings.Join(known[:min(len(known), shown)], ", ")
	if len(known) > shown {
		list += fmt.Sprintf(" and %d more", len(known)-shown)
	}
	return "", fmt.Errorf("operator %s: the archive %s has no runs, webhook deliveries or records of it; it has runs of %s", operator, where, list)
}

// outcomeFlag is --outcome: one of the archive's outcomes.
type outcomeFlag archive.Outcome

func (f *outcomeFlag) String() string { return string(*f) }
func (f *outcomeFlag) Type() string   { return "outcome" }

func (f *outcomeFlag) Set(s string) error {
	outcomes := []archive.Outcome{archive.Running, archive.Succeeded, archive.Failed, archive.GaveUp, archive.Cancelled, archive.Skipped, archive.Allowed, archive.Denied}
	for _, o := range outcomes {
		if strings.EqualFold(s, string(o)) {
			*f = outcomeFlag(o)
			return nil
		}
	}
	names := make([]string, len(outcomes))
	for i, o := range outcomes {
		names[i] = string(o)
	}
	return fmt.Errorf("want one of %s", strings.Join(names, ", "))
}

// runTriggers are the triggers a run records.
var runTriggers = []string{v1alpha1.OnCreate, v1alpha1.OnUpdate, v1alpha1.OnDelete, v1alpha1.OnResume, v1alpha1.OnSchedule,
	v1alpha1.OnWhen, v1alpha1.OnEvent, v1alpha1.TriggerRequeue, v1alpha1.TriggerRerun, v1alpha1.OnValidate, v1alpha1.OnMutate, v1alpha1.OnEnter, v1alpha1.OnExit,
	v1alpha1.TransitionInitial, v1alpha1.TransitionGuard, v1alpha1.TransitionTimeout, v1alpha1.TransitionDecision,
	v1alpha1.TriggerManual, v1alpha1.TriggerPaused, v1alpha1.TriggerResumed}

// printRuns writes runs as a table; with a console URL, each with the link
// of its page. The object's kind has a column of its own, as the objects
// are of any kind: a run of an operator-wide schedule reads as kind
// Operator, object the operator's name.
func printRuns(w io.Writer, runs []archive.Run, consoleURL string, now time.Time) {
	if len(runs) == 0 {
		fmt.Fprintln(w, "No runs.")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	// The runner that ran a run (an exec handler with an image, in a
	// cluster) has a column when a run of the page had one.
	onRunners := slices.ContainsFunc(runs, func(r archive.Run) bool { return r.Runner != "" })
	header := "RUN\tOPERATOR\tKIND\tOBJECT\tHANDLER\tTRIGGER\tATTEMPT\tOUTCOME"
	if onRunners {
		header += "\tRUNNER"
	}
	header += "\tSTARTED\tDURATION\tERROR"
	if consoleURL != "" {
		header += "\tCONSOLE"
	}
	fmt.Fprintln(tw, header)
	for _, r := range runs {
		handler, duration, errText := r.Row()
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s", r.ID, r.Operator, orDash(r.Kind), r.Object(), handler, r.Trigger, r.Attempt, r.Outcome)
		if onRunners {
			fmt.Fprintf(tw, "\t%s", orDash(r.Runner))
		}
		fmt.Fprintf(tw, "\t%s ago\t%s\t%s", now.Sub(r.StartedAt).Round(time.Second), duration, errText)
		if consoleURL != "" {
			fmt.Fprintf(tw, "\t%s/runs/%s", consoleURL, r.ID)
		}
		fmt.Fprintln(tw)
	}
	_ = tw.Flush()
}

// orDash is s, or - for an empty cell.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func newLogsCommand() *cobra.Command {
	var archivePath, kubeconfig string
	var follow, raw bool
	cmd := &cobra.Command{
		Use:   "logs RUN",
		Short: "Print a run's log (an exec handler's stderr, an http handler's exchange)",
		Long: `Print the log of one run, as recorded in the archive. With -f, keep
printing what comes until the run ends. When the run failed, its error
follows on stderr.

A handler's log is untrusted: terminal control sequences (colours, cursor
moves, window titles) are stripped and invalid UTF-8 replaced, as the
console shows it. --raw prints the bytes as the handler wrote them.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			src, err := openRunSourceOf(cmd, id, archivePath, kubeconfig)
			if err != nil {
				return err
			}
			defer func() { _ = src.Close() }()
			if raw && src.remote() {
				return fmt.Errorf("--raw prints the log's bytes as the archive keeps them, and %s serves it cleaned: read the archive itself with --archive", src.where())
			}
			if _, err := getRun(cmd.Context(), src, id); err != nil {
				return err
			}
			return printLogs(cmd.Context(), src, id, logsOptions{follow: follow, raw: raw}, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	runSourceFlags(cmd, &archivePath, &kubeconfig)
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "follow the log until the run ends")
	cmd.Flags().BoolVar(&raw, "raw", false, "print the log's bytes as written, control sequences included")
	return cmd
}

// printRerunLinks says which run a re-run repeats, who asked and why,
// and which re-runs a run has had; nothing for a run with neither.
func printRerunLinks(w io.Writer, run *archive.Run) {
	if run.RerunOf != "" {
		fmt.Fprintf(w, "run %s re-runs run %s, asked by %s", run.ID, run.RerunOf, orDash(run.Actor))
		if run.Reason != "" {
			fmt.Fprintf(w, ": %s", run.Reason)
		}
		fmt.Fprintln(w)
	}
	if len(run.Reruns) > 0 {
		fmt.Fprintf(w, "run %s was run again as: %s\n", run.ID, strings.Join(run.Reruns, ", "))
	}
}

// logsOptions are opkit logs' flags.
type logsOptions struct {
	// follow keeps printing until the run ends (-f).
	follow bool
	// raw prints the log's bytes as written (--raw).
	raw bool
}

// printLogs prints a run's log on stdout, and on stderr how it failed.
// What it prints ends with a newline: a log whose last line is not
// finished (a run in progress, or a handler that wrote no final newline)
// gets one, so that what the shell prints next starts a line of its own.
// While it follows, a line is printed as it comes, half or whole.
func printLogs(ctx context.Context, store archive.Reader, id string, o logsOptions, stdout, stderr io.Writer) error {
	end := &lineEnd{w: stdout}
	out := io.Writer(end)
	var clean *archive.CleanWriter
	if !o.raw {
		clean = archive.NewCleanWriter(end)
		out = clean
	}
	// done writes what the cleaner kept back and ends the last line.
	done := func() error {
		if clean != nil {
			if err := clean.Flush(); err != nil {
				return err
			}
		}
		return end.finish()
	}
	var offset int64
	for {
		// Read the run first: a log read after it shows the run finished is
		// complete.
		run, err := store.Get(ctx, id)
		if err != nil {
			return err
		}
		// A part cut from a long log is marked in the stream itself.
		log, err := store.Logs(ctx, id, offset)
		if err != nil {
			return err
		}
		if _, err := out.Write(log.Data); err != nil {
			return err
		}
		offset = log.Next
		if run.Outcome != archive.Running || !o.follow {
			// The log's end before the error, which may go to the same
			// terminal.
			if err := done(); err != nil {
				return err
			}
			if run.Outcome != archive.Running && run.Outcome != archive.Succeeded {
				fmt.Fprintf(stderr, "run %s %s (attempt %d): %s\n", id, run.Outcome, run.Attempt, run.Error)
			}
			printRerunLinks(stderr, run)
			return nil
		}
		select {
		case <-ctx.Done():
			return done()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// lineEnd passes writes on, and remembers whether the last byte was a
// newline.
type lineEnd struct {
	w io.Writer
	// open is true when something was written and it did not end with a
	// newline.
	open bool
}

func (l *lineEnd) Write(p []byte) (int, error) {
	n, err := l.w.Write(p)
	if n > 0 {
		l.open = p[n-1] != '\n'
	}
	return n, err
}

// finish ends an open line.
func (l *lineEnd) finish() error {
	if !l.open {
		return nil
	}
	_, err := l.Write([]byte{'\n'})
	return err
}

// objectKind finds the kind of the object arg (NS/NAME) from the runs q
// selects in the archive, and the operator that made them; none is an
// error that ends with none (what that means to the command), several
// operators one that asks for --operator.
func objectKind(cmd *cobra.Command, archivePath, kubeconfig string, q archive.Query, arg, none string) (schema.GroupVersionKind, string, error) {
	ctx := cmd.Context()
	src, err := openRunSource(cmd, archivePath, kubeconfig)
	if err != nil {
		return schema.GroupVersionKind{}, "", err
	}
	defer func() { _ = src.Close() }()
	store := src.Reader
	q.Limit = 1000
	page, err := store.List(ctx, q)
	if err != nil {
		return schema.GroupVersionKind{}, "", err
	}
	kinds := map[schema.GroupVersionKind]string{}
	var gvk schema.GroupVersionKind
	for _, r := range page.Runs {
		gvk = schema.FromAPIVersionAndKind(r.APIVersion, r.Kind)
		kinds[gvk] = r.Operator
	}
	switch {
	case len(kinds) == 0:
		what := "runs"
		if q.Handler == v1alpha1.TransitionHandler {
			what = "state transitions"
		}
		return gvk, "", fmt.Errorf("no %s for %s in %s: %s", what, arg, src.where(), none)
	case len(kinds) > 1:
		var ops []string
		for _, op := range kinds {
			ops = append(ops, op)
		}
		slices.Sort(ops)
		return gvk, "", fmt.Errorf("%s is an object of several operators (%s): choose one with --operator", arg, strings.Join(ops, ", "))
	}
	return gvk, kinds[gvk], nil
}

func newRetryCommand() *cobra.Command {
	var archivePath, kubeconfig, operator, reason string
	cmd := &cobra.Command{
		Use:   "retry NAMESPACE/NAME [--reason TEXT]",
		Short: "Run a stalled object's handlers again",
		Long: `Clear the failed attempts and the Stalled condition of an object's handlers,
so that the engine runs them again. The object's kind is found from its runs
in the archive (--operator chooses when several operators have an object of
that name); the engine consumes the request (annotation ` + v1alpha1.RetryAnnotation + `).
On an object a watch operator reacts to, which opkit never writes, the
annotation stays: each new value is one retry.

The request says who asked (the Kubernetes user this command runs as) and
why (--reason). The engine records the retry, with both, in the run archive
(opkit runs --object NAMESPACE/NAME shows it, handler ` + v1alpha1.RetryHandler + `), in its
RetryRequested Event on the object, and the console shows it on the object's
timeline. Asking needs patch on the object (Kubernetes RBAC).`,
		Example: `  opkit retry team-a/web --reason "the registry is back"`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ns, name := splitObjectRef(args[0])
			gvk, _, err := objectKind(cmd, archivePath, kubeconfig, archive.Query{Namespace: ns, Name: name, Operator: operator}, args[0], "nothing to retry")
			switch {
			case err != nil:
				return err
			case gvk.Group == v1alpha1.Group && gvk.Kind == v1alpha1.Kind:
				return fmt.Errorf("%s is an operator-wide schedule: its runs are retried by its handler's retry policy, and its next slot runs in any case; there is nothing to retry", args[0])
			}
			cfg, c, err := kubeClient(kubeconfig)
			if err != nil {
				return err
			}
			by, note, err := whoAmI(cmd.Context(), cfg, kubeconfig)
			if err != nil {
				return err
			}
			if note != "" {
				fmt.Fprintln(cmd.ErrOrStderr(), note)
			}
			obj := &unstructured.Unstructured{}
			obj.SetGroupVersionKind(gvk)
			obj.SetNamespace(ns)
			obj.SetName(name)
			// At to the nanosecond: on a watched object each new value is
			// one retry, also the same person's for the same reason.
			request := v1alpha1.RetryRequest{By: by, Reason: reason, At: time.Now().UTC().Format(time.RFC3339Nano)}
			patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{v1alpha1.RetryAnnotation: request.Value()}}})
			if err := c.Patch(cmd.Context(), obj, client.RawPatch(types.MergePatchType, patch)); err != nil {
				if apierrors.IsNotFound(err) {
					return fmt.Errorf("%s %s does not exist: nothing to retry", gvk.Kind, args[0])
				}
				return fmt.Errorf("asking for a retry of %s %s: %w", gvk.Kind, args[0], err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s: retry requested by %s%s; follow it with opkit runs --object %s\n", gvk.Kind, args[0], by, reasonSuffix(reason), args[0])
			return nil
		},
	}
	runSourceFlags(cmd, &archivePath, &kubeconfig)
	cmd.Flags().StringVar(&operator, "operator", "", "the operator, when several have an object of that name")
	cmd.Flags().StringVar(&reason, "reason", "", "why, in your words: recorded with who asked")
	return cmd
}
