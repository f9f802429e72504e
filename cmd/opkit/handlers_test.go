package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/devcluster"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
	"github.com/opkit-dev/opkit/internal/source"
)

// keyHandler appends its idempotency key to $DIR/keys. It sleeps the first
// time it sees a key while $DIR/sleep exists, and fails while $DIR/fail does.
const keyHandler = `#!/bin/bash
set -u
cat > /dev/null
seen=
grep -qxF "$OPKIT_IDEMPOTENCY_KEY" "$DIR/keys" 2>/dev/null && seen=1
echo "$OPKIT_IDEMPOTENCY_KEY" >> "$DIR/keys"
if [ -e "$DIR/fail" ]; then
  echo "failing on purpose for $OPKIT_IDEMPOTENCY_KEY" >&2
  exit 1
fi
if [ -e "$DIR/sleep" ] && [ -z "$seen" ]; then
  sleep 60
fi
echo "done" >&2
`

const keysOperator = `apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: keys}
spec:
  resource:
    group: keys.example.com
    kind: Key
    versions:
    - name: v1
      schema: {type: object, properties: {a: {type: string}}}
  handlers:
  - name: record
    on: [create, update]
    retry: {maxAttempts: 1}
    exec:
      command: [./handler.sh]
      env: [{name: DIR, value: %q}]
`

func TestSIGKILLedEngineRunsTheInterruptedHandlerAgainWithTheSameKey(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	dir := t.TempDir()
	write := func(name, data string, mode os.FileMode) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), mode); err != nil {
			t.Fatal(err)
		}
	}
	write("handler.sh", keyHandler, 0o755)
	write("keys.yaml", fmt.Sprintf(keysOperator, dir), 0o644)
	archivePath := filepath.Join(dir, "runs.db")
	cl, err := devcluster.Start(t.Context(), devcluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Stop()
	kc := cl.KubeconfigPath()
	start := func() (*exec.Cmd, *lockedBuffer) {
		cmd, out := startOpkit(t, "run", "-f", filepath.Join(dir, "keys.yaml"), "--kubeconfig", kc, "--archive", archivePath)
		waitOutput(t, out, "operator keys: running", 60*time.Second)
		return cmd, out
	}
	apply := func(name string) {
		t.Helper()
		manifest := filepath.Join(dir, name+".yaml")
		write(name+".yaml", "apiVersion: keys.example.com/v1\nkind: Key\nmetadata: {name: "+name+", namespace: default}\nspec: {a: x}\n", 0o644)
		if out, err := kubectl(t, kc, "apply", "-f", manifest); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
	}
	uid := func(name string) string {
		out, err := kubectl(t, kc, "get", "key", name, "-o", "jsonpath={.metadata.uid}")
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	keys := func() []string {
		data, _ := os.ReadFile(filepath.Join(dir, "keys"))
		return strings.Fields(string(data))
	}
	count := func(key string) int {
		n := 0
		for _, k := range keys() {
			if k == key {
				n++
			}
		}
		return n
	}
	waitKey := func(key string, n int) {
		t.Helper()
		clustertest.Eventually(t, 60*time.Second, fmt.Sprintf("key %s recorded %d times", key, n), func(context.Context) (bool, error) {
			return count(key) >= n, nil
		})
	}

	engine, _ := start()
	apply("first")
	firstKey := uid("first") + "/1/record"
	waitKey(firstKey, 1)
	waitRunOutcome(t, archivePath, "first", archive.Succeeded)

	// The second handler sleeps; the engine is killed while it runs.
	write("sleep", "", 0o644)
	apply("second")
	secondKey := uid("second") + "/1/record"
	waitKey(secondKey, 1)
	if err := engine.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = engine.Wait()

	start()
	waitKey(secondKey, 2)
	waitRunOutcome(t, archivePath, "second", archive.Succeeded)
	if n := count(firstKey); n != 1 {
		t.Errorf("the handler that had succeeded ran %d times, want 1", n)
	}
	runs := opkitRuns(t, archivePath, "--object", "default/second")
	if len(runs) != 2 || runs[1].Outcome != archive.Cancelled || runs[0].Outcome != archive.Succeeded || runs[0].Key != runs[1].Key {
		t.Errorf("runs of second: %+v; want one Cancelled, then one Succeeded with the same key", runs)
	}

	// A failure shows in opkit runs --failed, and its stderr in opkit logs.
	write("fail", "", 0o644)
	apply("third")
	waitRunOutcome(t, archivePath, "third", archive.GaveUp)
	failed := opkitRuns(t, archivePath, "--failed")
	if len(failed) != 1 || failed[0].Name != "third" {
		t.Fatalf("opkit runs --failed: %+v", failed)
	}
	res := opkit(t, "", "runs", "--failed", "--archive", archivePath)
	if !strings.Contains(res.stdout, failed[0].ID) || !strings.Contains(res.stdout, "GaveUp") || !strings.Contains(res.stdout, "exit status 1") {
		t.Errorf("opkit runs --failed:\n%s", res.stdout)
	}
	res = opkit(t, "", "logs", failed[0].ID, "--archive", archivePath)
	if res.code != 0 || !strings.Contains(res.stdout, "failing on purpose for "+uid("third")+"/1/record") || !strings.Contains(res.stderr, "GaveUp") {
		t.Errorf("opkit logs: code %d\nstdout %s\nstderr %s", res.code, res.stdout, res.stderr)
	}

	// Once the cause is fixed, opkit retry runs it again, and the retry is
	// recorded with who asked (the kubeconfig's user) and why.
	if err := os.Remove(filepath.Join(dir, "fail")); err != nil {
		t.Fatal(err)
	}
	res = opkit(t, "", "retry", "default/third", "--reason", "the fail file is gone", "--kubeconfig", kc, "--archive", archivePath)
	if res.code != 0 || !strings.Contains(res.stdout, "Key default/third: retry requested by ") {
		t.Fatalf("opkit retry: code %d\nstdout %s\nstderr %s", res.code, res.stdout, res.stderr)
	}
	who := strings.TrimSpace(strings.SplitN(strings.SplitN(res.stdout, "requested by ", 2)[1], ":", 2)[0])
	if who == "" {
		t.Fatalf("opkit retry names nobody: %s", res.stdout)
	}
	clustertest.Eventually(t, 60*time.Second, "third's handler succeeds after the retry", func(context.Context) (bool, error) {
		runs := opkitRuns(t, archivePath, "--object", "default/third", "--handler", "record", "--outcome", string(archive.Succeeded))
		return len(runs) > 0, nil
	})
	retries := opkitRuns(t, archivePath, "--object", "default/third", "--handler", v1alpha1.RetryHandler)
	if len(retries) != 1 || retries[0].Actor != who || retries[0].Trigger != v1alpha1.TriggerRetry {
		t.Fatalf("retry records of third: %+v; want one, by %s", retries, who)
	}
	if res := opkit(t, "", "logs", retries[0].ID, "--archive", archivePath); !strings.Contains(res.stdout, "retry asked by "+who+": the fail file is gone") {
		t.Errorf("the retry's record says %q, want who asked and why", res.stdout)
	}
	if res := opkit(t, "", "retry", "default/nosuch", "--kubeconfig", kc, "--archive", archivePath); res.code == 0 || !strings.Contains(res.stderr, "no runs for default/nosuch") {
		t.Errorf("opkit retry of an unknown object: code %d, stderr %s", res.code, res.stderr)
	}
}

// opkitRuns lists runs with opkit runs -o json.
func opkitRuns(t *testing.T, archivePath string, args ...string) []archive.Run {
	t.Helper()
	res := opkit(t, "", append([]string{"runs", "-o", "json", "--archive", archivePath}, args...)...)
	if res.code != 0 {
		t.Fatalf("opkit runs: %s", res.stderr)
	}
	var page archive.Page
	if err := json.Unmarshal([]byte(res.stdout), &page); err != nil {
		t.Fatalf("opkit runs -o json: %v\n%s", err, res.stdout)
	}
	return page.Runs
}

func waitRunOutcome(t *testing.T, archivePath, name string, want archive.Outcome) {
	t.Helper()
	clustertest.Eventually(t, 60*time.Second, name+" has a "+string(want)+" run", func(context.Context) (bool, error) {
		for _, r := range opkitRuns(t, archivePath, "--object", "default/"+name) {
			if r.Outcome == want {
				return true, nil
			}
		}
		return false, nil
	})
}

// TestAnOperatorWideScheduleRunsEachSlotOnceAcrossASIGKILL runs an
// every-2s operator-wide schedule under opkit run for 20 s (10 ± 1
// slots), kills it with SIGKILL for 5 s and starts it again: each slot
// runs once, the slots missed while it was down are skipped but for the
// latest (catchUp: Once), and none runs twice.
func TestAnOperatorWideScheduleRunsEachSlotOnceAcrossASIGKILL(t *testing.T) {
	t.Parallel()
	cl, _ := startPlane(t)
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	handler := filepath.Join(dir, "tick.sh")
	if err := os.WriteFile(handler, []byte("#!/bin/bash\necho \"$OPKIT_IDEMPOTENCY_KEY\" >> \"$KEYS\"\necho '{}'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	def := filepath.Join(dir, "ticks.yaml")
	if err := os.WriteFile(def, []byte(`apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: ticks}
spec:
  handlers:
  - name: tick
    on: [schedule]
    schedule: {every: 2s, catchUp: Once}
    exec:
      command: [`+strconv.Quote(handler)+`]
      env: [{name: KEYS, value: `+strconv.Quote(keys)+`}]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	archivePath := filepath.Join(dir, "runs.db")
	start := func() *exec.Cmd {
		cmd, out := startOpkit(t, "run", "-f", def, "--kubeconfig", cl.KubeconfigPath(), "--archive", archivePath)
		waitOutput(t, out, "operator ticks: running", 60*time.Second)
		return cmd
	}
	// slots returns the slot of each run recorded, in order.
	slots := func() []int64 {
		var out []int64
		for _, k := range keysIn(keys) {
			i := strings.LastIndexByte(k, '/')
			n, err := strconv.ParseInt(k[i+1:], 10, 64)
			if err != nil || !strings.HasPrefix(k, "ticks/schedule/tick/") {
				t.Fatalf("key %q; want ticks/schedule/tick/<unix time>", k)
			}
			out = append(out, n)
		}
		return out
	}
	cmd := start()
	began := time.Now()
	time.Sleep(20 * time.Second)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	first := slots()
	var within int
	for _, s := range first {
		if s >= began.Unix() && s < began.Add(20*time.Second).Unix() {
			within++
		}
	}
	if within < 9 || within > 11 {
		t.Errorf("%d slots ran in the first 20 s; want 10 ± 1: %v", within, first)
	}
	time.Sleep(5 * time.Second)
	restarted := time.Now()
	cmd = start()
	running := time.Now()
	clustertest.Eventually(t, 30*time.Second, "slots after the restart", func(context.Context) (bool, error) { return len(slots()) >= len(first)+3, nil })
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()

	all := slots()
	seen := map[int64]bool{}
	for _, s := range all {
		if seen[s] {
			t.Errorf("slot %d ran twice: %v", s, all)
		}
		seen[s] = true
	}
	// While down, slots were missed: they are skipped but for the latest
	// due when the engine started (catchUp: Once), which runs first. (It
	// may be on time or late: the order of the start and the slot is the
	// machine's; internal/engine's TestCatchUpRunsTheLatestSlotOnTimeOrByPolicy has the cases.)
	last, next := first[len(first)-1], all[len(first)]
	if due := restarted.Unix() / 2 * 2; next < due || next > running.Unix()+2 {
		t.Errorf("the first slot after the restart is %d; want the latest due when the engine started, %d to %d", next, due, running.Unix()+2)
	}
	if next-last < 4 {
		t.Errorf("slots %d then %d: the 5 s down should have skipped one at least", last, next)
	}
	for i := 1; i < len(all); i++ {
		if all[i] <= all[i-1] || all[i]%2 != 0 {
			t.Errorf("slots %v are not increasing multiples of 2 s", all)
			break
		}
	}
	runs := opkitRuns(t, archivePath, "--kind", "Operator", "--trigger", "schedule", "--limit", "1000")
	succeeded, outcomes := map[string]int{}, map[string][]archive.Outcome{}
	for _, r := range runs {
		if r.Operator != "ticks" || r.Name != "ticks" || r.Handler != "tick" {
			t.Errorf("run %+v; want operator ticks, object the Operator ticks, handler tick", r)
		}
		if r.Outcome == archive.Succeeded {
			succeeded[r.Key]++
		}
		outcomes[r.Key] = append(outcomes[r.Key], r.Outcome)
	}
	// Every slot that ran succeeded, but the one the SIGKILL may have
	// interrupted (the last before it, on a slow machine) and the one the
	// final stop may have (the last of all, its key written and its
	// success not yet recorded): recorded Cancelled, it is not run again,
	// as catchUp: Once runs only the latest slot due at the start
	// (handlers.md, "may run twice").
	stopped := all[len(all)-1]
	for _, s := range all {
		key := "ticks/schedule/tick/" + strconv.FormatInt(s, 10)
		if succeeded[key] > 0 {
			continue
		}
		if (s != last && s != stopped) || !slices.Equal(outcomes[key], []archive.Outcome{archive.Cancelled}) {
			t.Errorf("slot %d ran, and its runs in the archive are %v; want Succeeded (or Cancelled, for the slots the SIGKILL and the stop interrupted, %d and %d)", s, outcomes[key], last, stopped)
		}
	}
	for k, n := range succeeded {
		if n != 1 {
			t.Errorf("slot %s succeeded %d times", k, n)
		}
	}
}

// hooksOperatorYAML has a GitHub source whose deliveries run the key
// handler (keyHandler) once each.
const hooksOperatorYAML = `apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: hooks}
spec:
  sources:
  - name: github
    webhook:
      github: {secretRef: {namespace: default, name: hook, key: secret}}
  handlers:
  - name: record
    on: [event]
    exec:
      command: [./handler.sh]
      env: [{name: DIR, value: %q}]
`

// postDelivery sends a delivery signed as GitHub signs it and returns the
// status and the answer.
func postDelivery(t *testing.T, url, id, secret string, body []byte) (int, map[string]string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-GitHub-Delivery", id)
	req.Header.Set("X-GitHub-Event", "issue_comment")
	req.Header.Set("X-Hub-Signature-256", source.GitHubSignature([]byte(secret), body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var answer map[string]string
	if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, answer
}

// hooksSourceURL waits until opkit run, whose output is out, says where
// the source github of the operator hooks receives deliveries (the line
// after the operator's "running", written apart), and returns it.
func hooksSourceURL(t *testing.T, out *lockedBuffer) string {
	t.Helper()
	waitOutput(t, out, "/hooks/hooks/github\n", 60*time.Second)
	_, url, _ := strings.Cut(out.String(), "source github (github): POST ")
	url, _, _ = strings.Cut(url, "\n")
	if !strings.HasPrefix(url, "http://127.0.0.1:") || !strings.HasSuffix(url, "/hooks/hooks/github") {
		t.Fatalf("opkit run did not say where the source receives deliveries:\n%s", out.String())
	}
	return url
}

// TestAWebhookDeliveryAcknowledgedBeforeASIGKILLIsHandledOnceAfterIt
// kills opkit run with SIGKILL while the handler of a delivery it
// acknowledged runs: the next opkit run handles the delivery, running the
// handler again with the same key, and a redelivery of it runs nothing.
func TestAWebhookDeliveryAcknowledgedBeforeASIGKILLIsHandledOnceAfterIt(t *testing.T) {
	t.Parallel()
	cl, c := startPlane(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "handler.sh"), []byte(keyHandler), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sleep"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	def := filepath.Join(dir, "hooks.yaml")
	if err := os.WriteFile(def, fmt.Appendf(nil, hooksOperatorYAML, dir), 0o644); err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "hook"}, StringData: map[string]string{"secret": "s3cret"}}
	if err := c.Create(t.Context(), secret); err != nil {
		t.Fatal(err)
	}
	archivePath := filepath.Join(dir, "runs.db")
	start := func() (*exec.Cmd, string) {
		cmd, out := startOpkit(t, "run", "-f", def, "--kubeconfig", cl.KubeconfigPath(), "--archive", archivePath, "--hooks-addr", "127.0.0.1:0", "--metrics-addr", "0")
		return cmd, hooksSourceURL(t, out)
	}
	cmd, url := start()
	body := []byte(`{"action": "created", "comment": {"body": "/deploy abc1234"}}`)
	status, answer := postDelivery(t, url, "d-1", "s3cret", body)
	if status != http.StatusAccepted {
		t.Fatalf("answered %d %v, want 202", status, answer)
	}
	const key = "hooks/event/github/d-1/record"
	clustertest.Eventually(t, 60*time.Second, "the handler started", func(context.Context) (bool, error) { return len(keysIn(filepath.Join(dir, "keys"))) == 1, nil })
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()

	cmd, url = start()
	clustertest.Eventually(t, 60*time.Second, "the delivery handled", func(context.Context) (bool, error) {
		d := opkitEvent(t, archivePath, answer["delivery"])
		return d.Outcome == archive.DeliveryHandled, nil
	})
	if keys := keysIn(filepath.Join(dir, "keys")); len(keys) != 2 || keys[0] != key || keys[1] != key {
		t.Errorf("the handler ran with the keys %v; want %s twice: interrupted, then again", keys, key)
	}
	d := opkitEvent(t, archivePath, answer["delivery"])
	var outcomes []archive.Outcome
	for _, id := range d.Runs {
		for _, r := range opkitRuns(t, archivePath, "--operator", "hooks") {
			if r.ID == id {
				outcomes = append(outcomes, r.Outcome)
			}
		}
	}
	if !slices.Equal(outcomes, []archive.Outcome{archive.Cancelled, archive.Succeeded}) {
		t.Errorf("the delivery's runs ended %v; want Cancelled (the killed engine's), then Succeeded", outcomes)
	}
	// GitHub's Redeliver sends the same delivery id: it runs nothing.
	if status, answer := postDelivery(t, url, "d-1", "s3cret", body); status != http.StatusConflict || !strings.Contains(answer["reason"], "replay of delivery d-1") {
		t.Errorf("a redelivery was answered %d %v, want 409, a replay", status, answer)
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if keys := keysIn(filepath.Join(dir, "keys")); len(keys) != 2 {
		t.Errorf("after the redelivery the handler ran %d times, want 2", len(keys))
	}
}

// shownDelivery is what the tests read of opkit events show -o json.
type shownDelivery struct {
	Outcome archive.DeliveryOutcome `json:"outcome"`
	Reason  string                  `json:"reason"`
	Runs    []string                `json:"runs"`
}

// opkitEvent reads one delivery with opkit events show -o json.
func opkitEvent(t *testing.T, archivePath, id string) shownDelivery {
	t.Helper()
	res := opkit(t, "", "events", "show", id, "-o", "json", "--archive", archivePath)
	if res.code != 0 {
		t.Fatalf("opkit events show: %s", res.stderr)
	}
	var d shownDelivery
	if err := json.Unmarshal([]byte(res.stdout), &d); err != nil {
		t.Fatalf("opkit events show -o json: %v\n%s", err, res.stdout)
	}
	return d
}
