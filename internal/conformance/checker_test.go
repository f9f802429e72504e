package conformance_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/twmb/franz-go/pkg/kgo"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/conformance"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
	"github.com/opkit-dev/opkit/internal/source/kafkasrc/kafkatest"
	"github.com/opkit-dev/opkit/internal/source/natsjs/natstest"
	"github.com/opkit-dev/opkit/internal/tracing/tracingtest"
)

// checker plays one case against a real engine on the plane, in a
// namespace of its own, and gathers what it saw.
type checker struct {
	t    testing.TB
	env  *clustertest.Env
	c    conformance.Case
	dir  string
	ns   string
	bin  string
	kube string

	proc    *exec.Cmd
	waited  chan struct{}
	procLog *os.File
	// starts maps each engine process's pid to its start, from 1.
	starts map[int]int
	store  *archive.SQLite
	// uids maps each object's uid to its life, from 1.
	uids    map[string]int
	lives   []types.UID
	changes int
	// blocked counts the held runs the checker has acted on.
	blocked int
	// decisionSince is when quiet first saw a decision waiting.
	decisionSince time.Time
	// gen is the generation the engine must have seen of a watched
	// object before the step is done (its archive record's count of
	// changes, the watch's observedGeneration); 0 for none.
	gen int64
	// engineLog gathers what failed engine processes said.
	engineLog string
	// hooks is the engine's hooks listener's address; payloads the body
	// of each delivery posted, by number; answers the statuses of the
	// posts, in order; ceposts the count of posts of each CloudEvent, by
	// number.
	hooks    string
	payloads map[int][]byte
	answers  []int
	ceposts  map[int]int
	// nats is a NATS source's server, kafka a Kafka source's cluster,
	// the case's own (nil for another source or none), and published
	// the count of messages published to its stream or records produced
	// to its topic.
	nats      *natstest.Server
	kafka     *kafkatest.Cluster
	published int
	// redeliveries are the Redelivery objects the checker created, in
	// order: the model's redeliveries, numbered from 1.
	redeliveries []string
	// otlp is the case's OTLP receiver, which its engines export their
	// spans to over gRPC: tracing is on in every case.
	otlp *tracingtest.Receiver
}

// Check plays c against the engine and compares what happened with the
// model; it returns the promises broken, and a transcript for a report.
func Check(t testing.TB, env *clustertest.Env, c conformance.Case) ([]conformance.Violation, string) {
	t.Helper()
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if c.Def.Cluster {
		// An Operator in the cluster, and the CRD it owns, are of one
		// name in the whole cluster: the case takes a slot of names no
		// other case playing now has.
		c.Def.Slot = clusterSlots.take()
		defer clusterSlots.give(c.Def.Slot)
	}
	ch := &checker{
		t: t, env: env, c: c, bin: bin, kube: clustertest.Cluster(t).KubeconfigPath(),
		dir: filepath.Join(t.TempDir(), "case"), starts: map[int]int{}, uids: map[string]int{}, payloads: map[int][]byte{}, ceposts: map[int]int{},
		ns: "conf-" + rand.String(8), otlp: tracingtest.Start(t),
	}
	if err := os.MkdirAll(ch.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	brokerURL := ""
	switch {
	case c.Def.Source != nil && c.Def.Source.Kind == conformance.Kafka:
		// The case's own cluster and topic, of one partition: delivery n
		// is its record at offset n-1, <topic>:0:<n-1>.
		ch.kafka = kafkatest.Start(t, kafkatest.Options{Topics: []string{conformance.KafkaTopic}, Partitions: 1})
		brokerURL = ch.kafka.Addrs()[0]
	case c.Def.Source != nil && c.Def.Source.Kind == conformance.NATS:
		// The case's own JetStream server and stream: delivery n is its
		// n-th message, <stream>:<n>.
		ch.nats = natstest.Start(t, natstest.Options{Stream: conformance.NATSStream, Subjects: []string{conformance.NATSSubject}})
		brokerURL = ch.nats.URL()
	}
	def := conformance.Operator(&c.Def, ch.ns, brokerURL, []string{clustertest.HandlerBinary(t), ch.dir}, []string{recorderEnv + "=1"})
	if err := os.WriteFile(filepath.Join(ch.dir, "operator.yaml"), []byte(def), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.WithoutCancel(t.Context())
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ch.ns}}); err != nil {
		t.Fatal(err)
	}
	defer ch.cleanUp()
	if c.Def.Cluster {
		ch.createOperator(def)
	}
	if c.Def.Source != nil && !c.Def.Source.Consumed() {
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ch.ns, Name: conformance.HookSecret}, StringData: map[string]string{"token": conformance.HookToken}}
		if err := env.Client.Create(ctx, secret); err != nil {
			t.Fatal(err)
		}
	}
	ch.start()
	for i, s := range c.History {
		held := i+1 < len(c.History) && c.History[i+1].Op == conformance.OpCrash
		if held {
			// The run of the handler it names, if it names one.
			ch.writeFile("block", c.History[i+1].Handler)
		}
		ch.apply(s)
		switch {
		case ch.proc == nil:
			// Stopped: the next start does it all.
		case held:
			ch.waitBlockedOrQuiet(i)
			ch.stop(true)
		default:
			ch.waitQuiet(i)
		}
		if (s.Op == conformance.OpDeliver || s.Op == conformance.OpRedeliver) && c.Def.Source.Object && ch.proc != nil {
			ch.adopt()
		}
	}
	obs := ch.observe()
	want := conformance.Expect(c)
	return conformance.Compare(&c.Def, want, obs), ch.transcript(want, obs)
}

func (ch *checker) apply(s conformance.Step) {
	t := ch.t
	ctx := context.WithoutCancel(t.Context())
	def := &ch.c.Def
	switch s.Op {
	case conformance.OpCreate:
		obj := &unstructured.Unstructured{Object: def.Object()}
		obj.SetNamespace(ch.ns)
		clustertest.Eventually(t, time.Minute, "create the object (its kind served)", func(ctx context.Context) (bool, error) {
			err := ch.env.Client.Create(ctx, obj)
			return err == nil, nil
		})
		ch.lives = append(ch.lives, obj.GetUID())
		ch.uids[string(obj.GetUID())] = len(ch.lives)
	case conformance.OpChange:
		ch.changes++
		ch.patch(def.ChangePatch(s.Field, strconv.Itoa(ch.changes)))
	case conformance.OpTouch:
		ch.patch(map[string]any{"metadata": map[string]any{"annotations": map[string]any{conformance.TouchAnnotation: time.Now().Format(time.RFC3339Nano)}}})
	case conformance.OpRetry:
		ch.patch(map[string]any{"metadata": map[string]any{"annotations": map[string]any{v1alpha1.RetryAnnotation: time.Now().Format(time.RFC3339Nano)}}})
	case conformance.OpPause, conformance.OpResume:
		ch.patch(map[string]any{"metadata": map[string]any{"annotations": conformance.PauseAnnotations(s.Op)}})
	case conformance.OpPauseOperator, conformance.OpResumeOperator:
		// As opkit pause --operator OP --all and opkit resume do, with
		// the object's pause's annotations.
		op := map[conformance.Op]conformance.Op{conformance.OpPauseOperator: conformance.OpPause, conformance.OpResumeOperator: conformance.OpResume}[s.Op]
		data, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": conformance.PauseAnnotations(op)}})
		if err := ch.env.Client.Patch(ctx, &v1alpha1.Operator{ObjectMeta: metav1.ObjectMeta{Name: def.OperatorName()}}, client.RawPatch(types.MergePatchType, data)); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	case conformance.OpDelete:
		if err := ch.env.Client.Delete(ctx, ch.object()); err != nil {
			t.Fatalf("delete: %v", err)
		}
	case conformance.OpDecide:
		obj := ch.object()
		if err := ch.env.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			t.Fatal(err)
		}
		// The visit a person sees, as opkit decide writes it.
		name, _, _ := unstructured.NestedString(obj.Object, "status", "state", "name")
		seq, _, _ := unstructured.NestedInt64(obj.Object, "status", "state", "seq")
		d, _ := json.Marshal(v1alpha1.Decision{State: name, Seq: seq, Choose: s.Choice, Reason: "the conformance check decides", By: "conformance", At: time.Now().UTC().Format(time.RFC3339)})
		ch.patch(map[string]any{"metadata": map[string]any{"annotations": map[string]any{v1alpha1.DecisionAnnotation: string(d)}}})
	case conformance.OpStop:
		ch.stop(s.Kill)
	case conformance.OpStart, conformance.OpCrash:
		ch.start()
	case conformance.OpDeliver, conformance.OpDeliverAgain:
		ch.deliver(s)
	case conformance.OpRerun:
		ch.rerun(s)
	case conformance.OpRedeliver:
		ch.redeliver(s)
	default:
		t.Fatalf("the checker cannot play %s yet", s)
	}
}

// rerun writes a re-run request for the newest create or update run of
// the step's handler for the object, as opkit rerun does: the annotation
// over the resourceVersion read.
func (ch *checker) rerun(s conformance.Step) {
	t := ch.t
	ctx := context.WithoutCancel(t.Context())
	runs, err := archive.ListAll(ctx, ch.store, archive.Query{UID: string(ch.lives[len(ch.lives)-1]), Handler: s.Handler})
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(runs, func(r archive.Run) bool { return r.Trigger == v1alpha1.OnCreate || r.Trigger == v1alpha1.OnUpdate })
	if i < 0 {
		// A shrunk history may ask for a run it no longer makes: the
		// model asks for nothing then.
		t.Logf("%s: the archive has no create or update run of %s for the object: nothing asked", s, s.Handler)
		return
	}
	obj := ch.object()
	if err := ch.env.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	req := v1alpha1.Rerun{Request: archive.NewID(now), Run: runs[i].ID, SameInput: s.SameInput, Reason: "the conformance check asks", By: "conformance", At: now.Format(time.RFC3339)}
	if err := ch.env.Client.Patch(ctx, obj, client.RawPatch(types.MergePatchType, req.Patch(obj.GetResourceVersion()))); err != nil {
		t.Fatalf("%s: %v", s, err)
	}
}

// redeliver asks for the sender's delivery of the step to be handled
// again, as opkit events redeliver does: a Redelivery naming its record
// in the archive, in the case's namespace, which the engine answers once
// (the next start, when none runs).
func (ch *checker) redeliver(s conformance.Step) {
	t := ch.t
	ctx := context.WithoutCancel(t.Context())
	ds, err := ch.deliveries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	id := ch.c.Def.SourceDeliveryID(s.Delivery)
	i := slices.IndexFunc(ds, func(d archive.Delivery) bool {
		return d.DeliveryID == id && d.RedeliveryOf == "" && d.Outcome != archive.DeliveryRefused
	})
	if i < 0 {
		t.Fatalf("%s: the archive has no accepted record of %s", s, id)
	}
	u := v1alpha1.NewRedelivery(ch.ns, v1alpha1.RedeliverySpec{Delivery: ds[i].ID, By: "conformance", Reason: "the conformance check asks"})
	clustertest.Eventually(t, time.Minute, "create a Redelivery (its kind served)", func(ctx context.Context) (bool, error) {
		return ch.env.Client.Create(ctx, u) == nil, nil
	})
	ch.redeliveries = append(ch.redeliveries, u.GetName())
}

// redeliveryAnswers are the engine's answers to the Redeliveries, in the
// order they were created: status.outcome, with the reason of a refusal;
// "" for one not answered. records maps the id of each redelivery
// accepted to its number.
func (ch *checker) redeliveryAnswers(ctx context.Context) (answers []string, records map[string]int, err error) {
	records = map[string]int{}
	for k, name := range ch.redeliveries {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(v1alpha1.SchemeGroupVersion.WithKind(v1alpha1.RedeliveryKind))
		if err := ch.env.Client.Get(ctx, client.ObjectKey{Namespace: ch.ns, Name: name}, u); err != nil {
			return nil, nil, err
		}
		_, st, err := v1alpha1.ReadRedelivery(u)
		if err != nil {
			return nil, nil, err
		}
		answer := st.Outcome
		if st.Reason != "" {
			answer += ": " + st.Reason
		}
		answers = append(answers, answer)
		if st.Redelivery != "" {
			records[st.Redelivery] = k + 1
		}
	}
	return answers, records, nil
}

// deliver posts a delivery to a webhook source, as its sender would: a new
// one with its payload, or one posted before, again, the same body and
// id; or publishes it to a NATS source's stream, whether an engine runs
// or not.
func (ch *checker) deliver(s conformance.Step) {
	t := ch.t
	body := ch.payloads[s.Delivery]
	if s.Op == conformance.OpDeliver {
		a := ""
		if ch.c.Def.Source.Object {
			ch.changes++
			a = strconv.Itoa(ch.changes)
		}
		body, _ = json.Marshal(conformance.DeliveryPayload(s.Delivery, a))
		ch.payloads[s.Delivery] = body
	}
	if ch.kafka != nil {
		rec := ch.kafka.Produce(&kgo.Record{Topic: conformance.KafkaTopic, Partition: 0, Value: body,
			Headers: []kgo.RecordHeader{{Key: "traceparent", Value: []byte(conformance.SenderTraceparent(s.Delivery))}}})[0]
		ch.published++
		if rec.Offset != int64(s.Delivery-1) {
			t.Fatalf("%s was produced at offset %d: the model names it %s", s, rec.Offset, ch.c.Def.SourceDeliveryID(s.Delivery))
		}
		return
	}
	if ch.nats != nil {
		seqs := ch.nats.PublishMsgs(&nats.Msg{Subject: conformance.NATSSubject, Data: body,
			Header: nats.Header{"traceparent": {conformance.SenderTraceparent(s.Delivery)}}})
		ch.published++
		if seqs[0] != uint64(s.Delivery) {
			t.Fatalf("%s was published as the stream's message %d: the model names it %s", s, seqs[0], ch.c.Def.SourceDeliveryID(s.Delivery))
		}
		return
	}
	if ch.proc == nil {
		return // no engine listens: the sender gets no answer (not drawn)
	}
	url := "http://" + ch.hooks + "/hooks/" + ch.c.Def.OperatorName() + "/" + conformance.SourceName
	req, err := http.NewRequestWithContext(context.WithoutCancel(t.Context()), http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+conformance.HookToken)
	if ch.c.Def.Source.Kind == conformance.CloudEvents {
		ch.cloudEvent(req, s.Delivery, body)
	} else {
		req.Header.Set(conformance.DeliveryHeader, conformance.DeliveryID(s.Delivery))
		req.Header.Set("traceparent", conformance.SenderTraceparent(s.Delivery))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("posting %s: %v", s, err)
	}
	answer, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	ch.answers = append(ch.answers, resp.StatusCode)
	if resp.StatusCode != http.StatusAccepted && resp.StatusCode != http.StatusConflict {
		t.Logf("%s: answered %d %s", s, resp.StatusCode, answer)
	}
}

// cloudEvent makes req the CloudEvent of delivery n, its data body: in the
// binary mode or the structured one, by turns for each post of it (a
// delivery's first post takes its number's turn), so that a replay comes
// in the other mode than the post it repeats.
func (ch *checker) cloudEvent(req *http.Request, n int, body []byte) {
	ch.ceposts[n]++
	if (n+ch.ceposts[n])%2 == 0 {
		req.Header.Set("ce-specversion", "1.0")
		req.Header.Set("ce-id", conformance.DeliveryID(n))
		req.Header.Set("ce-source", conformance.CloudEventsSource)
		req.Header.Set("ce-type", conformance.CloudEventsType)
		req.Header.Set("ce-traceparent", conformance.SenderTraceparent(n)) // the extension
		return
	}
	event, err := json.Marshal(map[string]any{
		"specversion": "1.0", "id": conformance.DeliveryID(n), "source": conformance.CloudEventsSource,
		"type": conformance.CloudEventsType, "datacontenttype": "application/json", "data": json.RawMessage(body),
		"traceparent": conformance.SenderTraceparent(n),
	})
	if err != nil {
		ch.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/cloudevents+json")
	req.Body, req.ContentLength = io.NopCloser(bytes.NewReader(event)), int64(len(event))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(event)), nil }
}

// adopt counts the object the source's object template created, if it is
// a new life of it.
func (ch *checker) adopt() {
	obj := ch.object()
	if err := ch.env.Client.Get(context.WithoutCancel(ch.t.Context()), client.ObjectKeyFromObject(obj), obj); err != nil {
		if !apierrors.IsNotFound(err) {
			ch.t.Fatal(err)
		}
		return
	}
	if _, known := ch.uids[string(obj.GetUID())]; !known {
		ch.lives = append(ch.lives, obj.GetUID())
		ch.uids[string(obj.GetUID())] = len(ch.lives)
	}
}

// object is a reference to the history's object.
func (ch *checker) object() *unstructured.Unstructured {
	obj := &unstructured.Unstructured{}
	obj.SetAPIVersion(ch.c.Def.APIVersion())
	obj.SetKind(ch.c.Def.ObjectKind())
	obj.SetNamespace(ch.ns)
	obj.SetName(conformance.ObjectName)
	return obj
}

func (ch *checker) patch(p map[string]any) {
	data, err := json.Marshal(p)
	if err != nil {
		ch.t.Fatal(err)
	}
	if err := ch.env.Client.Patch(context.WithoutCancel(ch.t.Context()), ch.object(), client.RawPatch(types.MergePatchType, data)); err != nil {
		ch.t.Fatalf("patch %v: %v", p, err)
	}
}

// clusterSlots are the slots of names (Def.Slot) of the cases whose
// Operator is in the cluster (Def.Cluster) playing now. A case takes the
// lowest free slot, so that a few CRDs serve a whole soak, and gives it
// back once its Operator is deleted.
var clusterSlots slots

type slots struct {
	mu    sync.Mutex
	taken []bool
}

func (s *slots) take() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, taken := range s.taken {
		if !taken {
			s.taken[i] = true
			return i
		}
	}
	s.taken = append(s.taken, true)
	return len(s.taken) - 1
}

func (s *slots) give(i int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.taken[i] = false
}

// createOperator creates the case's Operator in the cluster from its
// rendered definition, labelled with the case's namespace, which its
// engines' selector matches (opkit run --selector); the CRD of Operators
// first, as opkit run installs it.
func (ch *checker) createOperator(def string) {
	t := ch.t
	ctx := context.WithoutCancel(t.Context())
	if err := ch.env.Client.Create(ctx, v1alpha1.CustomResourceDefinition()); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	srcs, err := definition.Load("operator.yaml", []byte(def))
	if err != nil {
		t.Fatal(err)
	}
	op := srcs[0].Operator.DeepCopy()
	op.Labels = map[string]string{caseLabel: ch.ns}
	clustertest.Eventually(t, time.Minute, "create the case's Operator (its kind served)", func(ctx context.Context) (bool, error) {
		return ch.env.Client.Create(ctx, op.DeepCopy()) == nil, nil
	})
}

func (ch *checker) writeFile(name, content string) {
	if err := os.WriteFile(filepath.Join(ch.dir, name), []byte(content), 0o644); err != nil {
		ch.t.Fatal(err)
	}
}

// start starts an engine process and waits until it applied the
// definition.
func (ch *checker) start() {
	t := ch.t
	if ch.procLog == nil {
		f, err := os.Create(filepath.Join(ch.dir, "engine.log"))
		if err != nil {
			t.Fatal(err)
		}
		ch.procLog = f
	}
	cmd := exec.Command(ch.bin)
	// A case's first engine waits or not by its history's length, so that
	// both ways are checked in cases without a restart too; its next
	// engines take turns.
	runWait := "-1ns" // never waits
	if (len(ch.c.History)+len(ch.starts))%2 == 1 {
		runWait = "5s" // waits for the end of every run but a held or slow one
	}
	cmd.Env = append(os.Environ(), engineEnv+"="+ch.dir, namespaceEnv+"="+ch.ns, "KUBECONFIG="+ch.kube, runWaitEnv+"="+runWait,
		// Tracing on, as opkit run's environment turns it on: the model's
		// promises about traces hold with it (docs/observability.md).
		"OTEL_EXPORTER_OTLP_ENDPOINT=http://"+ch.otlp.GRPCAddr, "OTEL_EXPORTER_OTLP_PROTOCOL=grpc", "OTEL_BSP_SCHEDULE_DELAY=100")
	if ch.c.Def.Cluster {
		cmd.Env = append(cmd.Env, clusterEnv+"=1")
	}
	cmd.Stdout, cmd.Stderr = ch.procLog, ch.procLog
	// The engine process ends with the test's, also when the test is
	// killed (make soak stopped with Ctrl-C, a CI timeout).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ch.proc, ch.waited = cmd, make(chan struct{})
	go func(waited chan struct{}) { _ = cmd.Wait(); close(waited) }(ch.waited)
	ch.starts[cmd.Process.Pid] = len(ch.starts) + 1
	ready := filepath.Join(ch.dir, "ready."+strconv.Itoa(cmd.Process.Pid))
	applied := false
	defer func() {
		if !applied { // Eventually failed the test: say what the engine did meanwhile
			t.Logf("the engine process's log ends:\n%s", engineLogTail(ch.dir))
		}
	}()
	clustertest.Eventually(t, 2*time.Minute, "the engine process applies the definition", func(context.Context) (bool, error) {
		select {
		case <-ch.waited:
			return false, fmt.Errorf("the engine process ended: %s", engineLogTail(ch.dir))
		default:
		}
		addr, err := os.ReadFile(ready)
		ch.hooks = string(addr)
		return err == nil, nil
	})
	applied = true
	if ch.store == nil {
		store, err := archive.OpenSQLite(context.WithoutCancel(t.Context()), filepath.Join(ch.dir, "runs.db"), archive.Options{})
		if err != nil {
			t.Fatal(err)
		}
		ch.store = store
	}
}

// stop stops the engine process: SIGTERM and wait, or SIGKILL.
func (ch *checker) stop(kill bool) {
	if ch.proc == nil {
		return
	}
	sig := syscall.SIGTERM
	if kill {
		sig = syscall.SIGKILL
	}
	_ = ch.proc.Process.Signal(sig)
	select {
	case <-ch.waited:
	case <-time.After(clustertest.Scaled(time.Minute)):
		_ = ch.proc.Process.Kill()
		<-ch.waited
		ch.t.Errorf("the engine did not stop within %s of %v", clustertest.Scaled(time.Minute), sig)
	}
	if st := ch.proc.ProcessState; !kill && st != nil && !st.Success() {
		ch.engineLog += fmt.Sprintf("the engine process exited %v after SIGTERM\n", st)
	}
	ch.proc = nil
}

// quiet describes what the engine has done, as far as the archive and
// the object show, once nothing is in flight: no run running or waiting
// for its retry, the object's observedGeneration caught up and no retry
// or decision annotation left; "" and what is in flight while something
// is. The description
// ends with "short" while fewer attempts finished than the model
// expects: the model's count only makes the wait end sooner when it is
// reached (a run missing is then waited for a while, and shows in the
// comparison).
func (ch *checker) quiet(ctx context.Context, want int) (state, busy string, err error) {
	runs, err := archive.ListAll(ctx, ch.store, archive.Query{})
	if err != nil {
		return "", "", err
	}
	last := map[string]archive.Run{}
	finished := 0
	for i := len(runs) - 1; i >= 0; i-- { // oldest first
		r := runs[i]
		if r.Handler == v1alpha1.PauseHandler {
			finished++ // a pause or resume recorded, which the model counts too (attempts)
			continue
		}
		if r.Handler == v1alpha1.RetryHandler {
			continue // the record of a retry asked for: not a run
		}
		last[r.Key] = r
		switch r.Outcome {
		case archive.Running:
			return "", "a run of " + r.Key + " running", nil
		case archive.Succeeded, archive.Failed, archive.GaveUp:
			finished++
		}
	}
	for _, r := range last {
		// A failed run's retry comes at its nextRetryAt; one long overdue
		// is not coming (the comparison says so).
		if r.Outcome == archive.Failed && time.Since(r.NextRetryAt) < 5*time.Second {
			return "", "a failed run of " + r.Key + " waiting for its retry", nil
		}
	}
	short := finished < want
	if ch.c.Def.Source != nil {
		// A delivery accepted and not handled yet (its handling is in
		// no run between a handler's end and the next's start).
		pending, err := ch.store.PendingDeliveries(ctx, ch.c.Def.OperatorName())
		if err != nil || len(pending) > 0 {
			return "", fmt.Sprintf("%d deliveries pending", len(pending)), err
		}
	}
	if len(ch.redeliveries) > 0 {
		// A Redelivery not answered yet: its record is not made.
		answers, _, err := ch.redeliveryAnswers(ctx)
		if err != nil || slices.Contains(answers, "") {
			return "", "a Redelivery not answered", err
		}
	}
	if ch.nats != nil || ch.kafka != nil {
		// A message published and not recorded yet: the consumer has
		// not fetched it. (A redelivery's record is not the sender's.)
		ds, err := ch.deliveries(ctx)
		recorded := 0
		for _, d := range ds {
			if d.RedeliveryOf == "" {
				recorded++
			}
		}
		if err != nil || recorded < ch.published {
			return "", fmt.Sprintf("%d of %d messages recorded", recorded, ch.published), err
		}
	}
	opPaused := false
	if ch.c.Def.Cluster {
		op := &v1alpha1.Operator{}
		if err := ch.env.Client.Get(ctx, client.ObjectKey{Name: ch.c.Def.OperatorName()}, op); err != nil {
			return "", "", err
		}
		// The engine removes the record of a resume once it handed it
		// over, but not while the Operator is paused again: opkit pause
		// leaves the record of the resume before it, for the next.
		_, opPaused = op.Annotations[v1alpha1.PauseAnnotation]
		if _, resumed := op.Annotations[v1alpha1.ResumedAnnotation]; resumed && !opPaused {
			return "", "the Operator's resume not handed over", nil
		}
	}
	obj := ch.object()
	err = ch.env.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj)
	if err != nil && !apierrors.IsNotFound(err) {
		return "", "", err
	}
	state = fmt.Sprintf("%d runs", len(runs))
	if err == nil && ch.gen > 0 {
		seen, err := ch.watchedGeneration(ctx)
		if err != nil || seen < ch.gen {
			return "", fmt.Sprintf("the engine recorded change %d of %d", seen, ch.gen), err
		}
	}
	if err == nil {
		if _, retry := obj.GetAnnotations()[v1alpha1.RetryAnnotation]; retry && ch.c.Def.Kind == conformance.CustomResource {
			return "", "the retry annotation not taken", nil
		}
		if _, resumed := obj.GetAnnotations()[v1alpha1.ResumedAnnotation]; resumed && ch.c.Def.Kind == conformance.CustomResource {
			return "", "the resume annotation not taken", nil // the engine removes it once it recorded the resume
		}
		if _, rerun := obj.GetAnnotations()[v1alpha1.RerunAnnotation]; rerun && ch.c.Def.Kind == conformance.CustomResource && obj.GetDeletionTimestamp() == nil {
			// A re-run waits while the object or its whole operator is
			// paused.
			if _, paused := obj.GetAnnotations()[v1alpha1.PauseAnnotation]; !paused && !opPaused {
				return "", "the rerun annotation not taken", nil // the engine removes it once it took it
			}
		}
		if _, waits := obj.GetAnnotations()[v1alpha1.DecisionAnnotation]; waits {
			// Taken or refused at once: give it a few seconds, then the
			// comparison says it waited.
			if ch.decisionSince.IsZero() {
				ch.decisionSince = time.Now()
			}
			if time.Since(ch.decisionSince) < 10*time.Second {
				return "", "a decision asked for less than 10 s ago", nil
			}
		} else {
			ch.decisionSince = time.Time{}
		}
		// A deleting object's generation was raised by its deletion, which
		// the finalizer does not write as observed: its delete handlers'
		// runs say where it is.
		if ch.c.Def.Kind == conformance.CustomResource && obj.GetDeletionTimestamp() == nil {
			observed, _, _ := unstructured.NestedInt64(obj.Object, "status", "observedGeneration")
			if observed != obj.GetGeneration() {
				return "", fmt.Sprintf("status.observedGeneration %d of generation %d", observed, obj.GetGeneration()), nil
			}
		}
		state += " rv " + obj.GetResourceVersion()
	}
	info, _ := os.Stat(filepath.Join(ch.dir, "records.jsonl"))
	if info != nil {
		state += fmt.Sprintf(" records %d", info.Size())
	}
	if short {
		state += " short"
	}
	return state, "", nil
}

// watchedGeneration is the count of changes of the watched object the
// engine recorded in the archive (its record's state.observed: the run
// archive is where a watched object's state is), 0 before any.
func (ch *checker) watchedGeneration(ctx context.Context) (int64, error) {
	states, err := ch.store.HandlerRecords(ctx, ch.c.Def.OperatorName())
	if err != nil {
		return 0, err
	}
	if len(ch.lives) == 0 {
		return 0, nil
	}
	uid := string(ch.lives[len(ch.lives)-1])
	for _, st := range states {
		var data struct {
			State struct {
				Observed struct {
					Generation int64 `json:"generation"`
				} `json:"observed"`
			} `json:"state"`
		}
		if st.Key == uid && json.Unmarshal(st.Data, &data) == nil {
			return data.State.Observed.Generation, nil
		}
	}
	return 0, nil
}

// waitQuiet waits until quiet holds, unchanged, for a second, after the
// history's step i; or gives up after a time-out (the comparison then
// says what is missing).
func (ch *checker) waitQuiet(i int) {
	e := conformance.Expect(conformance.Case{Def: ch.c.Def, History: ch.c.History[:i+1]})
	ch.gen = 0
	if n := len(e.Ends); n > 0 && e.Ends[n-1].Exists && !e.Ends[n-1].Waits && ch.c.Def.Kind == conformance.Watch {
		ch.gen = e.Ends[n-1].Gen
	}
	ch.waitFor(func(ctx context.Context) (bool, error) { return false, nil }, attempts(e))
}

// waitBlockedOrQuiet waits until a run is held by the block file, or
// everything is quiet (the step caused no run: the block is taken away).
func (ch *checker) waitBlockedOrQuiet(i int) {
	blocked := func(context.Context) (bool, error) {
		_, err := os.Stat(filepath.Join(ch.dir, "block.taken"))
		return err == nil && ch.hasBlockedRecord(), nil
	}
	want := attempts(conformance.Expect(conformance.Case{Def: ch.c.Def, History: ch.c.History[:i+1]}))
	if !ch.waitFor(blocked, want) {
		_ = os.Remove(filepath.Join(ch.dir, "block"))
		// The recorder may have taken it since.
		if ok, _ := blocked(context.Background()); ok {
			return
		}
	}
	_ = os.Remove(filepath.Join(ch.dir, "block.taken"))
}

// hasBlockedRecord reports whether a run was held since the last one the
// checker acted on, and counts it as acted on.
func (ch *checker) hasBlockedRecord() bool {
	n := 0
	for _, r := range readRecords(filepath.Join(ch.dir, "records.jsonl")) {
		if r.Blocked {
			n++
		}
	}
	if n > ch.blocked {
		ch.blocked = n
		return true
	}
	return false
}

// waitFor waits until done holds (true) or quiet holds unchanged for a
// second (false), at most a minute.
func (ch *checker) waitFor(done func(context.Context) (bool, error), want int) bool {
	ctx := context.WithoutCancel(ch.t.Context())
	deadline := time.Now().Add(clustertest.Scaled(time.Minute))
	var stable, busy string
	var since time.Time
	for time.Now().Before(deadline) {
		if ok, err := done(ctx); err != nil {
			ch.t.Fatal(err)
		} else if ok {
			return true
		}
		state, why, err := ch.quiet(ctx, want)
		if err != nil {
			ch.t.Fatal(err)
		}
		if state == "" {
			busy = why
		}
		settle := time.Second
		if strings.HasSuffix(state, " short") {
			settle = 10 * time.Second
		}
		switch {
		case state == "":
			stable = ""
		case state != stable:
			stable, since = state, time.Now()
		case time.Since(since) >= settle:
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
	ch.t.Logf("the engine was not quiet within %s (last: %s): the comparison says what is missing", clustertest.Scaled(time.Minute), busy)
	return false
}

// attempts is the number of attempts the model expects in all.
func attempts(e *conformance.Expectation) int {
	n := 0
	for _, r := range e.Runs {
		n += len(r.Outcomes)
	}
	for _, end := range e.Ends {
		n += end.Pauses + end.Resumes
	}
	return n
}

// observe gathers what happened: the objects, then (the engine stopped)
// the archive and the records.
func (ch *checker) observe() *conformance.Observed {
	ctx := context.WithoutCancel(ch.t.Context())
	obs := &conformance.Observed{Traced: true} // start turns tracing on
	obj := ch.object()
	err := ch.env.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj)
	if err != nil && !apierrors.IsNotFound(err) {
		ch.t.Fatal(err)
	}
	for i, uid := range ch.lives {
		end := conformance.End{Life: i + 1}
		if err == nil && obj.GetUID() == uid {
			end.Exists = true
			count, _, _ := unstructured.NestedInt64(obj.Object, "status", "count")
			end.Count = int(count)
			end.State, _, _ = unstructured.NestedString(obj.Object, "status", "state", "name")
			end.Decision = obj.GetAnnotations()[v1alpha1.DecisionAnnotation]
			root := "spec"
			if ch.c.Def.Kind == conformance.Watch {
				root = "data"
				end.Written = untouched(obj)
			}
			spec, _, _ := unstructured.NestedStringMap(obj.Object, root)
			end.Spec = spec
			events := &corev1.EventList{}
			if err := ch.env.Client.List(ctx, events, client.InNamespace(ch.ns)); err != nil {
				ch.t.Fatal(err)
			}
			for _, ev := range events.Items {
				if ev.Reason == "DecisionRefused" && ev.InvolvedObject.UID == uid {
					end.Refused = true
				}
			}
		}
		obs.Ends = append(obs.Ends, end)
	}
	ch.stop(false)
	runs, err := archive.ListAll(ctx, ch.store, archive.Query{})
	if err != nil {
		ch.t.Fatal(err)
	}
	byID := map[string]archive.Run{}
	for _, r := range runs {
		byID[r.ID] = r
		if life := ch.uids[r.UID]; r.Handler == v1alpha1.PauseHandler && life > 0 && life <= len(obs.Ends) {
			switch r.Trigger {
			case v1alpha1.TriggerPaused:
				obs.Ends[life-1].Pauses++
			case v1alpha1.TriggerResumed:
				obs.Ends[life-1].Resumes++
			}
		}
	}
	answers, redelivered, err := ch.redeliveryAnswers(ctx)
	if err != nil {
		ch.t.Fatal(err)
	}
	obs.Redeliveries = answers
	recorded := map[string]bool{}
	for _, r := range readRecords(filepath.Join(ch.dir, "records.jsonl")) {
		recorded[r.RunID] = true
		s := conformance.Seen{
			ID:  conformance.RunID{Life: ch.uids[r.UID], Handler: r.Handler, Trigger: conformance.Trigger(r.Trigger)},
			Key: r.Key, RunID: r.RunID, Attempt: r.Attempt, Interrupted: r.Blocked,
			Outcome: conformance.Outcome(byID[r.RunID].Outcome), Count: r.Count, Generation: r.Generation, Spec: r.Spec,
			State: r.State, StateSeq: r.StateSeq, Trace: byID[r.RunID].Trace, Given: r.Traceparent, Env: r.Env,
		}
		if s.ID.Trigger == conformance.Event {
			s.ID = conformance.RunID{Handler: r.Handler, Trigger: conformance.Event}
			s.ID.Delivery = ch.deliveryNumber(r.DeliveryID)
			// <operator>/event/<source>/<id>/redelivery/<its record>/<handler>
			if parts := strings.Split(r.Key, "/"); len(parts) >= 3 && parts[len(parts)-3] == "redelivery" {
				s.ID.Redelivery = redelivered[parts[len(parts)-2]]
			}
			s.Payload = r.Payload
			obs.Runs = append(obs.Runs, s)
			continue
		}
		parts := strings.Split(r.Key, "/")
		if len(parts) >= 3 {
			if parts[1] == "state" {
				s.ID.Seq, _ = strconv.ParseInt(parts[2], 10, 64)
			} else {
				s.ID.Gen, _ = strconv.ParseInt(parts[1], 10, 64)
			}
		}
		if s.ID.Trigger == conformance.Rerun && len(parts) >= 5 {
			// <uid>/<gen>/<handler>/rerun/<n>
			s.ID.Rerun, _ = strconv.Atoi(parts[len(parts)-1])
		}
		switch s.ID.Trigger {
		case conformance.Resume:
			s.ID.Start = ch.starts[r.Engine]
		case conformance.Delete:
			s.ID.Gen = 0
		}
		obs.Runs = append(obs.Runs, s)
	}
	for _, r := range runs {
		// Transitions are archived as runs too; they are not handlers'.
		if !recorded[r.ID] && r.Outcome != archive.Skipped && ch.c.Def.Handler(r.Handler) != nil {
			obs.Orphans = append(obs.Orphans, fmt.Sprintf("run %s: %s %s key %s attempt %d: %s %s", r.ID, r.Handler, r.Trigger, r.Key, r.Attempt, r.Outcome, r.Error))
		}
		if r.Trace == "" && !recorded[r.ID] && ch.c.Def.Handler(r.Handler) != nil { // a recorded one's is its execution's
			obs.Untraced = append(obs.Untraced, fmt.Sprintf("run %s: %s %s key %s attempt %d: %s", r.ID, r.Handler, r.Trigger, r.Key, r.Attempt, r.Outcome))
		}
	}
	obs.Answers = ch.answers
	if ch.c.Def.Source != nil {
		ds, err := ch.deliveries(ctx)
		if err != nil {
			ch.t.Fatal(err)
		}
		for _, d := range ds {
			obs.Deliveries = append(obs.Deliveries, conformance.SeenDelivery{
				ID: d.ID, DeliveryID: d.DeliveryID, Outcome: string(d.Outcome), Reason: d.Reason,
				RedeliveryOf: d.RedeliveryOf, Redelivery: redelivered[d.ID], Trace: d.Trace,
			})
		}
	}
	data, _ := os.ReadFile(filepath.Join(ch.dir, "engine.log"))
	obs.Engine = strings.TrimSpace(ch.engineLog + engineFailure(string(data)))
	return obs
}

// deliveries are the archive's records of the source's deliveries.
func (ch *checker) deliveries(ctx context.Context) ([]archive.Delivery, error) {
	var out []archive.Delivery
	query := archive.DeliveryQuery{Operator: ch.c.Def.OperatorName(), Limit: 1000}
	for {
		page, err := ch.store.ListDeliveries(ctx, query)
		if err != nil {
			return nil, err
		}
		out = append(out, page.Deliveries...)
		if page.Next == "" {
			return out, nil
		}
		query.Cursor = page.Next
	}
}

// deliveryNumber is the model's number of the delivery the engine
// recorded as id (Def.SourceDeliveryID); 0 for another.
func (ch *checker) deliveryNumber(id string) int {
	for n := range ch.payloads {
		if ch.c.Def.SourceDeliveryID(n) == id {
			return n
		}
	}
	return 0
}

// untouched says what of a watched object is not the checker's: a label
// or annotation it did not set, an owner reference, a finalizer, a
// status; "" when nothing is.
func untouched(obj *unstructured.Unstructured) string {
	var found []string
	for k := range obj.GetLabels() {
		if k != conformance.WatchLabel {
			found = append(found, "label "+k)
		}
	}
	for k := range obj.GetAnnotations() {
		if k != conformance.TouchAnnotation && k != v1alpha1.RetryAnnotation && k != v1alpha1.PauseAnnotation && k != v1alpha1.ResumedAnnotation && k != v1alpha1.RerunAnnotation {
			found = append(found, "annotation "+k)
		}
	}
	if refs := obj.GetOwnerReferences(); len(refs) > 0 {
		found = append(found, fmt.Sprintf("owner references %v", refs))
	}
	if fs := obj.GetFinalizers(); len(fs) > 0 {
		found = append(found, fmt.Sprintf("finalizers %v", fs))
	}
	if _, ok := obj.Object["status"]; ok {
		found = append(found, "a status")
	}
	return strings.Join(found, ", ")
}

// transcript says what the case did and saw, for a failure's report.
func (ch *checker) transcript(want *conformance.Expectation, obs *conformance.Observed) string {
	var b strings.Builder
	fmt.Fprintf(&b, "runs the model expects:\n")
	for _, r := range want.Runs {
		fmt.Fprintf(&b, "  %s: %v", r.ID(), r.Outcomes)
		if d := r.CausedBy; d != nil {
			fmt.Fprintf(&b, ", in the trace of %s (redelivery %d)", conformance.DeliveryID(d.N), d.Redelivery)
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "executions seen, in order:\n")
	for _, s := range obs.Runs {
		fmt.Fprintf(&b, "  %s key %s attempt %d: %s, saw count %d gen %d spec %v, trace %s", s.ID, s.Key, s.Attempt, s.Outcome, s.Count, s.Generation, s.Spec, conformance.TraceID(s.Trace))
		if s.Interrupted {
			b.WriteString(" (held, SIGKILLed)")
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "ends: model %+v, seen %+v\n", want.Ends, obs.Ends)
	if len(want.Deliveries) > 0 || len(obs.Deliveries) > 0 {
		fmt.Fprintf(&b, "deliveries: model")
		for _, d := range want.Deliveries {
			fmt.Fprintf(&b, " %s %s (%d replays)", conformance.DeliveryID(d.N), d.Outcome, d.Replays)
		}
		fmt.Fprintf(&b, "; archive %+v; answers: model %v, seen %v\n", obs.Deliveries, want.Answers, obs.Answers)
	}
	return b.String()
}

// cleanUp stops the engine, lets the object go and deletes the namespace.
func (ch *checker) cleanUp() {
	ch.stop(true)
	ctx := context.WithoutCancel(ch.t.Context())
	if ch.c.Def.Cluster {
		_ = ch.env.Client.Delete(ctx, &v1alpha1.Operator{ObjectMeta: metav1.ObjectMeta{Name: ch.c.Def.OperatorName()}})
	}
	obj := ch.object()
	if err := ch.env.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err == nil && len(obj.GetFinalizers()) > 0 {
		_ = ch.env.Client.Patch(ctx, obj, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
	}
	_ = ch.env.Client.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ch.ns}})
	if ch.store != nil {
		_ = ch.store.Close()
	}
	if ch.procLog != nil {
		_ = ch.procLog.Close()
	}
}

// TestThePauseAnnotationsAreOpkits: the model names opkit pause's
// annotations without importing them.
func TestThePauseAnnotationsAreOpkits(t *testing.T) {
	if conformance.PauseAnnotation != v1alpha1.PauseAnnotation || conformance.ResumedAnnotation != v1alpha1.ResumedAnnotation {
		t.Errorf("the model's pause annotations %q and %q; opkit's are %q and %q", conformance.PauseAnnotation, conformance.ResumedAnnotation, v1alpha1.PauseAnnotation, v1alpha1.ResumedAnnotation)
	}
	var p v1alpha1.Pause
	if err := json.Unmarshal([]byte(conformance.PauseAnnotations(conformance.OpPause)[v1alpha1.PauseAnnotation].(string)), &p); err != nil || p.By != "conformance" {
		t.Errorf("the model's pause %v (%v); want one by conformance", p, err)
	}
}
