package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/archive/pgtest"
	"github.com/opkit-dev/opkit/internal/devcluster"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
	"github.com/opkit-dev/opkit/internal/githubfake"
	"github.com/opkit-dev/opkit/internal/source/kafkasrc/kafkatest"
	"github.com/opkit-dev/opkit/internal/source/natsjs/natstest"
)

// consumedOperatorYAML is an operator of one consumed source (%s: its
// kind's block, indented under the source) whose handler appends each
// run's idempotency key to DIR/keys.
const consumedOperatorYAML = `apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: consumed}
spec:
  sources:
  - name: in
%s
  handlers:
  - name: record
    on: [event]
    exec:
      command: [./handler.sh]
      env: [{name: DIR, value: %q}]
`

// consumedSource is one kind of consumed source under test: its block in
// the Operator, and how n messages are published to it (each with a
// distinct body; the i-th names i).
type consumedSource struct {
	block   string
	publish func(t *testing.T, from, n int)
}

// checkConsumedAcrossSIGKILL runs opkit run on an operator of the
// source, publishes half the messages, kills opkit run with SIGKILL once
// some of them are handled and before all are, publishes the rest while
// no engine runs, and starts opkit run again on the same archive. In the
// end every message is recorded once, Handled, and its handler ran once,
// or twice with the same key when the kill interrupted its run (which
// the archive then shows Cancelled).
func checkConsumedAcrossSIGKILL(t *testing.T, cl *devcluster.Cluster, src consumedSource, n int) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "handler.sh"), []byte(keyHandler), 0o755); err != nil {
		t.Fatal(err)
	}
	def := filepath.Join(dir, "consumed.yaml")
	if err := os.WriteFile(def, fmt.Appendf(nil, consumedOperatorYAML, src.block, dir), 0o644); err != nil {
		t.Fatal(err)
	}
	archivePath := filepath.Join(dir, "runs.db")
	keys := filepath.Join(dir, "keys")
	start := func() (*exec.Cmd, *lockedBuffer) {
		cmd, out := startOpkit(t, "run", "-f", def, "--kubeconfig", cl.KubeconfigPath(), "--archive", archivePath, "--metrics-addr", "127.0.0.1:0")
		waitOutput(t, out, "metrics: http://", time.Minute)
		return cmd, out
	}
	killed, out := start()
	// Published once the source is consumed: a GitHub poll with since:
	// Now skips what its first poll lists.
	_, metrics, _ := strings.Cut(out.String(), "metrics: ")
	metrics, _, _ = strings.Cut(metrics, " ")
	clustertest.Eventually(t, time.Minute, "the source consumed", func(context.Context) (bool, error) {
		return strings.Contains(httpGet(t, metrics), `opkit_source_connected{operator="consumed",source="in"} 1`), nil
	})
	src.publish(t, 0, n/2)
	clustertest.Eventually(t, 2*time.Minute, "some messages handled", func(context.Context) (bool, error) { return len(keysIn(keys)) >= n/10, nil })
	if err := killed.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = killed.Wait()
	before := len(keysIn(keys))
	if before >= n/2 {
		t.Logf("all %d messages published were handled before the kill; the restart is checked for the rest", before)
	}
	src.publish(t, n/2, n-n/2)
	killed, out = start()
	// Handled in the archive, not only run: a delivery whose handling
	// a stop interrupts stays Pending, for the next start.
	clustertest.Eventually(t, 3*time.Minute, "every message handled", func(context.Context) (bool, error) {
		return len(uniq(keysIn(keys))) >= n && handledDeliveries(t, archivePath) >= n, nil
	})
	if err := killed.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	_ = killed.Wait()

	all := keysIn(keys)
	if u := uniq(all); len(u) != n {
		t.Errorf("%d messages handled; want %d\n%s", len(u), n, out.String())
	}
	store, err := archive.OpenSQLite(t.Context(), archivePath, archive.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = store.Close() }()
	page, err := store.ListDeliveries(t.Context(), archive.DeliveryQuery{Operator: "consumed", Limit: 10 * n})
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	handled := 0
	for _, d := range page.Deliveries {
		if ids[d.DeliveryID] {
			t.Errorf("message %s recorded twice", d.DeliveryID)
		}
		ids[d.DeliveryID] = true
		if d.Outcome == archive.DeliveryHandled {
			handled++
		}
	}
	if handled != n {
		t.Errorf("%d deliveries Handled; want %d", handled, n)
	}
	runs, err := archive.ListAll(t.Context(), store, archive.Query{Operator: "consumed"})
	if err != nil {
		t.Fatal(err)
	}
	cancelled := 0
	for _, r := range runs {
		if r.Outcome == archive.Cancelled {
			cancelled++
		}
	}
	if again := len(all) - n; again > cancelled {
		t.Errorf("the handler ran %d times more than once per message, and the kill interrupted %d runs: a message was handled twice", again, cancelled)
	}
}

// handledDeliveries counts the deliveries of the operator consumed that
// the archive holds Handled, with opkit events.
func handledDeliveries(t *testing.T, archivePath string) int {
	t.Helper()
	res := opkit(t, "", "events", "--operator", "consumed", "--outcome", "Handled", "--limit", "1000", "-o", "json", "--archive", archivePath)
	if res.code != 0 {
		t.Fatalf("opkit events: %s", res.stderr)
	}
	var page archive.DeliveryPage
	if err := json.Unmarshal([]byte(res.stdout), &page); err != nil {
		t.Fatalf("opkit events -o json: %v\n%s", err, res.stdout)
	}
	return len(page.Deliveries)
}

func uniq(s []string) map[string]bool {
	out := make(map[string]bool, len(s))
	for _, v := range s {
		out[v] = true
	}
	return out
}

// TestAGitHubPollResumesFromItsCursorAcrossASIGKILL: the comments made
// while no engine runs are delivered by the next from the cursor, and
// none made before is delivered again.
func TestAGitHubPollResumesFromItsCursorAcrossASIGKILL(t *testing.T) {
	t.Parallel()
	gh := githubfake.New(t, githubfake.Options{})
	gh.SetPollInterval(1)
	gh.CreateRepo("acme/app")
	issue := gh.MergePull("acme/app", "dave", "A pull request to comment on", 1)
	cl, c := startPlane(t)
	if err := c.Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "gh"}, StringData: map[string]string{"token": gh.Token()}}); err != nil {
		t.Fatal(err)
	}
	checkConsumedAcrossSIGKILL(t, cl, consumedSource{
		block: fmt.Sprintf("    githubPoll: {repository: acme/app, interval: 10s, apiURL: %q, tokenSecretRef: {namespace: default, name: gh, key: token}}\n    filter: event == 'issue_comment'", gh.URL),
		publish: func(t *testing.T, from, n int) {
			for i := from; i < from+n; i++ {
				gh.Comment("acme/app", issue.Number, "alice", fmt.Sprintf("comment %d", i))
			}
		},
	}, 60)
}

// TestAKafkaRecordIsHandledOnceAcrossASIGKILL: offsets are committed only
// once records are recorded, so the records a killed engine had not
// recorded come again to the next, and those it had are recognised.
func TestAKafkaRecordIsHandledOnceAcrossASIGKILL(t *testing.T) {
	t.Parallel()
	kafka := kafkatest.Start(t, kafkatest.Options{Topics: []string{"builds"}, Partitions: 3})
	cl, _ := startPlane(t)
	checkConsumedAcrossSIGKILL(t, cl, consumedSource{
		block: fmt.Sprintf("    kafka: {brokers: [%q], topics: [builds], startOffset: Earliest}", kafka.Addrs()[0]),
		publish: func(t *testing.T, from, n int) {
			records := make([]*kgo.Record, n)
			for i := range records {
				records[i] = &kgo.Record{Topic: "builds", Partition: int32(from+i) % 3, Value: fmt.Appendf(nil, `{"n": %d}`, from+i)}
			}
			kafka.Produce(records...)
		},
	}, 400)
}

// TestANATSMessageIsHandledOnceAcrossASIGKILL: a message is acked only
// once recorded, so the messages a killed engine had not recorded come
// again to the next (after JetStream's ack wait), and those it had are
// recognised by their stream sequence.
func TestANATSMessageIsHandledOnceAcrossASIGKILL(t *testing.T) {
	t.Parallel()
	nats := natstest.Start(t, natstest.Options{Stream: "ORDERS", Subjects: []string{"orders.>"}})
	cl, _ := startPlane(t)
	checkConsumedAcrossSIGKILL(t, cl, consumedSource{
		block: fmt.Sprintf("    nats: {url: %q, stream: ORDERS, subjects: [orders.created], deliverPolicy: All}", nats.URL()),
		publish: func(t *testing.T, from, n int) {
			nats.Publish("orders.created", n)
		},
	}, 400)
}

// TestOnlyTheLeaderConsumesAndItsStandbyTakesOverTheStream runs two
// replicas of opkit run with leader election on one PostgreSQL archive,
// and a NATS source: the standby does not connect while the leader
// consumes; the leader killed with SIGKILL mid-stream, the standby takes
// over the durable consumer, and every message is recorded once and
// handled once.
func TestOnlyTheLeaderConsumesAndItsStandbyTakesOverTheStream(t *testing.T) {
	t.Parallel()
	nats := natstest.Start(t, natstest.Options{Stream: "ORDERS", Subjects: []string{"orders.>"}})
	cl, _ := startPlane(t)
	dsn := pgtest.Own(t).NewDatabase(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "handler.sh"), []byte(keyHandler), 0o755); err != nil {
		t.Fatal(err)
	}
	def := filepath.Join(dir, "consumed.yaml")
	block := fmt.Sprintf("    nats: {url: %q, stream: ORDERS, deliverPolicy: All}", nats.URL())
	if err := os.WriteFile(def, fmt.Appendf(nil, consumedOperatorYAML, block, dir), 0o644); err != nil {
		t.Fatal(err)
	}
	start := func() (*exec.Cmd, *lockedBuffer, string) {
		cmd, out := startOpkit(t, "run", "--leader-elect", "--leader-elect-namespace", "default", "-f", def,
			"--kubeconfig", cl.KubeconfigPath(), "--archive", dsn, "--metrics-addr", "127.0.0.1:0")
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		waitOutput(t, out, "metrics: http://", 60*time.Second)
		_, url, _ := strings.Cut(out.String(), "metrics: ")
		url, _, _ = strings.Cut(url, "/metrics")
		return cmd, out, url
	}
	first, firstOut, firstURL := start()
	waitOutput(t, firstOut, "source in (nats): consumes stream ORDERS as opkit-consumed-in at "+nats.URL(), 60*time.Second)
	_, second, secondURL := start()
	clustertest.Eventually(t, 30*time.Second, "the standby ready", func(context.Context) (bool, error) {
		status, _ := clustertest.Get(t, secondURL+"/readyz")
		return status == http.StatusOK, nil
	})

	const n = 400
	nats.Publish("orders.created", n)
	keys := filepath.Join(dir, "keys")
	clustertest.Eventually(t, 2*time.Minute, "the leader consumes", func(context.Context) (bool, error) {
		return len(keysIn(keys)) >= n/10, nil
	})
	connected := `opkit_source_connected{operator="consumed",source="in"} 1`
	clustertest.Eventually(t, 30*time.Second, "the leader says it is connected", func(context.Context) (bool, error) {
		return strings.Contains(httpGet(t, firstURL+"/metrics"), connected), nil
	})
	if m := httpGet(t, secondURL+"/metrics"); strings.Contains(m, "opkit_source_connected{") {
		t.Errorf("the standby reaches the source while the leader consumes:\n%s", grepLines(m, "opkit_source_"))
	}
	if consumers := nats.ConsumerInfo("opkit-consumed-in"); consumers == nil {
		t.Fatal("the durable consumer opkit-consumed-in does not exist")
	}
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	waitOutput(t, second, "source in (nats): consumes stream ORDERS", 60*time.Second)
	clustertest.Eventually(t, 3*time.Minute, "every message handled", func(context.Context) (bool, error) {
		return len(uniq(keysIn(keys))) >= n, nil
	})
	clustertest.Eventually(t, 30*time.Second, "the new leader says it is connected", func(context.Context) (bool, error) {
		return strings.Contains(httpGet(t, secondURL+"/metrics"), connected), nil
	})

	store, err := archive.Open(t.Context(), dsn, archive.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = store.Close() }()
	clustertest.Eventually(t, time.Minute, "every delivery Handled", func(ctx context.Context) (bool, error) {
		page, err := store.ListDeliveries(ctx, archive.DeliveryQuery{Operator: "consumed", Outcome: archive.DeliveryHandled, Limit: 10 * n})
		return err == nil && len(page.Deliveries) == n, err
	})
	page, err := store.ListDeliveries(t.Context(), archive.DeliveryQuery{Operator: "consumed", Limit: 10 * n})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Deliveries) != n {
		t.Errorf("%d deliveries recorded; want %d, each message once", len(page.Deliveries), n)
	}
	runs, err := archive.ListAll(t.Context(), store, archive.Query{Operator: "consumed"})
	if err != nil {
		t.Fatal(err)
	}
	cancelled := 0
	for _, r := range runs {
		if r.Outcome == archive.Cancelled {
			cancelled++
		}
	}
	if again := len(keysIn(keys)) - n; again > cancelled {
		t.Errorf("the handler ran %d times more than once per message, and the kill interrupted %d runs: a message was handled twice", again, cancelled)
	}
}

// TestASourceThatCannotConnectIsSaidOnceAndInReadyz starts opkit run with
// a NATS source whose server is down: opkit run says so in one line (not
// once per retry), /readyz fails naming the source, and opkit_source_connected
// is 0; once the server is up, the next try connects, opkit run says so,
// /readyz passes and the messages published meanwhile are handled.
func TestASourceThatCannotConnectIsSaidOnceAndInReadyz(t *testing.T) {
	t.Parallel()
	nats := natstest.Start(t, natstest.Options{Stream: "ORDERS", Subjects: []string{"orders.>"}})
	nats.Stop()
	cl, _ := startPlane(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "handler.sh"), []byte(keyHandler), 0o755); err != nil {
		t.Fatal(err)
	}
	def := filepath.Join(dir, "consumed.yaml")
	block := fmt.Sprintf("    nats: {url: %q, stream: ORDERS, deliverPolicy: All}", nats.URL())
	if err := os.WriteFile(def, fmt.Appendf(nil, consumedOperatorYAML, block, dir), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd, out := startOpkit(t, "run", "-f", def, "--kubeconfig", cl.KubeconfigPath(), "--archive", filepath.Join(dir, "runs.db"), "--metrics-addr", "127.0.0.1:0")
	defer func() { _ = cmd.Process.Signal(os.Interrupt); _ = cmd.Wait() }()
	waitOutput(t, out, "metrics: http://", 60*time.Second)
	_, url, _ := strings.Cut(out.String(), "metrics: ")
	url, _, _ = strings.Cut(url, "/metrics")
	const failed = "source in (nats) cannot be consumed: "
	waitOutput(t, out, failed, 60*time.Second)
	var body string
	clustertest.Eventually(t, 30*time.Second, "/readyz fails on the source", func(context.Context) (bool, error) {
		var status int
		status, body = clustertest.Get(t, url+"/readyz/sources")
		return status == http.StatusInternalServerError && strings.Contains(body, "operator consumed source in (nats): ") && strings.Contains(body, nats.URL()), nil
	})
	if m := httpGet(t, url+"/metrics"); !strings.Contains(m, `opkit_source_connected{operator="consumed",source="in"} 0`) {
		t.Errorf("opkit_source_connected is not 0 while the server is down:\n%s", grepLines(m, "opkit_source"))
	}
	// Back-offs of 1, 2, 4 s: three tries or more, one line.
	time.Sleep(8 * time.Second)
	if n := strings.Count(out.String(), failed); n != 1 {
		t.Errorf("opkit run said %d times that the source cannot be consumed; want once:\n%s", n, out.String())
	}

	nats.Restart()
	nats.Publish("orders.created", 5)
	waitOutput(t, out, "source in (nats) is consumed again", 2*time.Minute)
	clustertest.Eventually(t, time.Minute, "the messages handled", func(context.Context) (bool, error) {
		return len(keysIn(filepath.Join(dir, "keys"))) == 5, nil
	})
	clustertest.Eventually(t, 30*time.Second, "/readyz passes", func(context.Context) (bool, error) {
		status, _ := clustertest.Get(t, url+"/readyz")
		return status == http.StatusOK, nil
	})
}

// TestACloudEventAcknowledgedBeforeASIGKILLIsHandledOnceAfterIt: a
// CloudEvent (binary mode, a bearer token) answered 202 while its handler
// runs, opkit run killed with SIGKILL, is handled by the next opkit run
// with the same key, and the same event sent again (its source and id) is
// a replay that runs nothing.
func TestACloudEventAcknowledgedBeforeASIGKILLIsHandledOnceAfterIt(t *testing.T) {
	t.Parallel()
	cl, c := startPlane(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "handler.sh"), []byte(keyHandler), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sleep"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	def := filepath.Join(dir, "consumed.yaml")
	block := "    cloudEvents: {bearer: {secretRef: {namespace: default, name: ce, key: token}}}"
	if err := os.WriteFile(def, fmt.Appendf(nil, consumedOperatorYAML, block, dir), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "ce"}, StringData: map[string]string{"token": "t0ken"}}); err != nil {
		t.Fatal(err)
	}
	archivePath := filepath.Join(dir, "runs.db")
	start := func() (*exec.Cmd, string) {
		cmd, out := startOpkit(t, "run", "-f", def, "--kubeconfig", cl.KubeconfigPath(), "--archive", archivePath, "--hooks-addr", "127.0.0.1:0", "--metrics-addr", "0")
		waitOutput(t, out, "source in (CloudEvents, bearer): POST ", 60*time.Second)
		_, url, _ := strings.Cut(out.String(), "source in (CloudEvents, bearer): POST ")
		url, _, _ = strings.Cut(url, "\n")
		return cmd, url
	}
	send := func(url string) (int, map[string]any) {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(`{"build": 42}`))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range map[string]string{"Content-Type": "application/json", "Authorization": "Bearer t0ken",
			"ce-specversion": "1.0", "ce-id": "b-42", "ce-source": "/ci/builds", "ce-type": "com.example.build.finished"} {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var answer map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&answer)
		return resp.StatusCode, answer
	}
	cmd, url := start()
	if status, answer := send(url); status != http.StatusAccepted {
		t.Fatalf("a CloudEvent was answered %d %v; want 202", status, answer)
	}
	keys := filepath.Join(dir, "keys")
	clustertest.Eventually(t, time.Minute, "the handler started", func(context.Context) (bool, error) { return len(keysIn(keys)) == 1, nil })
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	cmd, url = start()
	defer func() { _ = cmd.Process.Signal(os.Interrupt); _ = cmd.Wait() }()
	clustertest.Eventually(t, time.Minute, "the event handled", func(context.Context) (bool, error) { return handledDeliveries(t, archivePath) == 1, nil })
	got := keysIn(keys)
	if len(got) != 2 || got[0] != got[1] || !strings.HasPrefix(got[0], "consumed/event/in/b-42@") {
		t.Errorf("the handler ran with the keys %v; want consumed/event/in/b-42@<source> twice: interrupted, then again", got)
	}
	if status, answer := send(url); status != http.StatusConflict {
		t.Errorf("the same event again was answered %d %v; want 409, a replay", status, answer)
	}
	if n := len(keysIn(keys)); n != 2 {
		t.Errorf("after the replay the handler ran %d times; want 2", n)
	}
}
