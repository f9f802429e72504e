package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/executor"
)

// replayLong is opkit replay's help.
const replayLong = `Run the handler of an archived run here, with the binding context the run
got (as the archive recorded it) on its stdin, print its result and
compare it with the result the run recorded: the same, or a diff (- as
recorded, + now), and exit 1. With a COMMAND after --, that command runs
instead of the handler's, in the current directory: try a fix against
the input that failed before you deploy it.

The command runs as the engine runs an exec handler: its argv, never
through a shell, in its own process group, with the handler's timeout,
the environment PATH, HOME, LANG, LC_ALL, TZ and TMPDIR, OPKIT_RUN_ID,
OPKIT_HANDLER, OPKIT_TRIGGER and OPKIT_IDEMPOTENCY_KEY (the run's), and
the handler's env. The handler's command and env are read from -f FILE
(it runs in FILE's directory, or its workingDir relative to it, as opkit
run has it), else from the Operator in the cluster (it runs in the
current directory); job and http handlers need a COMMAND.

Secrets never reach the archive: an env variable from a Secret
(secretKeyRef) must be given with --env-file FILE (NAME=value lines; #
starts a comment), which may set any other variable too; replay names
those it misses. The data of Secrets among the binding context's children
and related objects was dropped before it was recorded; replay names
them. A handler that runs as a ServiceAccount gets no credentials here:
give it a KUBECONFIG in --env-file.

The archive is --archive: a SQLite file (one downloaded from a cluster
too) or a PostgreSQL URL.`

func newReplayCommand() *cobra.Command {
	var archivePath, kubeconfig, file, envFile string
	cmd := &cobra.Command{
		Use:   "replay RUN [--env-file FILE] [-- COMMAND...]",
		Short: "Run a run's handler on this machine with the binding context it got, and compare the results",
		Long:  replayLong,
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stdout, stderr := cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr()
			id, command := args[0], args[1:]
			if dash := cmd.ArgsLenAtDash(); dash != 1 && (dash != -1 || len(args) > 1) {
				return fmt.Errorf("want RUN, then the command after --: opkit replay RUN -- ./fixed.sh ARG")
			}
			if err := checkRunID(id); err != nil {
				return err
			}
			// The binding context a run got is the archive's alone: the
			// runs API does not serve it.
			store, err := openArchiveSource(ctx, archivePath)
			if err != nil {
				return err
			}
			defer func() { _ = store.Close() }()
			if !archiveGiven(cmd) {
				store.location += " (opkit replay reads an archive itself, by --archive: the runs API of a cluster does not serve the binding context a run got)"
			}
			run, err := getRun(ctx, store, id)
			if err != nil {
				return err
			}
			if len(run.Input) == 0 {
				return fmt.Errorf("run %s has no recorded binding context (an earlier opkit did not keep it, or an admission call): there is nothing to replay", id)
			}
			h, from, err := replayHandler(ctx, run, file, kubeconfig)
			if err != nil && len(command) == 0 {
				return err
			}
			action := v1alpha1.ExecAction{Command: command}
			timeout := definition.DefaultTimeout
			if h != nil {
				timeout = h.Timeout
				if h.Exec != nil {
					action = *h.Exec
					action.Command = slices.Clone(h.Exec.Command)
				}
				if len(command) > 0 {
					// The user's command, as typed in their shell: its
					// paths are the current directory's, not the
					// definition's.
					action.Command, action.WorkingDir = command, ""
				}
			}
			if len(action.Command) == 0 {
				return fmt.Errorf("handler %s is a %s handler (%s): replay runs a command; give it after --, e.g. opkit replay %s -- ./handler.sh", run.Handler, h.Action(), from, id)
			}
			given, err := readEnvFile(envFile)
			if err != nil {
				return err
			}
			if action.Env, err = replayEnv(action.Env, given); err != nil {
				return err
			}
			for _, note := range redactedInput(run.Input) {
				fmt.Fprintln(stderr, "replay: "+note)
			}
			if sa := action.ServiceAccount; sa != nil {
				fmt.Fprintf(stderr, "replay: handler %s runs as ServiceAccount %s in the cluster: here it has no credentials but a KUBECONFIG from --env-file\n", run.Handler, sa.Name)
				action.ServiceAccount = nil
			}
			fmt.Fprintf(stderr, "replay: run %s (operator %s, handler %s, trigger %s, %s) with its recorded binding context: %s\n",
				id, run.Operator, run.Handler, run.Trigger, run.Outcome, strings.Join(action.Command, " "))
			ex := &executor.Exec{Action: action}
			res, runErr := ex.Run(ctx, executor.Request{
				RunID: run.ID, Handler: run.Handler, Trigger: run.Trigger, Key: run.Key, Attempt: run.Attempt,
				Input: run.Input, Timeout: timeout, Log: stderr,
			})
			return compareReplay(stdout, run, res, runErr)
		},
	}
	archiveFlag(cmd, &archivePath)
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file, to read the Operator's definition from the cluster (default: $KUBECONFIG or ~/.kube/config)")
	cmd.Flags().StringVarP(&file, "file", "f", "", "the Operator's definition: the handler's command and env (default: the Operator in the cluster)")
	cmd.Flags().StringVar(&envFile, "env-file", "", "NAME=value lines: the values of env variables from Secrets, which the archive never keeps, and any other")
	return cmd
}

// replayHandler is run's handler as its Operator defines it, from file,
// else from the cluster, and where it was read from.
func replayHandler(ctx context.Context, run *archive.Run, file, kubeconfig string) (*definition.Handler, string, error) {
	var defs []*definition.Definition
	from := file
	if file != "" {
		var err error
		if defs, err = definition.CompileFiles(file); err != nil {
			return nil, "", err
		}
	} else {
		from = "the Operator " + run.Operator + " in the cluster"
		cfg, err := loadKubeconfig(kubeconfig)
		if err != nil {
			return nil, "", fmt.Errorf("the handler's command is read from -f FILE or the cluster: %w", err)
		}
		c, err := client.New(cfg, client.Options{})
		if err != nil {
			return nil, "", err
		}
		o, err := getOperator(ctx, c, run.Operator)
		if err != nil {
			return nil, "", fmt.Errorf("reading %s: %w (pass its definition with -f FILE, or a COMMAND after --)", from, err)
		}
		d, err := definition.Compile(definition.FromCluster(o))
		if err != nil {
			return nil, "", fmt.Errorf("%s: %w", from, err)
		}
		defs = append(defs, d)
	}
	for _, d := range defs {
		if d.Operator.Name != run.Operator {
			continue
		}
		for _, h := range d.Handlers {
			if h.Name == run.Handler {
				return h, from, nil
			}
		}
		return nil, "", fmt.Errorf("handler %s is not in %s: pass the definition that has it with -f FILE, or a COMMAND after --", run.Handler, from)
	}
	return nil, "", fmt.Errorf("%s does not define operator %s", from, run.Operator)
}

// readEnvFile reads NAME=value lines; none without a file.
func readEnvFile(path string) (map[string]string, error) {
	out := map[string]string{}
	if path == "" {
		return out, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--env-file: %w", err)
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, value, ok := strings.Cut(line, "=")
		if !ok || name == "" || strings.ContainsAny(name, " \t") {
			return nil, fmt.Errorf("--env-file %s, line %d: %q is not NAME=value", path, n, line)
		}
		out[name] = value
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("--env-file %s: %w", path, err)
	}
	return out, nil
}

// replayEnv is the handler's env with given's values: those from Secrets
// must all be given (an error names those missing), the others are
// overridden when given, and given's other names are added.
func replayEnv(env []v1alpha1.EnvVar, given map[string]string) ([]v1alpha1.EnvVar, error) {
	var out []v1alpha1.EnvVar
	var missing []string
	seen := map[string]bool{}
	for _, v := range env {
		seen[v.Name] = true
		value, ok := given[v.Name]
		if ref := secretRef(v); ref != nil && !ok {
			missing = append(missing, fmt.Sprintf("%s (Secret %s, key %s)", v.Name, ref.Name, ref.Key))
			continue
		}
		if !ok {
			value = v.Value
		}
		out = append(out, v1alpha1.EnvVar{Name: v.Name, Value: value})
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("the handler's env takes values from Secrets, which the archive never keeps: give %s with --env-file FILE (NAME=value lines)", strings.Join(missing, ", "))
	}
	for _, name := range slices.Sorted(maps.Keys(given)) {
		if !seen[name] {
			out = append(out, v1alpha1.EnvVar{Name: name, Value: given[name]})
		}
	}
	return out, nil
}

func secretRef(v v1alpha1.EnvVar) *v1alpha1.SecretKeyRef {
	if v.ValueFrom == nil {
		return nil
	}
	return v.ValueFrom.SecretKeyRef
}

// redactedInput names what the recorded binding context lacks: the data
// of the Secrets among its children and related objects.
func redactedInput(input json.RawMessage) []string {
	var bc struct {
		Children map[string]map[string]any `json:"children"`
		Related  map[string]any            `json:"related"`
	}
	if json.Unmarshal(input, &bc) != nil {
		return nil
	}
	var notes []string
	secret := func(where string, obj map[string]any) {
		if obj["kind"] == "Secret" && obj["apiVersion"] == "v1" {
			name, _, _ := unstructured.NestedString(obj, "metadata", "name")
			notes = append(notes, fmt.Sprintf("%s is Secret %s: its data was not recorded, and the handler gets none", where, name))
		}
	}
	for _, id := range slices.Sorted(maps.Keys(bc.Children)) {
		secret("children."+id, bc.Children[id])
	}
	for _, id := range slices.Sorted(maps.Keys(bc.Related)) {
		switch v := bc.Related[id].(type) {
		case map[string]any:
			secret("related."+id, v)
		case []any:
			for i, it := range v {
				if obj, ok := it.(map[string]any); ok {
					secret(fmt.Sprintf("related.%s[%d]", id, i), obj)
				}
			}
		}
	}
	return notes
}

// errResultDiffers is replay's failure when the result is not the one
// recorded.
var errResultDiffers = errors.New("the result differs from the one recorded")

// compareReplay prints the replay's result (or its failure) and how it
// compares with what run recorded; a difference is an error.
func compareReplay(w io.Writer, run *archive.Run, res *executor.Result, runErr error) error {
	var now string
	if runErr != nil {
		now = "failed: " + runErr.Error()
	} else {
		data, _ := json.Marshal(res)
		now = indentJSON(data)
	}
	// A failed run recorded its error, and no result.
	recorded := "{}"
	switch {
	case len(run.Result) > 0:
		recorded = indentJSON(run.Result)
	case run.Outcome.Failure() || run.Outcome == archive.Cancelled:
		recorded = "failed: " + run.Error
	}
	fmt.Fprintln(w, "result:")
	fmt.Fprintln(w, now)
	if now == recorded {
		fmt.Fprintf(w, "the same as run %s recorded (%s)\n", run.ID, run.Outcome)
		return nil
	}
	fmt.Fprintf(w, "differs from run %s (%s): - recorded, + now\n", run.ID, run.Outcome)
	for _, l := range lineDiff(strings.Split(recorded, "\n"), strings.Split(now, "\n")) {
		fmt.Fprintln(w, l)
	}
	return errResultDiffers
}

// indentJSON is data indented, its object keys sorted; data as it is when
// it is not JSON.
func indentJSON(data []byte) string {
	var v any
	if json.Unmarshal(data, &v) != nil {
		return string(data)
	}
	out, _ := json.MarshalIndent(v, "", "  ")
	return string(out)
}

// lineDiff is a diff of two texts' lines: "  " lines in both, "- " lines
// only in a, "+ " only in b (a longest common subsequence; results are
// small).
func lineDiff(a, b []string) []string {
	lcs := make([][]int, len(a)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var out []string
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case i < len(a) && j < len(b) && a[i] == b[j]:
			out = append(out, "  "+a[i])
			i, j = i+1, j+1
		case j < len(b) && (i == len(a) || lcs[i][j+1] >= lcs[i+1][j]):
			out = append(out, "+ "+b[j])
			j++
		default:
			out = append(out, "- "+a[i])
			i++
		}
	}
	return out
}
