package engine_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
	"github.com/opkit-dev/opkit/internal/engine"
	"github.com/opkit-dev/opkit/internal/finalizer"
)

// The test binary is its own handler (built again without the race
// detector: clustertest.HandlerBinary): with OPKIT_TEST_HANDLER=1 in its
// environment (set by the definition), TestMain runs testHandler instead of
// the tests. It appends a record of each run to $OUT and behaves as the
// object's spec.mode says.
const handlerEnv = "OPKIT_TEST_HANDLER"

// record is one line the test handler appends to $OUT.
type record struct {
	Name    string   `json:"name"`
	Handler string   `json:"handler"`
	Trigger string   `json:"trigger"`
	Key     string   `json:"key"`
	Attempt int      `json:"attempt"`
	Diff    []string `json:"diff"`
	OldText string   `json:"oldText"`
	NewText string   `json:"newText"`
	At      string   `json:"at"`
	// Pid is the handler's process.
	Pid int `json:"pid"`
}

// testHandler handles one binding context on stdin, or, with
// OPKIT_MODE=Serve (exec.mode Serve), one per line until the end of its
// input: it exits, as a process per run would, where a run's process
// would exit with a failure.
func testHandler() int {
	dec := json.NewDecoder(os.Stdin)
	if os.Getenv("OPKIT_MODE") != string(v1alpha1.ExecServe) {
		return testHandlerRun(dec)
	}
	for dec.More() {
		if code := testHandlerRun(dec); code != 0 {
			return code
		}
	}
	return 0
}

// testHandlerRun handles the next binding context of dec.
func testHandlerRun(dec *json.Decoder) int {
	var ctx struct {
		Handler        string `json:"handler"`
		Trigger        string `json:"trigger"`
		IdempotencyKey string `json:"idempotencyKey"`
		Attempt        int    `json:"attempt"`
		Object         struct {
			Metadata struct{ Name string } `json:"metadata"`
			Spec     struct{ Mode, Text string }
		} `json:"object"`
		Old  struct{ Text string } `json:"old"`
		Diff []archive.Change      `json:"diff"`
	}
	if err := dec.Decode(&ctx); err != nil {
		fmt.Fprintln(os.Stderr, "bad binding context:", err)
		return 2
	}
	rec := record{Name: ctx.Object.Metadata.Name, Handler: ctx.Handler, Trigger: ctx.Trigger, Key: ctx.IdempotencyKey,
		Attempt: ctx.Attempt, OldText: ctx.Old.Text, NewText: ctx.Object.Spec.Text, At: time.Now().Format(time.RFC3339Nano), Pid: os.Getpid()}
	for _, c := range ctx.Diff {
		rec.Diff = append(rec.Diff, c.Op+" "+c.Path)
	}
	line, _ := json.Marshal(rec)
	seen, _ := os.ReadFile(os.Getenv("OUT"))
	f, err := os.OpenFile(os.Getenv("OUT"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if _, err := f.Write(append(line, '\n')); err != nil {
		return 2
	}
	_ = f.Close()
	fmt.Fprintf(os.Stderr, "%s %s for %s\n", ctx.Handler, ctx.Trigger, rec.Name)
	if d, err := time.ParseDuration(os.Getenv("SLEEP")); err == nil {
		time.Sleep(d)
	}
	if f := os.Getenv("FAIL_UNTIL"); f != "" {
		if _, err := os.Stat(f); err != nil {
			fmt.Fprintln(os.Stderr, "boom: failing until", f, "exists")
			return 1
		}
	}
	mode := ctx.Object.Spec.Mode
	if ctx.Handler != "work" {
		mode = ""
	}
	switch mode {
	case "flaky":
		if ctx.Attempt < 3 {
			fmt.Fprintln(os.Stderr, "not yet")
			return 75
		}
	case "broken":
		fmt.Fprintln(os.Stderr, "boom: broken on purpose")
		return 1
	case "poll":
		// Polls something outside the cluster: asks to run again twice.
		if strings.Count(string(seen), `"name":"`+rec.Name+`"`) < 2 {
			fmt.Println(`{"requeueAfter": "1s"}`)
			return 0
		}
	case "skipper":
		// A check that is not due three times, then does its work.
		if strings.Count(string(seen), `"name":"`+rec.Name+`"`) < 3 {
			fmt.Println(`{"skipped": true, "requeueAfter": "1s"}`)
			return 0
		}
	case "fixable":
		// Broken until the test writes $OUT.fixed: a cause fixed outside
		// the object.
		if _, err := os.Stat(os.Getenv("OUT") + ".fixed"); err != nil {
			fmt.Fprintln(os.Stderr, "boom: not fixed yet")
			return 1
		}
	case "secret":
		// Uses a token from a Secret, and lets it slip into its log, its
		// status, an Event and, the first time it runs, its failure.
		token := os.Getenv("API_TOKEN")
		fmt.Fprintf(os.Stderr, "calling the API with token %s\n", token)
		if _, err := os.Stat(os.Getenv("OUT") + ".refused"); err != nil {
			_ = os.WriteFile(os.Getenv("OUT")+".refused", nil, 0o644)
			fmt.Printf(`{"error": {"message": "the API refused token %s"}}`+"\n", token)
			return 1
		}
		fmt.Printf(`{"status": {"recorded": "token %s"}, "events": [{"reason": "Called", "message": "with token %s"}]}`+"\n", token, token)
		return 0
	case "kube":
		// Reads the cluster with the credentials it was given.
		path := os.Getenv("KUBECONFIG")
		cfg, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			fmt.Fprintln(os.Stderr, "no kubeconfig:", err)
			return 1
		}
		fmt.Fprintf(os.Stderr, "my token is %s\n", cfg.BearerToken)
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		ns := os.Getenv("TASK_NAMESPACE")
		cm, err := cs.CoreV1().ConfigMaps(ns).Get(context.Background(), "task-config", metav1.GetOptions{})
		if err != nil {
			fmt.Fprintln(os.Stderr, "reading the ConfigMap:", err)
			return 1
		}
		_, err = cs.CoreV1().Secrets(ns).List(context.Background(), metav1.ListOptions{})
		// A handler with a standard library alone reads it as JSON.
		var asJSON struct {
			Users []struct {
				User struct{ Token string } `json:"user"`
			} `json:"users"`
		}
		raw, _ := os.ReadFile(path)
		jsonOK := json.Unmarshal(raw, &asJSON) == nil && len(asJSON.Users) == 1 && asJSON.Users[0].User.Token == cfg.BearerToken
		fmt.Printf(`{"status": {"recorded": %q, "secrets": %q, "kubeconfig": %q, "json": %q}}`+"\n", cm.Data["color"], fmt.Sprint(apierrors.IsForbidden(err)), path, fmt.Sprint(jsonOK))
		return 0
	case "chatty":
		// Writes 1.25 MiB of log (a quarter more than the archive's 1 MiB
		// cap), the cause of its failure last, in 256 KiB writes: a line
		// a write took longer than a 6 s timeout on a loaded machine,
		// and so did 3 MiB in 64 KiB writes with make test's packages
		// beside it.
		w := bufio.NewWriterSize(os.Stderr, 256<<10)
		fmt.Fprintln(w, "starting")
		line := strings.Repeat("all is well ", 8) + "\n"
		for range 5 << 18 / len(line) {
			fmt.Fprint(w, line)
		}
		fmt.Fprintln(w, "boom: the real cause")
		_ = w.Flush()
		return 1
	case "notjson":
		fmt.Println("hello, not JSON")
		return 0
	case "huge":
		chunk := make([]byte, 1<<20)
		for range 50 {
			if _, err := os.Stdout.Write(chunk); err != nil {
				return 0
			}
		}
		return 0
	case "signal":
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	case "hang":
		time.Sleep(time.Minute)
	case "reserved":
		fmt.Println(`{"status": {"observedGeneration": 99}}`)
		return 0
	case "badstatus":
		// status.summary is the operator's status field (spec.status).
		fmt.Println(`{"status": {"summary": 5}}`)
		return 0
	case "badrecorded":
		// status.recorded is a string in the version's statusSchema.
		fmt.Println(`{"status": {"recorded": 5}}`)
		return 0
	case "slow":
		time.Sleep(2 * time.Second) // the handler's timeout is at least 6s
		// And on while the test holds it (OUT.hold exists), so that what
		// the test does meanwhile happens during the run however slow the
		// machine is.
		for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if _, err := os.Stat(os.Getenv("OUT") + ".hold"); err != nil {
				break
			}
		}
	case "sleepfirst":
		// The first run sleeps, to be interrupted; a run with a key seen
		// before ends at once.
		if !strings.Contains(string(seen), `"key":"`+ctx.IdempotencyKey+`"`) {
			time.Sleep(time.Minute)
		}
	}
	if os.Getenv("EVENTS_ONLY") == "1" {
		// For objects opkit does not own: no status.
		fmt.Printf(`{"events": [{"reason": "Recorded", "message": "recorded %s"}]}`+"\n", ctx.Trigger)
		return 0
	}
	fmt.Printf(`{"status": {"recorded": %q}, "events": [{"reason": "Recorded", "message": "recorded %s"}]}`+"\n", ctx.Object.Spec.Text, ctx.Trigger)
	return 0
}

// taskTimeout is the Task operator's handlers' timeout: 6s on a quiet
// machine, which a hanging handler's test waits three times for, and
// longer by the tests' wait factor (clustertest.Scaled) on a loaded one,
// where a handler process of the race-built test binary, started with
// others beside it, took more than 6s to print its result (handlers are a
// build without the race detector since: clustertest.HandlerBinary).
func taskTimeout() time.Duration { return clustertest.Scaled(6 * time.Second).Round(time.Second) }

// tasksOperator writes the Task operator, whose handlers run this test
// binary, and returns its path and the record file.
func tasksOperator(t *testing.T) (file, out string) {
	t.Helper()
	return tasksOperatorWork(t, "", "")
}

// tasksOperatorWork is tasksOperator with more for the work handler's
// exec: environment variables, as YAML flow-sequence entries ("{name: A,
// value: b}"), and fields ("serviceAccount: {name: reader}").
func tasksOperatorWork(t *testing.T, workEnv, workExec string) (file, out string) {
	t.Helper()
	dir := t.TempDir()
	out = filepath.Join(dir, "records.jsonl")
	bin := clustertest.HandlerBinary(t)
	exec := fmt.Sprintf(`exec:
      command: [%q]
      env: [{name: %s, value: "1"}, {name: OUT, value: %q}]`, bin, handlerEnv, out)
	work := exec
	if workEnv != "" {
		work = strings.Replace(work, "}]", "}, "+workEnv+"]", 1)
	}
	if workExec != "" {
		work += "\n      " + workExec
	}
	def := `apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: tasks}
spec:
  resource:
    group: handlers.example.com
    kind: Task
    versions:
    - name: v1
      schema:
        type: object
        properties:
          mode: {type: string}
          text: {type: string}
          color: {type: string}
      statusSchema:
        properties:
          recorded: {type: string}
  status:
    summary: "${self.spec.text}"
  handlers:
  - name: work
    on: [create, update]
    fields: [spec.text, spec.mode]
    timeout: ` + taskTimeout().String() + `
    retry: {maxAttempts: 3, initialDelay: 400ms, maxDelay: 10s, factor: 2, jitter: 0}
    ` + work + `
  - name: goodbye
    on: [delete]
    ` + exec + "\n"
	file = filepath.Join(dir, "tasks.yaml")
	if err := os.WriteFile(file, []byte(def), 0o644); err != nil {
		t.Fatal(err)
	}
	return file, out
}

func task(ns, name, mode, text string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "handlers.example.com/v1", "kind": "Task",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec":     map[string]any{"mode": mode, "text": text},
	}}
}

// records reads the record file, keeping those of one object.
func records(t *testing.T, out, name string) []record {
	t.Helper()
	var recs []record
	for _, r := range readLines[record](t, out) {
		if r.Name == name {
			recs = append(recs, r)
		}
	}
	return recs
}

// readLines reads a file of JSON lines that recording handlers append to,
// in the order they were written; none when it does not exist yet.
func readLines[T any](t *testing.T, file string) []T {
	t.Helper()
	f, err := os.Open(file)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []T
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatalf("%s: line %q: %v", file, sc.Text(), err)
		}
		out = append(out, v)
	}
	return out
}

// runTasks runs the Task operator with an archive in a new namespace, and
// returns the namespace, the record file and the archive.
func runTasks(t *testing.T) (*clustertest.Env, string, *archive.SQLite) {
	t.Helper()
	return runTasksWith(t, engine.Options{})
}

// runTasksWith is runTasks with options (Config, Namespace and Archive
// are the test's).
func runTasksWith(t *testing.T, opts engine.Options) (*clustertest.Env, string, *archive.SQLite) {
	t.Helper()
	env := clustertest.New(t)
	file, out := tasksOperator(t)
	store := newArchive(t)
	opts.Config, opts.Namespace, opts.Archive = env.Config, env.Namespace, store
	runEngineWith(t, opts, file)
	cleanUpTasks(t, env)
	return env, out, store
}

// cleanUpTasks deletes the namespace's Tasks while the engine still runs, so
// that no finalizer outlives the test.
func cleanUpTasks(t *testing.T, env *clustertest.Env) {
	cleanUpAll(t, env, "handlers.example.com/v1", "Task")
}

// cleanUpAll deletes, at the end of the test and before the engines
// started earlier stop, every object of a kind in the test's namespace.
func cleanUpAll(t *testing.T, env *clustertest.Env, apiVersion, kind string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), clustertest.Scaled(60*time.Second))
		defer cancel()
		list := &unstructured.UnstructuredList{}
		list.SetAPIVersion(apiVersion)
		list.SetKind(kind + "List")
		_ = env.Client.DeleteAllOf(ctx, &unstructured.Unstructured{Object: map[string]any{"apiVersion": apiVersion, "kind": kind}}, client.InNamespace(env.Namespace))
		for ctx.Err() == nil {
			if err := env.Client.List(ctx, list, client.InNamespace(env.Namespace)); err != nil || len(list.Items) == 0 {
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
		t.Errorf("%s objects left in %s after 60s", kind, env.Namespace)
	})
}

// waitRecords waits until the object has n records and returns them.
func waitRecords(t *testing.T, out, name string, n int, what string) []record {
	t.Helper()
	var recs []record
	eventually(t, 60*time.Second, what, func(context.Context) (bool, error) {
		recs = records(t, out, name)
		return len(recs) >= n, nil
	})
	return recs
}

func condition(obj *unstructured.Unstructured, typ string) *metav1.Condition {
	raw, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	data, _ := json.Marshal(raw)
	var conds []metav1.Condition
	_ = json.Unmarshal(data, &conds)
	return meta.FindStatusCondition(conds, typ)
}

func TestHandlersFireOnCreateUpdateAndDeleteWithTheirContext(t *testing.T) {
	t.Parallel()
	env, out, store := runTasks(t)

	obj := task(env.Namespace, "one", "", "first")
	create(t, env, obj)
	recs := waitRecords(t, out, "one", 1, "the create run")
	uid := string(obj.GetUID())
	if r := recs[0]; r.Trigger != "create" || r.Key != uid+"/1/work" || r.Attempt != 1 || r.NewText != "first" {
		t.Errorf("create run: %+v", r)
	}
	eventually(t, 30*time.Second, "status.recorded and lastRun", func(ctx context.Context) (bool, error) {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return false, err
		}
		recorded, _, _ := unstructured.NestedString(obj.Object, "status", "recorded")
		outcome, _, _ := unstructured.NestedString(obj.Object, "status", "opkit", "lastRun", "outcome")
		return recorded == "first" && outcome == "Succeeded", nil
	})
	if !slices.Contains(obj.GetFinalizers(), finalizer.Name("tasks")) {
		t.Errorf("finalizers %v lack %s", obj.GetFinalizers(), finalizer.Name("tasks"))
	}

	// A change outside the fields filter runs nothing, but is recorded as
	// handled: the next diff starts from it.
	setSpec(t, env, obj, "color", "red")
	eventually(t, 30*time.Second, "generation 2 handled", func(ctx context.Context) (bool, error) {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return false, err
		}
		g, _, _ := unstructured.NestedInt64(obj.Object, "status", "opkit", "handled", "generation")
		return g == 2, nil
	})
	setSpec(t, env, obj, "text", "second")
	recs = waitRecords(t, out, "one", 2, "the update run")
	if r := recs[1]; r.Trigger != "update" || r.Key != uid+"/3/work" || r.OldText != "first" || r.NewText != "second" ||
		!slices.Equal(r.Diff, []string{"change spec.text"}) {
		t.Errorf("update run: %+v; want update of generation 3 with diff [change spec.text] from first", r)
	}

	if err := env.Client.Delete(t.Context(), obj); err != nil {
		t.Fatal(err)
	}
	waitGone(t, env, obj, 30*time.Second, "the Task is gone")
	recs = records(t, out, "one")
	if len(recs) != 3 || recs[2].Handler != "goodbye" || recs[2].Trigger != "delete" {
		t.Fatalf("records %+v; want create, update, then one delete", recs)
	}

	page, err := store.List(t.Context(), archive.Query{Namespace: env.Namespace, Name: "one"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range page.Runs {
		got = append(got, r.Handler+"/"+r.Trigger+"/"+string(r.Outcome))
	}
	if want := []string{"goodbye/delete/Succeeded", "work/update/Succeeded", "work/create/Succeeded"}; !slices.Equal(got, want) {
		t.Errorf("archive: %v, want %v", got, want)
	}
	if w := page.Runs[1].Writes; !slices.Contains(w, "status: recorded") || !slices.Contains(w, "event Normal Recorded") {
		t.Errorf("the update run's writes %v", w)
	}
	logs, err := logData(store.Logs(t.Context(), page.Runs[1].ID, 0))
	if err != nil || string(logs) != "work update for one\n" {
		t.Errorf("the update run's log %q, %v", logs, err)
	}
}

func TestUpdatesDuringARunCoalesceIntoOneUpdate(t *testing.T) {
	t.Parallel()
	env, out, store := runTasks(t)
	defer func() {
		if t.Failed() {
			page, _ := store.List(context.Background(), archive.Query{Name: "busy"})
			for _, r := range page.Runs {
				t.Logf("run %s %s gen %d attempt %d: %s %s", r.ID, r.Trigger, r.Generation, r.Attempt, r.Outcome, r.Error)
			}
		}
	}()

	obj := task(env.Namespace, "busy", "slow", "v1")
	// The create run takes 2s, and goes on until the hold is removed:
	// three changes come while it runs.
	hold := out + ".hold"
	if err := os.WriteFile(hold, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	create(t, env, obj)
	waitRecords(t, out, "busy", 1, "the create run starts")
	for _, text := range []string{"v2", "v3", "v4"} {
		setSpec(t, env, obj, "text", text)
	}
	if err := os.Remove(hold); err != nil {
		t.Fatal(err)
	}
	waitRecords(t, out, "busy", 2, "the update run")
	time.Sleep(4 * time.Second) // a third run would have started by now
	recs := records(t, out, "busy")
	if len(recs) != 2 {
		t.Fatalf("%d runs, want create then one update: %+v", len(recs), recs)
	}
	if r := recs[1]; r.Trigger != "update" || r.OldText != "v1" || r.NewText != "v4" || !slices.Equal(r.Diff, []string{"change spec.text"}) || !strings.HasSuffix(r.Key, "/4/work") {
		t.Errorf("update run %+v; want one update of generation 4 from v1 to v4", r)
	}
}

func TestFailingHandlersRetryWithGrowingDelaysThenStall(t *testing.T) {
	t.Parallel()
	env, out, store := runTasks(t)

	create(t, env, task(env.Namespace, "flaky", "flaky", "x"))
	broken := task(env.Namespace, "broken", "broken", "x")
	create(t, env, broken)

	recs := waitRecords(t, out, "flaky", 3, "three attempts of the flaky handler")
	var at []time.Time
	for i, r := range recs {
		if r.Attempt != i+1 || r.Key != recs[0].Key {
			t.Errorf("run %d: attempt %d key %s; want attempt %d with one key", i, r.Attempt, r.Key, i+1)
		}
		ts, _ := time.Parse(time.RFC3339Nano, r.At)
		at = append(at, ts)
	}
	// 400ms, then 800ms: no retry comes before its delay. (How much later
	// it comes depends on the machine's load; the delays decided are
	// compared below.)
	if first, second := at[1].Sub(at[0]), at[2].Sub(at[1]); first < 400*time.Millisecond || second < 800*time.Millisecond {
		t.Errorf("delays %s then %s; want at least 400ms then 800ms", first, second)
	}
	eventually(t, 30*time.Second, "the flaky run succeeds", func(ctx context.Context) (bool, error) {
		page, err := store.List(ctx, archive.Query{Name: "flaky", Outcome: archive.Succeeded})
		return err == nil && len(page.Runs) == 1, err
	})
	page, _ := store.List(t.Context(), archive.Query{Name: "flaky", Failed: true})
	decided := map[int]time.Duration{} // by attempt: the delay the engine decided
	for _, r := range page.Runs {
		if r.Outcome != archive.Failed || r.Error != "exit status 75: temporary failure" || r.NextRetryAt.IsZero() {
			t.Errorf("failed run %+v", r)
		}
		decided[r.Attempt] = r.NextRetryAt.Sub(r.FinishedAt)
	}
	// The second wait decided is the longer: 800ms after 400ms (factor 2,
	// no jitter), each counted from the failure's end.
	if d1, d2 := decided[1], decided[2]; d1 <= 0 || d2 <= d1 || d2 > 800*time.Millisecond {
		t.Errorf("retry delays decided %s then %s; want 400ms then 800ms", d1, d2)
	}

	// The broken one gives up after maxAttempts and says so.
	eventually(t, 60*time.Second, "the broken Task is Stalled", func(ctx context.Context) (bool, error) {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(broken), broken); err != nil {
			return false, err
		}
		c := condition(broken, v1alpha1.ConditionStalled)
		return c != nil && c.Status == metav1.ConditionTrue, nil
	})
	stalled := condition(broken, v1alpha1.ConditionStalled)
	if !strings.Contains(stalled.Message, "handler work gave up after 3 attempts: exit status 1") {
		t.Errorf("Stalled message %q", stalled.Message)
	}
	if ready := condition(broken, v1alpha1.ConditionReady); ready.Status != metav1.ConditionFalse || ready.Reason != "Stalled" {
		t.Errorf("Ready %+v; want False, Stalled", ready)
	}
	page, _ = store.List(t.Context(), archive.Query{Name: "broken"})
	if len(page.Runs) != 3 || page.Runs[0].Outcome != archive.GaveUp {
		t.Fatalf("broken runs: %+v; want 3, the last GaveUp", page.Runs)
	}
	logs, _ := logData(store.Logs(t.Context(), page.Runs[0].ID, 0))
	if !strings.Contains(string(logs), "boom: broken on purpose") {
		t.Errorf("the log of the last run %q lacks the handler's stderr", logs)
	}
	// Nothing more runs on its own.
	time.Sleep(2 * time.Second)
	if n := len(records(t, out, "broken")); n != 3 {
		t.Errorf("%d runs of a stalled handler, want 3", n)
	}

	// opkit retry's annotation runs it again, from attempt 1.
	patch := []byte(`{"metadata":{"annotations":{"` + v1alpha1.RetryAnnotation + `":"now"}}}`)
	if err := env.Client.Patch(t.Context(), broken, client.RawPatch("application/merge-patch+json", patch)); err != nil {
		t.Fatal(err)
	}
	recs = waitRecords(t, out, "broken", 4, "a run after the retry request")
	if recs[3].Attempt != 1 {
		t.Errorf("the retried run is attempt %d, want 1", recs[3].Attempt)
	}
	eventually(t, 30*time.Second, "the retry annotation is consumed", func(ctx context.Context) (bool, error) {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(broken), broken); err != nil {
			return false, err
		}
		_, has := broken.GetAnnotations()[v1alpha1.RetryAnnotation]
		return !has, nil
	})
}

func TestASuccessAfterRetryClearsTheFailureItSupersedes(t *testing.T) {
	t.Parallel()
	env, out, store := runTasks(t)
	obj := task(env.Namespace, "fixable", "fixable", "x")
	create(t, env, obj)
	eventually(t, 60*time.Second, "the fixable Task is Stalled", func(ctx context.Context) (bool, error) {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return false, err
		}
		c := condition(obj, v1alpha1.ConditionStalled)
		return c != nil && c.Status == metav1.ConditionTrue, nil
	})
	work, _, _ := unstructured.NestedMap(obj.Object, "status", "opkit", "handlers", "work")
	if work["stalled"] != true || work["lastError"] == nil {
		t.Fatalf("a stalled handler's status %v; want stalled and its lastError", work)
	}

	// The cause is fixed outside the object; opkit retry runs it again.
	if err := os.WriteFile(out+".fixed", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	patch := []byte(`{"metadata":{"annotations":{"` + v1alpha1.RetryAnnotation + `":"now"}}}`)
	if err := env.Client.Patch(t.Context(), obj, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "the retried run succeeds and is recorded in the status", func(ctx context.Context) (bool, error) {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return false, err
		}
		outcome, _, _ := unstructured.NestedString(obj.Object, "status", "opkit", "lastRun", "outcome")
		return outcome == string(archive.Succeeded), nil
	})
	// What the success superseded is gone: the handler's failure state and
	// the last run's error and retry time.
	work, _, _ = unstructured.NestedMap(obj.Object, "status", "opkit", "handlers", "work")
	for _, k := range []string{"stalled", "attempt", "target", "lastError", "nextRetryAt"} {
		if v, ok := work[k]; ok {
			t.Errorf("status.opkit.handlers.work.%s = %v after a success; want it cleared", k, v)
		}
	}
	if work["generation"] != obj.GetGeneration() {
		t.Errorf("status.opkit.handlers.work.generation = %v, want %d", work["generation"], obj.GetGeneration())
	}
	last, _, _ := unstructured.NestedMap(obj.Object, "status", "opkit", "lastRun")
	for _, k := range []string{"message", "nextRetryAt"} {
		if v, ok := last[k]; ok {
			t.Errorf("status.opkit.lastRun.%s = %v beside outcome Succeeded; want it cleared", k, v)
		}
	}
	if c := condition(obj, v1alpha1.ConditionStalled); c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("Stalled %+v after a success; want False", c)
	}
	page, err := store.List(t.Context(), archive.Query{Name: "fixable", Handler: "work", Outcome: archive.Succeeded})
	if err != nil || len(page.Runs) != 1 || page.Runs[0].Attempt != 1 {
		t.Errorf("succeeded runs %+v (%v); want one, attempt 1", page.Runs, err)
	}
}

func TestRequeueAfterRunsTheHandlerAgain(t *testing.T) {
	t.Parallel()
	env, out, store := runTasks(t)
	obj := task(env.Namespace, "poller", "poll", "x")
	create(t, env, obj)
	recs := waitRecords(t, out, "poller", 3, "the create run and the two runs it asked for")
	want := []string{"create", "requeue", "requeue"}
	keys := map[string]bool{}
	for i, r := range recs[:3] {
		if r.Trigger != want[i] || r.Attempt != 1 {
			t.Errorf("run %d: trigger %s attempt %d; want %s, attempt 1", i, r.Trigger, r.Attempt, want[i])
		}
		keys[r.Key] = true
	}
	if len(keys) != 3 {
		t.Errorf("keys %v; want each run its own", keys)
	}
	if at := [2]time.Time{mustTime(t, recs[0].At), mustTime(t, recs[1].At)}; at[1].Sub(at[0]) < time.Second {
		t.Errorf("the requeued run came %s after the first; want at least the 1s asked for", at[1].Sub(at[0]))
	}
	// The third run asked for nothing: no more runs, and nothing pending.
	eventually(t, 30*time.Second, "the last run is recorded in the status", func(ctx context.Context) (bool, error) {
		page, err := store.List(ctx, archive.Query{Name: "poller", Outcome: archive.Succeeded})
		if err != nil || len(page.Runs) < 3 {
			return false, err
		}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return false, err
		}
		id, _, _ := unstructured.NestedString(obj.Object, "status", "opkit", "lastRun", "id")
		return id == page.Runs[0].ID, nil
	})
	if at, ok, _ := unstructured.NestedString(obj.Object, "status", "opkit", "handlers", "work", "requeueAt"); ok {
		t.Errorf("requeueAt %s after a run that asked for no requeue", at)
	}
	time.Sleep(3 * time.Second)
	if n := len(records(t, out, "poller")); n != 3 {
		t.Errorf("%d runs; want 3: the last run asked for no requeue", n)
	}
}

func TestSkippedRunsLeaveOneRecordAndNoEvents(t *testing.T) {
	t.Parallel()
	env, out, store := runTasksWith(t, engine.Options{RunEvents: true})
	obj := task(env.Namespace, "skipper", "skipper", "x")
	create(t, env, obj)
	waitRecords(t, out, "skipper", 4, "three skipped runs, then one that works")
	var page *archive.Page
	eventually(t, 30*time.Second, "the working run is recorded", func(ctx context.Context) (bool, error) {
		var err error
		page, err = store.List(ctx, archive.Query{Name: "skipper"})
		return err == nil && len(page.Runs) > 0 && page.Runs[0].Outcome == archive.Succeeded, err
	})
	var outcomes []archive.Outcome
	for _, r := range page.Runs {
		outcomes = append(outcomes, r.Outcome)
	}
	if !slices.Equal(outcomes, []archive.Outcome{archive.Succeeded, archive.Skipped}) {
		t.Errorf("runs %v; want the success and the last skipped run only", outcomes)
	}
	// Events: the create run's start, and the success; none for the skipped
	// runs, and no start for the periodic ones. An Event is posted after
	// the archive records the run: wait for the success's, then count.
	reasons := map[string]int{}
	eventually(t, 30*time.Second, "the HandlerSucceeded Event", func(ctx context.Context) (bool, error) {
		var events corev1.EventList
		if err := env.Client.List(ctx, &events, client.InNamespace(env.Namespace)); err != nil {
			return false, err
		}
		reasons = map[string]int{}
		for _, e := range events.Items {
			if e.InvolvedObject.Name == "skipper" {
				reasons[e.Reason] += max(int(e.Count), 1)
			}
		}
		return reasons["HandlerSucceeded"] > 0, nil
	})
	if reasons["HandlerStarted"] != 1 || reasons["HandlerSucceeded"] != 1 {
		t.Errorf("handler Events %v; want one HandlerStarted (the create run) and one HandlerSucceeded", reasons)
	}
}

// TestARunsEventsAreItsFailuresUnlessAskedFor: by default a run that
// succeeds posts no Event (its record is in the archive and in
// status.opkit.lastRun), and one that fails posts HandlerFailed, which
// kubectl describe shows; the handler's own Events are posted either way.
func TestARunsEventsAreItsFailuresUnlessAskedFor(t *testing.T) {
	t.Parallel()
	env, out, _ := runTasks(t)
	create(t, env, task(env.Namespace, "fine", "", "x"))
	create(t, env, task(env.Namespace, "flaky", "flaky", "x"))
	waitRecords(t, out, "fine", 1, "the fine Task's run")
	waitRecords(t, out, "flaky", 2, "the flaky Task's failed run and its retry")
	reasons := func(name string) map[string]int {
		var events corev1.EventList
		if err := env.Client.List(t.Context(), &events, client.InNamespace(env.Namespace)); err != nil {
			t.Fatal(err)
		}
		got := map[string]int{}
		for _, e := range events.Items {
			if e.InvolvedObject.Name == name {
				got[e.Reason] += max(int(e.Count), 1)
			}
		}
		return got
	}
	eventually(t, 30*time.Second, "the flaky Task's HandlerFailed Event", func(context.Context) (bool, error) {
		return reasons("flaky")["HandlerFailed"] >= 1, nil
	})
	fine := &unstructured.Unstructured{}
	fine.SetAPIVersion("handlers.example.com/v1")
	fine.SetKind("Task")
	eventually(t, 30*time.Second, "the fine Task's lastRun Succeeded", func(ctx context.Context) (bool, error) {
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: env.Namespace, Name: "fine"}, fine); err != nil {
			return false, err
		}
		outcome, _, _ := unstructured.NestedString(fine.Object, "status", "opkit", "lastRun", "outcome")
		return outcome == "Succeeded", nil
	})
	for _, name := range []string{"fine", "flaky"} {
		if got := reasons(name); got["HandlerStarted"]+got["HandlerSucceeded"] != 0 {
			t.Errorf("%s: Events %v; want no HandlerStarted or HandlerSucceeded without RunEvents", name, got)
		}
	}
}

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	ts, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

func TestBrokenHandlerOutputFailsOnlyItsRun(t *testing.T) {
	t.Parallel()
	env, out, store := runTasks(t)

	want := map[string]string{
		"notjson":     "output is not a JSON result",
		"huge":        "stdout exceeded the 1048576-byte limit",
		"signal":      "killed by signal killed",
		"hang":        fmt.Sprintf("timed out after %v; its process group was killed", taskTimeout()),
		"reserved":    "status.observedGeneration is written by opkit and cannot be set by a handler",
		"badstatus":   "status.summary is operator tasks's status field (spec.status), which opkit writes from its expression at each reconcile: a handler cannot set it",
		"chatty":      "exit status 1: boom: the real cause",
		"badrecorded": `the API refused the result's status patch: Task.handlers.example.com "badrecorded" is invalid: status.recorded: Invalid value: "integer": recorded in body must be of type string`,
	}
	for mode := range want {
		create(t, env, task(env.Namespace, mode, mode, "x"))
	}
	good := task(env.Namespace, "good", "", "fine")
	create(t, env, good)
	for mode, msg := range want {
		eventually(t, 90*time.Second, mode+" gives up", func(ctx context.Context) (bool, error) {
			page, err := store.List(ctx, archive.Query{Name: mode, Outcome: archive.GaveUp})
			if err != nil || len(page.Runs) == 0 {
				return false, err
			}
			if !strings.Contains(page.Runs[0].Error, msg) {
				t.Errorf("%s: error %q, want %q", mode, page.Runs[0].Error, msg)
			}
			return true, nil
		})
	}
	// The good Task was handled, and the engine still handles new work.
	setSpec(t, env, good, "text", "still fine")
	recs := waitRecords(t, out, "good", 2, "the good Task's update")
	if recs[1].Trigger != "update" {
		t.Errorf("good Task records %+v", recs)
	}
	if logs, _ := logData(store.Logs(t.Context(), mustLatestRun(t, store, "huge").ID, 0)); len(logs) > archive.DefaultLogLimit {
		t.Errorf("the huge run's log is %d bytes", len(logs))
	}
	// A long log keeps its start and its end, with the cut marked.
	logs, _ := logData(store.Logs(t.Context(), mustLatestRun(t, store, "chatty").ID, 0))
	if s := string(logs); !strings.HasPrefix(s, "work create for chatty\nstarting\n") || !strings.HasSuffix(s, "boom: the real cause\n") || !strings.Contains(s, " of this log cut here") {
		t.Errorf("the chatty run's log lost its start, its end or the mark of its cut: %d bytes, %q ... %q", len(s), s[:min(len(s), 40)], s[max(len(s)-60, 0):])
	}
}

func mustLatestRun(t *testing.T, store archive.Store, name string) *archive.Run {
	t.Helper()
	page, err := store.List(t.Context(), archive.Query{Name: name, Limit: 1})
	if err != nil || len(page.Runs) == 0 {
		t.Fatalf("no run for %s: %v", name, err)
	}
	return &page.Runs[0]
}

func TestAnotherControllersFinalizerIsNeverTouched(t *testing.T) {
	t.Parallel()
	env := clustertest.New(t)
	file, out := tasksOperator(t)
	runEngineWith(t, engine.Options{Config: env.Config, Namespace: env.Namespace}, file)
	cleanUpTasks(t, env)
	const other = "example.com/other"

	obj := task(env.Namespace, "shared", "slow", "x")
	create(t, env, obj)
	// While the slow create run goes on, another client adds and removes its
	// own finalizer, many times.
	key := client.ObjectKeyFromObject(obj)
	toggle := func(ctx context.Context, add bool) {
		eventually(t, 30*time.Second, "toggle the other finalizer", func(ctx context.Context) (bool, error) {
			if err := env.Client.Get(ctx, key, obj); err != nil {
				return false, err
			}
			fins := slices.DeleteFunc(obj.GetFinalizers(), func(f string) bool { return f == other })
			if add {
				fins = append(fins, other)
			}
			obj.SetFinalizers(fins)
			err := env.Client.Update(ctx, obj)
			if apierrors.IsConflict(err) {
				return false, nil
			}
			return err == nil, err
		})
	}
	for i := range 10 {
		toggle(t.Context(), i%2 == 0)
	}
	toggle(t.Context(), true)
	waitRecords(t, out, "shared", 1, "the create run")
	eventually(t, 30*time.Second, "both finalizers", func(ctx context.Context) (bool, error) {
		if err := env.Client.Get(ctx, key, obj); err != nil {
			return false, err
		}
		return slices.Contains(obj.GetFinalizers(), finalizer.Name("tasks")), nil
	})
	if fins := obj.GetFinalizers(); !slices.Contains(fins, other) || len(fins) != 2 {
		t.Fatalf("finalizers %v; want ours and %s", fins, other)
	}
	// Deleted: ours goes after the delete handler; the other stays.
	if err := env.Client.Delete(t.Context(), obj); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "our finalizer removed", func(ctx context.Context) (bool, error) {
		if err := env.Client.Get(ctx, key, obj); err != nil {
			return false, err
		}
		return slices.Equal(obj.GetFinalizers(), []string{other}), nil
	})
	// The create run, then the delete run. (A loaded machine may time the
	// slow create run out: its attempts keep its key.)
	recs := records(t, out, "shared")
	if len(recs) < 2 || recs[len(recs)-1].Trigger != "delete" {
		t.Fatalf("records %+v; want create then delete", recs)
	}
	for _, r := range recs[:len(recs)-1] {
		if r.Trigger != "create" || r.Key != recs[0].Key {
			t.Errorf("records %+v; want the create run's attempts, one key, then delete", recs)
		}
	}
	obj.SetFinalizers(nil)
	if err := env.Client.Update(t.Context(), obj); err != nil {
		t.Fatal(err)
	}
}

func TestChangesWhileTheEngineWasStoppedAreAllHandled(t *testing.T) {
	t.Parallel()
	env := clustertest.New(t)
	file, out := tasksOperator(t)
	store := newArchive(t)
	_, stop := runEngineWith(t, engine.Options{Config: env.Config, Namespace: env.Namespace, Archive: store}, file)

	names := []string{"kept", "changed", "deleted"}
	objs := map[string]*unstructured.Unstructured{}
	for _, n := range names {
		objs[n] = task(env.Namespace, n, "", "v1")
		create(t, env, objs[n])
	}
	for _, n := range names {
		waitRecords(t, out, n, 1, n+" created")
	}
	eventually(t, 30*time.Second, "finalizers on all", func(ctx context.Context) (bool, error) {
		for _, n := range names {
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(objs[n]), objs[n]); err != nil {
				return false, err
			}
			if len(objs[n].GetFinalizers()) == 0 {
				return false, nil
			}
			if g, _, _ := unstructured.NestedInt64(objs[n].Object, "status", "opkit", "handlers", "work", "generation"); g != 1 {
				return false, nil
			}
		}
		return true, nil
	})
	stop()

	for i := 2; i <= 4; i++ {
		setSpec(t, env, objs["changed"], "text", fmt.Sprintf("v%d", i))
	}
	if err := env.Client.Delete(t.Context(), objs["deleted"]); err != nil {
		t.Fatal(err)
	}
	create(t, env, task(env.Namespace, "born", "", "new"))

	runEngineWith(t, engine.Options{Config: env.Config, Namespace: env.Namespace, Archive: store}, file)
	cleanUpTasks(t, env)
	waitRecords(t, out, "born", 1, "the Task created while stopped")
	recs := waitRecords(t, out, "changed", 2, "the Task changed while stopped")
	if r := recs[1]; r.Trigger != "update" || r.OldText != "v1" || r.NewText != "v4" || !strings.HasSuffix(r.Key, "/4/work") {
		t.Errorf("update after restart: %+v; want one update from v1 to v4 for generation 4", r)
	}
	waitGone(t, env, objs["deleted"], 30*time.Second, "the Task deleted while stopped is gone")
	time.Sleep(2 * time.Second) // anything extra would run now
	for name, want := range map[string][]string{
		"kept":    {"work/create"},
		"changed": {"work/create", "work/update"},
		"deleted": {"work/create", "goodbye/delete"},
		"born":    {"work/create"},
	} {
		var got []string
		for _, r := range records(t, out, name) {
			got = append(got, r.Handler+"/"+r.Trigger)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: runs %v, want %v", name, got, want)
		}
	}
}

func TestHandledTasksCauseNoWrites(t *testing.T) {
	t.Parallel()
	const tasks = 30
	env := clustertest.New(t)
	file, out := tasksOperator(t)
	// Thirty handler processes at once on a loaded machine may take longer
	// than the timeout the timeout tests need: a run timed out is retried,
	// a second run this test does not look for.
	widenTimeout(t, file)
	cfg := rest.CopyConfig(env.Config)
	counter := &writeCounter{}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { counter.next = rt; return counter })
	runEngineWith(t, engine.Options{Config: cfg, Namespace: env.Namespace}, file)
	cleanUpTasks(t, env)
	for i := range tasks {
		create(t, env, task(env.Namespace, fmt.Sprintf("t%02d", i), "", "x"))
	}
	eventually(t, 2*time.Minute, "every Task handled", func(ctx context.Context) (bool, error) {
		list := &unstructured.UnstructuredList{}
		list.SetAPIVersion("handlers.example.com/v1")
		list.SetKind("TaskList")
		if err := env.Client.List(ctx, list, client.InNamespace(env.Namespace)); err != nil {
			return false, err
		}
		done := 0
		for _, o := range list.Items {
			g, _, _ := unstructured.NestedInt64(o.Object, "status", "opkit", "handled", "generation")
			outcome, _, _ := unstructured.NestedString(o.Object, "status", "opkit", "lastRun", "outcome")
			if g == 1 && outcome == "Succeeded" && len(o.GetFinalizers()) == 1 {
				done++
			}
		}
		return done == tasks, nil
	})
	time.Sleep(2 * time.Second) // the last status writes and events settle
	before := counter.writes.Load()
	time.Sleep(20 * time.Second)
	if n := counter.writes.Load() - before; n != 0 {
		counter.mu.Lock()
		t.Errorf("%d writes in 20s of steady state; the latest: %v", n, counter.last)
		counter.mu.Unlock()
	}
	for i := range tasks {
		if n := len(records(t, out, fmt.Sprintf("t%02d", i))); n != 1 {
			t.Errorf("t%02d ran %d times, want 1: %+v", i, n, records(t, out, fmt.Sprintf("t%02d", i))) // each record names its key and attempt
		}
	}
}

// widenTimeout gives the tasks operator's handlers in file a timeout of a
// minute, for tests that do not test timeouts.
func widenTimeout(t *testing.T, file string) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	was := []byte("timeout: " + taskTimeout().String())
	if !bytes.Contains(data, was) {
		t.Fatalf("%s has no %s to widen", file, was)
	}
	if err := os.WriteFile(file, bytes.ReplaceAll(data, was, []byte("timeout: 60s")), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestPausedObjectsRunNoHandlerUntilResumed(t *testing.T) {
	t.Parallel()
	env, out, _ := runTasks(t)

	paused := task(env.Namespace, "paused", "", "one")
	paused.SetAnnotations(map[string]string{v1alpha1.PauseAnnotation: "true"})
	create(t, env, paused)
	eventually(t, 30*time.Second, "the paused Task shows Paused=True", func(ctx context.Context) (bool, error) {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(paused), paused); err != nil {
			return false, err
		}
		c := condition(paused, v1alpha1.ConditionPaused)
		return c != nil && c.Status == metav1.ConditionTrue, nil
	})
	// A change while paused runs nothing either.
	patch := []byte(`{"spec":{"text":"two"}}`)
	if err := env.Client.Patch(t.Context(), paused, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	if recs := records(t, out, "paused"); len(recs) != 0 {
		t.Fatalf("%d runs of a paused object: %+v", len(recs), recs)
	}

	// Resuming runs what came due: one create run, with the latest spec.
	patch = []byte(`{"metadata":{"annotations":{"` + v1alpha1.PauseAnnotation + `":null}}}`)
	if err := env.Client.Patch(t.Context(), paused, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
	recs := waitRecords(t, out, "paused", 1, "a run once resumed")
	if recs[0].Trigger != "create" || recs[0].NewText != "two" {
		t.Errorf("the run after resuming: %+v; want create with text two", recs[0])
	}
	eventually(t, 30*time.Second, "the Paused condition is gone", func(ctx context.Context) (bool, error) {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(paused), paused); err != nil {
			return false, err
		}
		return condition(paused, v1alpha1.ConditionPaused) == nil, nil
	})
}

// TestASecretsValueReachesTheHandlerOnly runs a handler with an environment
// variable from a Secret that the handler echoes everywhere it can: the
// value reaches the handler, and nothing opkit writes.
func TestASecretsValueReachesTheHandlerOnly(t *testing.T) {
	t.Parallel()
	const token = "tok-5ecret-9f8e7d"
	env := clustertest.New(t)
	file, _ := tasksOperatorWork(t, "{name: API_TOKEN, valueFrom: {secretKeyRef: {name: task-api, key: token}}}", "")
	// Retried until well after the Secret is created: the Task's three
	// attempts 0.4 s apart could all fail before the test, on a loaded
	// machine, has seen the first and created the Secret (the Task would
	// be Stalled, waiting for a person).
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	const retry = "retry: {maxAttempts: 3, initialDelay: 400ms,"
	if !bytes.Contains(data, []byte(retry)) {
		t.Fatalf("%s has no %q to widen", file, retry)
	}
	if err := os.WriteFile(file, bytes.Replace(data, []byte(retry), []byte("retry: {maxAttempts: 20, initialDelay: 1s,"), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	store := newArchive(t)
	runEngineWith(t, engine.Options{Config: env.Config, Namespace: env.Namespace, Archive: store}, file)
	cleanUpTasks(t, env)

	// Without the Secret, the run fails, naming it, and is retried.
	obj := task(env.Namespace, "caller", "secret", "x")
	create(t, env, obj)
	eventually(t, 30*time.Second, "a failed run naming the missing Secret", func(ctx context.Context) (bool, error) {
		page, err := store.List(ctx, archive.Query{Name: "caller", Failed: true})
		return err == nil && len(page.Runs) > 0 && strings.Contains(page.Runs[0].Error, `reading key "token" of Secret `+env.Namespace+`/task-api`), err
	})
	create(t, env, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "task-api", Namespace: env.Namespace}, StringData: map[string]string{"token": token}})
	eventually(t, 60*time.Second, "a run that succeeds once the Secret exists", func(ctx context.Context) (bool, error) {
		page, err := store.List(ctx, archive.Query{Name: "caller", Outcome: archive.Succeeded})
		return err == nil && len(page.Runs) > 0, err
	})
	eventually(t, 30*time.Second, "the run's status and its Event", func(ctx context.Context) (bool, error) {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return false, err
		}
		var events corev1.EventList
		if err := env.Client.List(ctx, &events, client.InNamespace(env.Namespace)); err != nil {
			return false, err
		}
		recorded, _, _ := unstructured.NestedString(obj.Object, "status", "recorded")
		return recorded != "" && slices.ContainsFunc(events.Items, func(e corev1.Event) bool { return e.Reason == "Called" }), nil
	})

	page, err := store.List(t.Context(), archive.Query{Name: "caller"})
	if err != nil {
		t.Fatal(err)
	}
	var written strings.Builder
	for _, r := range page.Runs {
		run, err := store.Get(t.Context(), r.ID)
		if err != nil {
			t.Fatal(err)
		}
		rec, _ := json.Marshal(run)
		logs, err := logData(store.Logs(t.Context(), r.ID, 0))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&written, "run %s\n%s\n", rec, logs)
	}
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(obj), obj); err != nil {
		t.Fatal(err)
	}
	status, _ := json.Marshal(obj.Object["status"])
	fmt.Fprintf(&written, "status %s\n", status)
	var events corev1.EventList
	if err := env.Client.List(t.Context(), &events, client.InNamespace(env.Namespace)); err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Items {
		fmt.Fprintf(&written, "event %s %s\n", e.Reason, e.Message)
	}
	all := written.String()
	if strings.Contains(all, token) {
		t.Errorf("the Secret's value was written by opkit:\n%s", all)
	}
	for _, want := range []string{"calling the API with token ***", "the API refused token ***", `"recorded":"token ***"`} {
		if !strings.Contains(all, want) {
			t.Errorf("%q not written, its value replaced; opkit wrote:\n%s", want, all)
		}
	}
}

// TestAnExecHandlerReadsTheClusterAsItsServiceAccount gives a handler a
// ServiceAccount that may read ConfigMaps: it reads one, may not list
// Secrets, never sees its token in the archive, and its kubeconfig is
// gone when the run ends.
func TestAnExecHandlerReadsTheClusterAsItsServiceAccount(t *testing.T) {
	t.Parallel()
	env := clustertest.New(t)
	file, _ := tasksOperatorWork(t, fmt.Sprintf("{name: TASK_NAMESPACE, value: %q}", env.Namespace), "serviceAccount: {name: task-reader}")
	store := newArchive(t)
	runEngineWith(t, engine.Options{Config: env.Config, Namespace: env.Namespace, Archive: store}, file)
	cleanUpTasks(t, env)

	create(t, env, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "task-reader", Namespace: env.Namespace}})
	create(t, env, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "task-reader", Namespace: env.Namespace},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}}}})
	create(t, env, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "task-reader", Namespace: env.Namespace},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "task-reader"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "task-reader", Namespace: env.Namespace}}})
	create(t, env, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "task-config", Namespace: env.Namespace}, Data: map[string]string{"color": "teal"}})

	obj := task(env.Namespace, "reader", "kube", "x")
	create(t, env, obj)
	eventually(t, 60*time.Second, "the handler's status", func(ctx context.Context) (bool, error) {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return false, err
		}
		recorded, _, _ := unstructured.NestedString(obj.Object, "status", "recorded")
		return recorded != "", nil
	})
	status := obj.Object["status"].(map[string]any)
	if status["recorded"] != "teal" || status["secrets"] != "true" {
		t.Errorf("the handler read %v and was forbidden Secrets: %v; want teal, true", status["recorded"], status["secrets"])
	}
	if status["json"] != "true" {
		t.Error("the run's kubeconfig is not JSON holding the run's token")
	}
	if path, _ := status["kubeconfig"].(string); path == "" {
		t.Error("no kubeconfig path")
	} else if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("the run's kubeconfig %s outlived it: %v", path, err)
	}
	logs, err := logData(store.Logs(t.Context(), mustLatestRun(t, store, "reader").ID, 0))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(logs), "my token is ***\n") {
		t.Errorf("log %q: want the token replaced by ***", logs)
	}
}

// TestRunsWaitingForASlotAreNotRecordedAsRunning starts more runs than
// there are slots: a run's record starts when it does, not while it waits
// for a slot, so its duration is its own.
func TestRunsWaitingForASlotAreNotRecordedAsRunning(t *testing.T) {
	t.Parallel()
	env := clustertest.New(t)
	file, _ := tasksOperator(t)
	store := newArchive(t)
	runEngineWith(t, engine.Options{Config: env.Config, Namespace: env.Namespace, Archive: store, MaxConcurrentRuns: 2}, file)
	cleanUpTasks(t, env)
	const n = 8
	for i := range n {
		create(t, env, task(env.Namespace, fmt.Sprintf("queued-%d", i), "slow", "x"))
	}
	var runs []archive.Run
	eventually(t, 2*time.Minute, "every run succeeded", func(ctx context.Context) (bool, error) {
		done, err := store.List(ctx, archive.Query{Namespace: env.Namespace, Handler: "work", Outcome: archive.Succeeded})
		if err != nil {
			return false, err
		}
		runs = done.Runs
		return len(runs) == n, nil
	})
	// Each run sleeps 2s and 2 run at once: a run starts when one of the
	// two before it has ended.
	slices.SortFunc(runs, func(a, b archive.Run) int { return a.StartedAt.Compare(b.StartedAt) })
	for i := 2; i < n; i++ {
		if gap := runs[i].StartedAt.Sub(runs[i-2].StartedAt); gap < 1900*time.Millisecond {
			t.Errorf("run %d started %s after run %d: its record began while it waited for a slot", i, gap, i-2)
		}
	}
	for _, r := range runs {
		if d := r.FinishedAt.Sub(r.StartedAt); d < 2*time.Second {
			t.Errorf("run %s lasted %s; its handler sleeps 2s", r.ID, d)
		}
	}
}

// TestObjectsDeletedWhileTheEngineIsCutOffGetTheirDeleteHandlers creates
// Tasks and deletes them while the engine cannot reach the API server:
// with AdmissionFinalizers the API server gave each its finalizer at
// creation, so each one's delete handler runs once the engine is back.
func TestObjectsDeletedWhileTheEngineIsCutOffGetTheirDeleteHandlers(t *testing.T) {
	t.Parallel()
	env := clustertest.New(t)
	proxy := clustertest.NewProxy(t, strings.TrimPrefix(env.Config.Host, "https://"))
	cut := rest.CopyConfig(env.Config)
	cut.Host = "https://" + proxy.Addr()
	file, out := tasksOperator(t)
	runEngineWith(t, engine.Options{Config: cut, Namespace: env.Namespace, Archive: newArchive(t), AdmissionFinalizers: true}, file)
	cleanUpTasks(t, env)
	// The engine is running: it handled a first Task.
	create(t, env, task(env.Namespace, "canary", "", "x"))
	waitRecords(t, out, "canary", 1, "the canary's create run")
	// The API server applies a new admission policy a few seconds after it
	// is created: a Task created in a dry run shows when.
	eventually(t, time.Minute, "the admission policy in effect", func(ctx context.Context) (bool, error) {
		probe := task(env.Namespace, "probe", "", "x")
		if err := env.Client.Create(ctx, probe, client.DryRunAll); err != nil {
			return false, err
		}
		return slices.Contains(probe.GetFinalizers(), finalizer.Name("tasks")), nil
	})

	proxy.Freeze()
	const n = 20
	for i := range n {
		obj := task(env.Namespace, fmt.Sprintf("short-lived-%d", i), "", "x")
		create(t, env, obj)
		if err := env.Client.Delete(t.Context(), obj); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(3 * time.Second)
	proxy.Thaw()

	for i := range n {
		name := fmt.Sprintf("short-lived-%d", i)
		eventually(t, 2*time.Minute, name+"'s delete handler", func(context.Context) (bool, error) {
			for _, r := range records(t, out, name) {
				if r.Handler == "goodbye" && r.Trigger == "delete" {
					return true, nil
				}
			}
			return false, nil
		})
	}
}
