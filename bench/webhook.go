package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/engine"
	"github.com/opkit-dev/opkit/internal/source"
)

// The webhook scenario: opkit's engine, in this process (as the console
// scenario runs the console), receives signed GitHub deliveries on its
// hooks listener over loopback, from webhookSenders concurrent senders at
// a steady rate. One in 20 is forged (signed with another secret: 401),
// one in 20 a replay, byte for byte, of a delivery accepted before (409);
// the rest are distinct and valid (202). The operator (webhook.yaml) runs
// one cheap handler per accepted delivery. There is no baseline:
// controller-runtime receives no webhooks.
//
// Measured: the status of every request (none may be lost), the time to
// the answer of the accepted ones, and the times from each one's receipt
// to its handler's run started and to its record Handled, in the
// archive. Checked, after the figures are recorded: every request got
// the status of its kind, every accepted delivery is Handled with exactly
// one Succeeded run and one side effect of its handler, and every refused
// one is recorded Refused with its reason.

const (
	webhookWorkload = "webhook.yaml"
	webhookOperator = "bench-webhook" // webhook.yaml's Operator
	webhookSource   = "github"        // its source
	webhookHandler  = "record"        // its handler on event
	// webhookSecret is the Secret webhook.yaml's source reads, key
	// "secret".
	webhookSecret = "bench-webhook"
	// webhookOutMarker in webhook.yaml is replaced by the path of the file
	// the handler appends each idempotency key to.
	webhookOutMarker = "BENCH_WEBHOOK_OUT"
	// webhookSenders send at once, each every webhookSenders-th delivery,
	// each on its own kept-alive connection.
	webhookSenders = 10
	// replayDistance is how many deliveries back a replay's original was
	// sent (half a second at 100/s).
	replayDistance = 50
)

// deliveryKind is what a delivery the bench sends is.
type deliveryKind int

const (
	validDelivery  deliveryKind = iota // signed with the source's secret, a new id: 202
	forgedDelivery                     // signed with another secret: 401
	replayDelivery                     // an accepted delivery sent again, byte for byte: 409
)

func (k deliveryKind) String() string {
	return [...]string{"valid", "forged", "replay"}[k]
}

// status is the answer a delivery of the kind must get.
func (k deliveryKind) status() int {
	return [...]int{http.StatusAccepted, http.StatusUnauthorized, http.StatusConflict}[k]
}

// hookRequest is one delivery sent, and how it was answered.
type hookRequest struct {
	kind      deliveryKind
	id        string // X-GitHub-Delivery
	body      []byte
	signature string // X-Hub-Signature-256
	original  int    // a replay's original, by index
	answered  chan struct{}

	// Set by its sender before answered is closed.
	sentAt  time.Time
	latency time.Duration // to the whole answer read
	status  int           // 0: no answer (err says why)
	err     error
	record  string // the archive's id of its record, from the answer
	reason  string
}

// answer says how the delivery was answered, or why it was not.
func (r *hookRequest) answer() string {
	switch {
	case r.status == 0:
		return fmt.Sprintf("not answered: %v", r.err)
	case r.err != nil:
		return fmt.Sprintf("answered %d: %v", r.status, r.err)
	case r.reason != "":
		return fmt.Sprintf("answered %d %q", r.status, r.reason)
	}
	return fmt.Sprintf("answered %d", r.status)
}

// planDeliveries returns n deliveries: every 20th, from the 10th, forged;
// every 20th, from the 15th, the replay of the valid one replayDistance
// before it (or 10 before, early on); the others valid.
func planDeliveries(n int, secret []byte) []*hookRequest {
	reqs := make([]*hookRequest, n)
	for i := range reqs {
		r := &hookRequest{kind: validDelivery, id: guid(), answered: make(chan struct{})}
		switch i % 20 {
		case 10:
			r.kind = forgedDelivery
			r.body = githubPayload(i, r.id)
			r.signature = source.GitHubSignature([]byte("not-the-secret"), r.body)
		case 15:
			r.kind, r.original = replayDelivery, i-replayDistance
			if r.original < 0 {
				r.original = i - 10
			}
			o := reqs[r.original]
			r.id, r.body, r.signature = o.id, o.body, o.signature
		default:
			r.body = githubPayload(i, r.id)
			r.signature = source.GitHubSignature(secret, r.body)
		}
		reqs[i] = r
	}
	return reqs
}

// webhook: the deliveries of planDeliveries sent at -webhook-rate per
// second to opkit's engine.
func (b *bench) webhook(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	n, rate := b.opts.WebhookDeliveries, b.opts.WebhookRate
	subject := fmt.Sprintf("%s, %d/s", opkitDefaults.Name, rate)
	secret := []byte(guid())
	if err := b.c.putSecret(ctx, webhookSecret, map[string][]byte{"secret": secret}); err != nil {
		return err
	}
	defer func() {
		_ = b.c.cs.CoreV1().Secrets(b.c.ns).Delete(context.WithoutCancel(ctx), webhookSecret, metav1.DeleteOptions{})
	}()
	out := filepath.Join(b.workDir, fmt.Sprintf("webhook-%d.keys", time.Now().UnixNano()))
	d, err := webhookDefinition(out)
	if err != nil {
		return err
	}
	// The archive is the bench's: it is read once the engine stopped.
	e, closeAll, err := b.startInProcess(ctx, engine.Options{HooksAddr: "127.0.0.1:0"}, d)
	if err != nil {
		return err
	}
	defer closeAll()
	store, logPath := e.store, e.log
	url := "http://" + e.Engine.HooksAddr() + "/hooks/" + webhookOperator + "/" + webhookSource
	tr := &http.Transport{MaxIdleConnsPerHost: webhookSenders, DisableCompression: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: time.Minute}

	// A first delivery reads the Secret and starts the first handler; it is
	// not measured, and is counted as accepted in the checks.
	warmup := planDeliveries(1, secret)[0]
	postDelivery(ctx, client, url, warmup)
	if warmup.status != http.StatusAccepted {
		return fmt.Errorf("the first delivery was %s, want 202 (log: %s)", warmup.answer(), logPath)
	}
	if err := waitNoPending(ctx, store, time.Minute); err != nil {
		return fmt.Errorf("the first delivery: %w (log: %s)", err, logPath)
	}

	reqs := planDeliveries(n, secret)
	fmt.Fprintf(b.log, "  %d deliveries of %d bytes at %d/s from %d senders\n", n, len(reqs[0].body), rate, webhookSenders)
	start := time.Now()
	sendDeliveries(ctx, client, url, reqs, rate)
	var lastAnswer time.Time
	for _, r := range reqs {
		if end := r.sentAt.Add(r.latency); end.After(lastAnswer) {
			lastAnswer = end
		}
	}
	waitErr := waitNoPending(ctx, store, b.timeout(n))
	if err := e.stopped(); err != nil {
		return err
	}
	deliveries, err := allDeliveries(ctx, store)
	if err != nil {
		return err
	}
	runByID, err := runsByID(ctx, store, webhookOperator)
	if err != nil {
		return err
	}

	counts := map[int]int{}
	latencies := map[int][]time.Duration{}
	for _, r := range reqs {
		counts[r.status]++
		latencies[r.status] = append(latencies[r.status], r.latency)
	}
	acked := latencies[http.StatusAccepted]
	lost := n - counts[http.StatusAccepted] - counts[http.StatusUnauthorized] - counts[http.StatusConflict]
	b.add("webhook", subject, "accepted (202)", "", float64(counts[http.StatusAccepted]))
	b.add("webhook", subject, "bad signature (401)", "", float64(counts[http.StatusUnauthorized]))
	b.add("webhook", subject, "replay (409)", "", float64(counts[http.StatusConflict]))
	b.add("webhook", subject, "lost", "", float64(lost))
	b.add("webhook", subject, "first send to last answer", "s", lastAnswer.Sub(start).Seconds())
	b.addLatencies("", "webhook", subject, "202 answered", acked, 50, 90, 99, 100)
	// A 401 reads the Secret again (at most 10 a second); a 409 writes
	// its record without a sync to disk.
	for _, status := range []int{http.StatusUnauthorized, http.StatusConflict} {
		b.addLatencies("", "webhook", subject, fmt.Sprintf("%d answered", status), latencies[status], 50, 99)
	}
	var lastHandled time.Time
	var toHandled, toStarted []time.Duration
	for _, r := range reqs {
		rec, ok := deliveries[r.record]
		if !ok || r.status != http.StatusAccepted {
			continue
		}
		if rec.Outcome == archive.DeliveryHandled {
			toHandled = append(toHandled, rec.HandledAt.Sub(rec.ReceivedAt))
			if rec.HandledAt.After(lastHandled) {
				lastHandled = rec.HandledAt
			}
		}
		// Its handler's first run: the time issue 38's goal names, from
		// the delivery's receipt (before its body is read and its record
		// synced) to the run's start as the archive recorded it (once a
		// slot was free, before the fork).
		if len(rec.Runs) > 0 {
			if run, ok := runByID[rec.Runs[0]]; ok {
				toStarted = append(toStarted, run.StartedAt.Sub(rec.ReceivedAt))
			}
		}
	}
	if waitErr == nil {
		b.add("webhook", subject, "all handled, from the first send", "s", lastHandled.Sub(start).Seconds())
		b.add("webhook", subject, "all handled, after the last answer", "ms", float64(lastHandled.Sub(lastAnswer).Microseconds())/1000)
	}
	b.addLatencies("", "webhook", subject, "received to handled", toHandled, 50, 99)
	b.addLatencies("", "webhook", subject, "received to handler started", toStarted, 50, 90, 99, 100)
	b.note("webhook: opkit alone; there is no baseline (controller-runtime receives no webhooks), so no ratio")

	all := append([]*hookRequest{warmup}, reqs...)
	problems := []error{waitErr}
	problems = append(problems, firstOf(checkAnswers(reqs), 20)...)
	problems = append(problems, firstOf(checkDeliveries(all, deliveries, runByID, out), 20)...)
	if err := errors.Join(problems...); err != nil {
		return fmt.Errorf("%w (log: %s)", err, logPath)
	}
	return nil
}

// sendDeliveries sends reqs at rate per second, the i-th at i/rate from
// now, from webhookSenders senders. A replay is sent once its original is
// answered. It returns when every one is answered, or failed.
func sendDeliveries(ctx context.Context, client *http.Client, url string, reqs []*hookRequest, rate int) {
	interval := time.Second / time.Duration(rate)
	start := time.Now()
	var wg sync.WaitGroup
	for s := range webhookSenders {
		wg.Go(func() {
			for i := s; i < len(reqs); i += webhookSenders {
				r := reqs[i]
				if r.kind == replayDelivery {
					select {
					case <-reqs[r.original].answered:
					case <-ctx.Done():
					}
				}
				select {
				case <-time.After(time.Until(start.Add(time.Duration(i) * interval))):
				case <-ctx.Done():
				}
				postDelivery(ctx, client, url, r)
			}
		})
	}
	wg.Wait()
}

// postDelivery sends one delivery as GitHub does, and records its answer
// in r.
func postDelivery(ctx context.Context, client *http.Client, url string, r *hookRequest) {
	defer close(r.answered)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(r.body))
	if err != nil {
		r.err = err
		return
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "GitHub-Hookshot/bench")
	req.Header.Set("X-GitHub-Delivery", r.id)
	req.Header.Set("X-GitHub-Event", "issue_comment")
	req.Header.Set("X-GitHub-Hook-ID", "482915571")
	req.Header.Set("X-Hub-Signature-256", r.signature)
	r.sentAt = time.Now()
	resp, err := client.Do(req)
	if err != nil {
		r.err = err
		return
	}
	data, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	r.latency = time.Since(r.sentAt)
	if err != nil {
		r.err = err
		return
	}
	r.status = resp.StatusCode
	var a struct{ Delivery, Reason string }
	if err := json.Unmarshal(data, &a); err != nil {
		r.err = fmt.Errorf("the answer is not JSON: %q", data)
		return
	}
	r.record, r.reason = a.Delivery, a.Reason
}

// waitNoPending waits until the archive holds no Pending delivery: every
// accepted one was handled (or failed).
func waitNoPending(ctx context.Context, store archive.Store, timeout time.Duration) error {
	var left int
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		page, err := store.ListDeliveries(ctx, archive.DeliveryQuery{Operator: webhookOperator, Outcome: archive.DeliveryPending, Limit: 1000})
		if err != nil {
			return false, err
		}
		left = len(page.Deliveries)
		return left == 0, nil
	})
	if err != nil {
		return fmt.Errorf("after %s, %d or more accepted deliveries were still Pending: %w", timeout, left, err)
	}
	return nil
}

// allDeliveries returns the operator's delivery records by the archive's
// id.
func allDeliveries(ctx context.Context, store archive.Store) (map[string]archive.Delivery, error) {
	list, err := listDeliveries(ctx, store, webhookOperator)
	if err != nil {
		return nil, err
	}
	out := make(map[string]archive.Delivery, len(list))
	for _, d := range list {
		out[d.ID] = d
	}
	return out, nil
}

// checkAnswers reports the requests not answered with their kind's status.
func checkAnswers(reqs []*hookRequest) []error {
	var errs []error
	for i, r := range reqs {
		if r.status != r.kind.status() {
			errs = append(errs, fmt.Errorf("delivery %d (%s, id %s) was %s, want %d", i, r.kind, r.id, r.answer(), r.kind.status()))
		}
	}
	return errs
}

// checkDeliveries checks the archive (its deliveries, and all the
// operator's runs) and the handler's side effects once the engine
// stopped: each accepted delivery Handled, with one run,
// Succeeded, of its idempotency key, and its key once in the handler's
// file; each refused one Refused with its reason; nothing else.
func checkDeliveries(reqs []*hookRequest, deliveries map[string]archive.Delivery, runs map[string]archive.Run, out string) []error {
	byKey := map[string]int{}
	for _, r := range runs {
		byKey[r.Key]++
	}
	data, err := os.ReadFile(out)
	if err != nil {
		return []error{fmt.Errorf("the handler's file: %w", err)}
	}
	effects := map[string]int{}
	lines := strings.Fields(string(data))
	for _, key := range lines {
		effects[key]++
	}

	var errs []error
	seen := map[string]bool{}
	accepted := 0
	for _, r := range reqs {
		rec, ok := deliveries[r.record]
		if r.status == 0 {
			continue // checkAnswers reports it
		}
		if !ok {
			errs = append(errs, fmt.Errorf("delivery %s (%s), answered %d, has no record %q in the archive", r.id, r.kind, r.status, r.record))
			continue
		}
		seen[r.record] = true
		key := fmt.Sprintf("%s/event/%s/%s/%s", webhookOperator, webhookSource, r.id, webhookHandler)
		switch r.status {
		case http.StatusAccepted:
			accepted++
			if rec.Outcome != archive.DeliveryHandled || rec.DeliveryID != r.id || len(rec.Runs) != 1 {
				errs = append(errs, fmt.Errorf("accepted delivery %s is recorded %s %q with id %q and runs %v, want Handled with one run", r.id, rec.Outcome, rec.Reason, rec.DeliveryID, rec.Runs))
				continue
			}
			if run, ok := runs[rec.Runs[0]]; !ok || run.Outcome != archive.Succeeded || run.Key != key || byKey[key] != 1 {
				errs = append(errs, fmt.Errorf("accepted delivery %s: its run %s is %s with key %q, and its key has %d runs; want Succeeded, %q, one", r.id, rec.Runs[0], run.Outcome, run.Key, byKey[key], key))
			}
			if effects[key] != 1 {
				errs = append(errs, fmt.Errorf("accepted delivery %s: its handler's side effect is there %d times, want once", r.id, effects[key]))
			}
		default:
			want := "bad signature"
			if r.kind == replayDelivery {
				want = "replay of delivery " + r.id
			}
			if rec.Outcome != archive.DeliveryRefused || rec.DeliveryID != r.id || !strings.HasPrefix(rec.Reason, want) || rec.Reason != r.reason || len(rec.Runs) > 0 {
				errs = append(errs, fmt.Errorf("%s delivery %s, answered %d %q, is recorded %s %q with id %q and runs %v; want Refused, %q..., no run", r.kind, r.id, r.status, r.reason, rec.Outcome, rec.Reason, rec.DeliveryID, rec.Runs, want))
			}
		}
	}
	for id, rec := range deliveries {
		if !seen[id] {
			errs = append(errs, fmt.Errorf("the archive holds delivery %s (%s, id %q) that no request was answered with", id, rec.Outcome, rec.DeliveryID))
		}
	}
	if len(runs) != accepted || len(lines) != accepted {
		errs = append(errs, fmt.Errorf("%d deliveries accepted, %d runs recorded and %d side effects of the handler; want all three equal", accepted, len(runs), len(lines)))
	}
	return errs
}

// firstOf returns the first n errors, and how many more there are.
func firstOf(errs []error, n int) []error {
	if len(errs) <= n {
		return errs
	}
	return append(errs[:n:n], fmt.Errorf("and %d more", len(errs)-n))
}

// webhookDefinition is webhook.yaml, its handler appending to out.
func webhookDefinition(out string) (*definition.Definition, error) {
	data, err := workloads.ReadFile(webhookWorkload)
	if err != nil {
		return nil, err
	}
	data = bytes.ReplaceAll(data, []byte(webhookOutMarker), []byte(out))
	srcs, err := definition.Load(webhookWorkload, data)
	if err != nil {
		return nil, err
	}
	return definition.Compile(srcs[0])
}

// engineLogOnce sets the log of the engines this process runs, once: a
// file in the first bench's work directory.
var (
	engineLogOnce sync.Once
	engineLogPath string
)

// engineLog returns the path of the log of the engines run in this
// process.
func (b *bench) engineLog() string {
	engineLogOnce.Do(func() {
		engineLogPath = filepath.Join(b.workDir, "engine.log")
		f, err := os.Create(engineLogPath)
		if err != nil {
			engineLogPath = "none: " + err.Error()
			return
		}
		ctrllog.SetLogger(zap.New(zap.WriteTo(f), zap.Level(zapcore.InfoLevel)))
	})
	return engineLogPath
}

// putSecret creates or replaces a Secret of the namespace.
func (c *cluster) putSecret(ctx context.Context, name string, data map[string][]byte) error {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: c.ns, Name: name}, Data: data}
	_, err := c.cs.CoreV1().Secrets(c.ns).Create(ctx, s, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		_, err = c.cs.CoreV1().Secrets(c.ns).Update(ctx, s, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("writing Secret %s/%s: %w", c.ns, name, err)
	}
	return nil
}

// guid returns a random id shaped as GitHub's delivery ids.
func guid() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	h := hex.EncodeToString(b)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// githubPayload is the body of an issue_comment delivery, about 7 KiB, of
// the shape and size of GitHub's: the comment, its issue, the repository
// with its API URLs, the sender.
func githubPayload(i int, id string) []byte {
	const api = "https://api.github.com/repos/opkit-dev/bench"
	user := map[string]any{
		"login": "octocat", "id": 583231, "node_id": "MDQ6VXNlcjU4MzIzMQ==", "type": "User", "site_admin": false,
		"avatar_url": "https://avatars.githubusercontent.com/u/583231?v=4", "url": "https://api.github.com/users/octocat",
		"html_url": "https://github.com/octocat", "followers_url": "https://api.github.com/users/octocat/followers",
		"repos_url": "https://api.github.com/users/octocat/repos", "events_url": "https://api.github.com/users/octocat/events{/privacy}",
	}
	repo := map[string]any{
		"id": 1296269, "node_id": "MDEwOlJlcG9zaXRvcnkxMjk2MjY5", "name": "bench", "full_name": "opkit-dev/bench",
		"private": false, "owner": user, "html_url": "https://github.com/opkit-dev/bench", "description": "opkit's benchmark repository",
		"fork": false, "url": api, "default_branch": "main", "visibility": "public", "stargazers_count": 80, "watchers_count": 80,
		"open_issues_count": 12, "forks_count": 9, "language": "Go", "created_at": "2024-01-26T19:01:12Z", "pushed_at": "2026-11-20T09:14:03Z",
	}
	for _, k := range []string{"archive", "assignees", "blobs", "branches", "collaborators", "comments", "commits", "compare",
		"contents", "contributors", "deployments", "downloads", "events", "forks", "git_commits", "git_refs", "git_tags", "hooks",
		"issue_comment", "issue_events", "issues", "keys", "labels", "languages", "merges", "milestones", "notifications", "pulls",
		"releases", "stargazers", "statuses", "subscribers", "subscription", "tags", "teams", "trees"} {
		repo[k+"_url"] = api + "/" + k
	}
	issue := map[string]any{
		"id": 1902337 + i, "number": 1347, "title": "Found a bug", "state": "open", "locked": false, "user": user,
		"url": api + "/issues/1347", "html_url": "https://github.com/opkit-dev/bench/issues/1347", "comments": i,
		"body":       "I'm having a problem with this. " + strings.Repeat("It happens every time the operator restarts. ", 12),
		"labels":     []map[string]any{{"id": 208045946, "name": "bug", "color": "f29513", "default": true}},
		"created_at": "2026-11-19T18:10:34Z", "updated_at": "2026-11-20T09:14:03Z", "author_association": "MEMBER",
	}
	comment := map[string]any{
		"id": 1164000000 + i, "node_id": "IC_kwDOBench" + id[:8], "user": user, "author_association": "MEMBER",
		"url": fmt.Sprintf("%s/issues/comments/%d", api, 1164000000+i), "html_url": fmt.Sprintf("https://github.com/opkit-dev/bench/issues/1347#issuecomment-%d", 1164000000+i),
		"body": fmt.Sprintf("/deploy %07x please; delivery %s", i, id), "created_at": "2026-11-20T09:14:03Z", "updated_at": "2026-11-20T09:14:03Z",
	}
	body, _ := json.Marshal(map[string]any{"action": "created", "issue": issue, "comment": comment, "repository": repo, "sender": user})
	return body
}
