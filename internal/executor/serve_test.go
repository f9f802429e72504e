package executor

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/opkit-dev/opkit/api/v1alpha1"
)

// serveLoop is a Serve handler in bash: for each binding context it runs
// body with the context in $ctx and its runId in $id.
func serveLoop(t *testing.T, body string) string {
	t.Helper()
	return script(t, `while IFS= read -r ctx; do
id=$(sed -E 's/.*"runId":"([^"]*)".*/\1/' <<<"$ctx")
`+body+`
done`)
}

func newServe(argv []string, processes int) *Serve {
	return &Serve{
		Exec: Exec{Action: v1alpha1.ExecAction{Command: argv, Mode: v1alpha1.ExecServe, Processes: int32(processes), Env: []v1alpha1.EnvVar{{Name: "GREETING", Value: "hi"}}}, KillGrace: 200 * time.Millisecond},
	}
}

// serveRun runs one run with id as its runId and returns its result, log
// and error.
func serveRun(s *Serve, id string, timeout time.Duration) (*Result, string, error) {
	var log bytes.Buffer
	input, _ := json.Marshal(map[string]any{"runId": id, "object": map[string]any{"name": "a\nb"}})
	res, err := s.Run(context.Background(), Request{RunID: id, Handler: "h", Trigger: "create", Key: "k/" + id, Input: input, Timeout: timeout, Log: &log})
	return res, log.String(), err
}

// pidOf is the pid a test handler put in its result's status.
func pidOf(res *Result) string {
	if res == nil || res.Status["pid"] == nil {
		return ""
	}
	return fmt.Sprint(res.Status["pid"])
}

func TestServeRunsEachRunInALongLivedProcessWithItsOwnLog(t *testing.T) {
	s := newServe([]string{serveLoop(t, `echo "log of $id: greeting=$GREETING run=${OPKIT_RUN_ID:-none} mode=$OPKIT_MODE" >&2
echo "more of $id" >&2
echo "{\"status\": {\"pid\": $$, \"run\": \"$id\"}}"`)}, 1)
	defer s.Close()
	var pids []string
	for i := range 20 {
		id := fmt.Sprintf("run%d", i)
		res, log, err := serveRun(s, id, 10*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		if res.Status["run"] != id {
			t.Errorf("%s: answered %v", id, res.Status)
		}
		// What the process wrote before its answer is the run's, all of
		// it, and nothing else.
		if want := "log of " + id + ": greeting=hi run=none mode=Serve\nmore of " + id + "\n"; log != want {
			t.Errorf("%s logged %q; want %q", id, log, want)
		}
		pids = append(pids, pidOf(res))
	}
	for _, p := range pids {
		if p != pids[0] {
			t.Fatalf("runs were answered by processes %v; want one process for all", pids)
		}
	}
}

func TestServeRunsAtMostProcessesAtOnce(t *testing.T) {
	s := newServe([]string{serveLoop(t, `sleep 0.2; echo "{\"status\": {\"pid\": $$}}"`)}, 2)
	defer s.Close()
	var mu sync.Mutex
	pids := map[string]int{}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			res, _, err := serveRun(s, fmt.Sprint("run", i), 30*time.Second)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			pids[pidOf(res)]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if len(pids) != 2 {
		t.Errorf("8 runs at once were answered by %v; want 2 processes (processes: 2)", pids)
	}
}

func TestServeFailuresAreClearAndTheNextRunHasANewProcess(t *testing.T) {
	for _, c := range []struct {
		name, body string
		timeout    time.Duration
		want       string
		permanent  bool
	}{
		{name: "exits", body: `echo "disk full" >&2; exit 3`, want: "the process exited with status 3 before answering: disk full"},
		{name: "exits 75", body: `exit 75`, want: "exit status 75: temporary failure"},
		{name: "exits 0", body: `exit 0`, want: "exited with status 0 before answering (in exec.mode Serve it reads a binding context per line"},
		{name: "killed", body: `kill -9 $$`, want: "killed by signal killed before answering"},
		{name: "times out", body: `sleep 30`, timeout: 500 * time.Millisecond, want: "timed out after 500ms; its process group was killed"},
		{name: "pretty-printed", body: `printf '{\n  "status": {}\n}\n'`, want: "in exec.mode Serve a result is one line of JSON"},
		{name: "not a result", body: `echo "hello"`, want: "output is not a JSON result"},
		{name: "too long", body: `head -c 2000000 /dev/zero | tr '\0' x`, want: "stdout exceeded the 1048576-byte limit"},
		{name: "handler error", body: `echo '{"error": {"message": "quota", "permanent": true}}'`, want: ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			// The first run of each process fails as the case says; the
			// next one answers.
			marker := t.TempDir() + "/failed"
			s := newServe([]string{serveLoop(t, `if [ ! -e `+marker+` ]; then touch `+marker+`; `+c.body+`; continue; fi
echo "{\"status\": {\"pid\": $$}}"`)}, 1)
			defer s.Close()
			timeout := c.timeout
			if timeout == 0 {
				timeout = 10 * time.Second
			}
			res, _, err := serveRun(s, "first", timeout)
			if c.want == "" {
				if err != nil || res.Error == nil || res.Error.Message != "quota" || !res.Error.Permanent {
					t.Fatalf("result %+v, %v; want the handler's error", res, err)
				}
			} else {
				f := AsFailure(err)
				if err == nil || !strings.Contains(f.Message, c.want) || f.Permanent != c.permanent {
					t.Fatalf("error %v; want a failure containing %q", err, c.want)
				}
			}
			res, _, err = serveRun(s, "second", 10*time.Second)
			if err != nil || pidOf(res) == "" {
				t.Fatalf("the run after: %+v, %v; want an answer", res, err)
			}
		})
	}
}

func TestServeStopsAProcessThatAnswersOutOfTurn(t *testing.T) {
	s := newServe([]string{serveLoop(t, `echo "{\"status\": {\"pid\": $$, \"run\": \"$id\"}}"
echo "{\"status\": {\"pid\": $$, \"run\": \"extra\"}}"`)}, 1)
	defer s.Close()
	first, _, err := serveRun(s, "first", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the extra line comes between runs
	second, _, err := serveRun(s, "second", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if second.Status["run"] != "second" || pidOf(second) == pidOf(first) {
		t.Errorf("the run after an extra line got %v from the process of the first (%s); want its own answer from a new process", second.Status, pidOf(first))
	}
}

func TestServeReadsSecretsEachRunAndHidesThem(t *testing.T) {
	var mu sync.Mutex
	value := "first-secret"
	s := newServe([]string{serveLoop(t, `echo "token is $TOKEN" >&2; echo "{\"status\": {\"pid\": $$}}"`)}, 1)
	s.Action.Env = []v1alpha1.EnvVar{{Name: "TOKEN", ValueFrom: &v1alpha1.EnvVarSource{SecretKeyRef: &v1alpha1.SecretKeyRef{Namespace: "ns", Name: "s", Key: "token"}}}}
	s.Secret = func(context.Context, string, string, string) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		return value, nil
	}
	defer s.Close()
	a, logA, errA := serveRun(s, "a", 10*time.Second)
	b, _, errB := serveRun(s, "b", 10*time.Second)
	mu.Lock()
	value = "second-secret"
	mu.Unlock()
	c, logC, errC := serveRun(s, "c", 10*time.Second)
	if errA != nil || errB != nil || errC != nil {
		t.Fatal(errA, errB, errC)
	}
	if pidOf(a) != pidOf(b) || pidOf(b) == pidOf(c) {
		t.Errorf("processes %s, %s, %s; want the same until the Secret's value changed, then a new one", pidOf(a), pidOf(b), pidOf(c))
	}
	if logA != "token is ***\n" || logC != "token is ***\n" {
		t.Errorf("logs %q and %q; want the Secret's values hidden", logA, logC)
	}
}

// An answer that is no result is quoted by the run's failure, cut at 200
// bytes: a Secret's value across the cut is hidden before the cut, and
// shows no start of it.
func TestServeHidesASecretAcrossTheQuoteOfAnAnswer(t *testing.T) {
	value := strings.Repeat("s3cret", 10)
	s := newServe([]string{serveLoop(t, `echo "`+strings.Repeat("x", 190)+`$TOKEN"`)}, 1)
	s.Action.Env = []v1alpha1.EnvVar{{Name: "TOKEN", ValueFrom: &v1alpha1.EnvVarSource{SecretKeyRef: &v1alpha1.SecretKeyRef{Namespace: "ns", Name: "s", Key: "token"}}}}
	s.Secret = func(context.Context, string, string, string) (string, error) { return value, nil }
	defer s.Close()
	_, _, err := serveRun(s, "a", 10*time.Second)
	if err == nil {
		t.Fatal("an answer that is no result was taken")
	}
	if msg := AsFailure(err).Message; strings.Contains(msg, "s3cr") || !strings.Contains(msg, "***") {
		t.Errorf("the failure %q shows the Secret's start, or no ***", msg)
	}
}

func TestServeCloseStopsItsProcessesAndLaterRunsStillRun(t *testing.T) {
	// The handler ignores SIGTERM and the end of its input while a run is
	// not asked: Close kills it after its grace.
	s := newServe([]string{serveLoop(t, `echo "{\"status\": {\"pid\": $$}}"`)}, 2)
	res, _, err := serveRun(s, "a", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(pidOf(res))
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if err := syscall.Kill(pid, 0); err == nil {
		t.Errorf("process %d still runs after Close", pid)
	}
	res, _, err = serveRun(s, "b", 10*time.Second)
	if err != nil || pidOf(res) == "" || pidOf(res) == fmt.Sprint(pid) {
		t.Errorf("a run after Close: %+v, %v; want an answer from a process of its own", res, err)
	}
}

func TestServeWarmStartsItsProcessesBeforeTheFirstRun(t *testing.T) {
	started := t.TempDir() + "/started"
	argv := []string{script(t, `echo $$ >> `+started+`
while IFS= read -r ctx; do echo "{\"status\": {\"pid\": $$}}"; done`)}
	s := newServe(argv, 2)
	defer s.Close()
	s.Warm(context.Background(), "h")
	// Both processes are up before any run asked for one.
	pids := waitLines(t, started, 2)
	res, _, err := serveRun(s, "run1", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(pids, pidOf(res)) {
		t.Errorf("the first run was answered by process %s; want one of those warmed, %v", pidOf(res), pids)
	}
	if got := waitLines(t, started, 2); len(got) != 2 {
		t.Errorf("processes started: %v; want the 2 warmed only", got)
	}

	// After a run, its process idle: Warm starts the others only.
	after := t.TempDir() + "/started"
	s3 := newServe([]string{script(t, `echo $$ >> `+after+`
while IFS= read -r ctx; do echo "{\"status\": {\"pid\": $$}}"; done`)}, 2)
	defer s3.Close()
	if _, _, err := serveRun(s3, "run1", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	s3.Warm(context.Background(), "h")
	if got := waitLines(t, after, 3); len(got) != 2 {
		t.Errorf("processes started by a run and Warm: %v; want 2, exec.processes", got)
	}

	// A Secret of the run's object's namespace is known at a run only:
	// nothing is warmed.
	none := t.TempDir() + "/started"
	s2 := newServe([]string{script(t, `echo $$ >> `+none+`; cat >/dev/null`)}, 2)
	s2.Action.Env = append(s2.Action.Env, v1alpha1.EnvVar{Name: "TOKEN", ValueFrom: &v1alpha1.EnvVarSource{SecretKeyRef: &v1alpha1.SecretKeyRef{Name: "s", Key: "k"}}})
	s2.Secret = func(context.Context, string, string, string) (string, error) { return "v", nil }
	defer s2.Close()
	s2.Warm(context.Background(), "h")
	time.Sleep(200 * time.Millisecond)
	if data, err := os.ReadFile(none); err == nil {
		t.Errorf("processes started for a handler whose Secret is the object's namespace's: %q", data)
	}
}

// waitLines waits until the file at path has n lines (or 5 s) and
// returns them.
func waitLines(t *testing.T, path string, n int) []string {
	t.Helper()
	var lines []string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		data, _ := os.ReadFile(path)
		if lines = strings.Fields(string(data)); len(lines) >= n {
			break
		}
	}
	return lines
}

func TestABindingContextIsOneLineForAServeHandler(t *testing.T) {
	compact, _ := json.Marshal(map[string]any{"runId": "r1", "object": map[string]any{"name": "a\nb", "note": "x y"}})
	given := make([]byte, len(compact), len(compact)+8) // room after it, which the line must not take
	copy(given, compact)
	for _, c := range []struct{ name, input, want string }{
		{"compact JSON, a line break escaped in a string", string(given), string(compact) + "\n"},
		{"pretty-printed JSON", "{\n  \"runId\": \"r1\",\r\n  \"a\": [1, 2]\n}\n", `{"runId":"r1","a":[1,2]}` + "\n"},
		{"compact JSON ended by its newline, as a runner gets it", string(compact) + "\n", string(compact) + "\n"},
		{"not JSON, over lines", "  one\ntwo\n", "one two\n"},
		{"not JSON, a lone carriage return", "one\rtwo\r\nthree", "one two three\n"},
		{"not JSON, one line", "one two", "one two\n"},
		{"nothing", "", "\n"},
	} {
		in := []byte(c.input)
		if c.input == string(given) {
			in = given
		}
		if got := string(asLine(in)); got != c.want {
			t.Errorf("%s: %q; want %q", c.name, got, c.want)
		}
	}
	if spare := given[len(given) : len(given)+1]; spare[0] != 0 {
		t.Errorf("asLine wrote past its input, into the caller's array: %q", spare)
	}
}
