// Package runners is the engine's side of exec handlers that run in an
// image (exec.image): a Pool that queues each run for the runners of its
// operator and image, and the HTTPS API those runners' agents (package
// agent) pull work from.
//
// # Flow
//
// A run is queued (Pool.Dispatch) and waits, counted, until an agent of
// its operator and image asks for work (POST PathTake, a long poll): the
// run is handed to it. The agent claims it and streams it in one request
// (POST PathRun + the hand-over ID): the engine answers the claim with the
// answer's headers (200) at once, and the agent starts the command only
// then; it streams the command's stderr, heartbeats and finally its
// outcome (one JSON Frame a line) while the answer stays open, and the
// answer's one line (an Ack) says the outcome was recorded, or why the
// command must stop. The engine answers the claim once: a hand-over taken
// back (its agent did not claim it in time) is refused (410), so a
// command never starts twice for one hand-over. Agents of an earlier
// opkit claim with POST PathStart, then stream with POST PathStream, the
// end's answer a status (204: recorded); the engine serves both, and says
// on a take's answer that it serves PathRun (ProtocolHeader), so that an
// agent uses the two requests with an engine of an earlier opkit.
//
// An agent that asks for its next run on a run's stream (NextHeader) gets
// it on the same answer: after an Ack of a recorded outcome, the engine
// waits for the agent's next run as a take waits, and writes it (a
// RunnerWork, one line) before the answer ends; none within the take's
// poll, the answer ends, and the agent takes. A run so handed is handed
// as a take hands it: the same claim, the same guarantees. One request a
// run while runs are queued, rather than two.
//
// # Guarantees
//
//   - A run handed to an agent that does not claim it within LostAfter
//     goes back to the queue: nothing started.
//   - A claimed run whose stream does not open within LostAfter, breaks,
//     or brings no frame for LostAfter (two checks in a row, so that an
//     engine stopped and resumed is not fooled by its own pause) ends as
//     *executor.Interrupted: the engine records a Cancelled attempt and
//     runs it again with its key, on whichever runner asks next. The lost
//     runner's late outcome is refused: no run ends twice.
//   - A run whose context ends while it waits leaves the queue. One whose
//     context ends while an agent runs it (its operator removed or
//     changed, the engine stopping) has its stream ended by the engine at
//     once, and an agent whose stream ends kills its command's process
//     group: nothing runs on until its timeout.
//
// # Authentication
//
// Each request carries a bearer token: a projected ServiceAccount token of
// audience Audience, checked with a TokenReview (audience included) and
// cached for a minute. The ServiceAccount must be Namespace's
// opkit-runner-OPERATOR, for the runs of OPERATOR only.
package runners

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/opkit-dev/opkit/internal/executor"
)

// The runner API's paths, audience and names (see the package doc).
const (
	PathTake   = "/runners/v1/take"
	PathRun    = "/runners/v1/run/"
	PathStart  = "/runners/v1/start/"
	PathStream = "/runners/v1/stream/"
	// Audience is the audience of a runner's token.
	Audience = "opkit.dev/runner"
	// ServiceAccountPrefix + OPERATOR is the ServiceAccount of an
	// operator's runners.
	ServiceAccountPrefix = "opkit-runner-"
	// RunnerHeader carries the runner's name (its Pod's).
	RunnerHeader = "X-Opkit-Runner"
	// ProtocolHeader, on a take's answer, is ProtocolRun when the engine
	// serves PathRun; an engine of an earlier opkit does not send it.
	ProtocolHeader = "X-Opkit-Runner-Protocol"
	ProtocolRun    = "run"
	// NextHeader, on a run's stream (PathRun), asks for the agent's next
	// run on its answer, after the Ack (NextOnAnswer).
	NextHeader   = "X-Opkit-Runner-Next"
	NextOnAnswer = "on-answer"
)

// Pool queues runs for runners. The zero value is not usable: NewPool.
type Pool struct {
	// LostAfter bounds the silence of a runner mid-run, and the time an
	// agent has to claim a run handed to it. Defaults to 15s; agents
	// send a heartbeat every LostAfter/5 or more often.
	LostAfter time.Duration

	mu      sync.Mutex
	queues  map[queueKey]*queue
	handed  map[string]*handover
	metrics *metrics
	// changed wakes a Scaler when a run comes (buffered 1).
	changed chan struct{}
}

type queueKey struct{ operator, image string }

// queue is the runs of one operator and image not yet handed over, and
// the agents waiting for one.
type queue struct {
	runs    []*handover
	waiters []chan *handover
}

// handover is one run handed to one runner.
type handover struct {
	id   string
	key  queueKey
	d    executor.Dispatch
	done chan handoverEnd // buffered 1; the first end wins
	// claimed gets the runner's name when one claims it (buffered 1: a
	// run is claimed once), for Dispatch to call d.Claimed.
	claimed chan string
	// cancel is closed when the run's context ends before the run does:
	// its stream is ended, and the agent kills the command.
	cancel chan struct{}

	// Under Pool.mu:
	runner    string
	state     handoverState
	claimedAt time.Time
	ended     bool
}

type handoverState int

const (
	queued handoverState = iota
	handed
	running
	streaming
)

type handoverEnd struct {
	out *executor.Reply
	err error
}

// NewPool makes an empty pool.
func NewPool() *Pool {
	return &Pool{queues: map[queueKey]*queue{}, handed: map[string]*handover{}, metrics: registerMetrics(), changed: make(chan struct{}, 1)}
}

// demand is, for each operator and image the pool has seen (by a run or
// an agent), how many of its runs are queued or running.
func (p *Pool) demand() map[queueKey]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	d := make(map[queueKey]int, len(p.queues))
	for key := range p.queues {
		d[key] = 0
	}
	for _, h := range p.handed {
		d[h.key]++
	}
	return d
}

func (p *Pool) lostAfter() time.Duration {
	if p.LostAfter <= 0 {
		return 15 * time.Second
	}
	return p.LostAfter
}

// Dispatch queues a run and waits for its end (executor.Dispatcher).
func (p *Pool) Dispatch(ctx context.Context, d executor.Dispatch) (*executor.Reply, error) {
	d.Log = &lockedWriter{w: d.Log} // the waiting line, the claim's and the stream's
	h := &handover{id: newID(), key: queueKey{d.Operator, d.Image}, d: d, done: make(chan handoverEnd, 1), claimed: make(chan string, 1), cancel: make(chan struct{})}
	h.d.Work.ID = h.id
	p.mu.Lock()
	p.handed[h.id] = h
	q := p.queue(h.key)
	ready := len(q.waiters) > 0
	p.enqueue(h, false)
	p.mu.Unlock()
	select {
	case p.changed <- struct{}{}:
	default:
	}
	if !ready {
		p.metrics.waited.WithLabelValues(d.Operator, d.Image).Inc()
		_, _ = fmt.Fprintf(d.Log, "opkit: waiting for a runner of image %s: none is ready (see opkit_runner_waiting_runs)\n", d.Image)
	}
	for {
		select {
		case runner := <-h.claimed:
			if d.Claimed != nil {
				d.Claimed(runner)
			}
			continue
		case end := <-h.done:
			select {
			case runner := <-h.claimed: // claimed and ended at once
				if d.Claimed != nil {
					d.Claimed(runner)
				}
			default:
			}
			return end.out, end.err
		case <-ctx.Done():
			p.mu.Lock()
			p.dropQueued(h)
			runner, claimed := h.runner, h.state == running || h.state == streaming
			if !h.ended {
				h.ended = true
				close(h.cancel) // the stream ends: the agent kills the command
			}
			delete(p.handed, h.id)
			p.mu.Unlock()
			if claimed {
				_, _ = fmt.Fprintf(h.d.Log, "opkit: the run is cancelled: runner %s kills its command\n", runner)
			}
			return nil, &executor.Failure{Message: "cancelled: the run's operator stopped, or the engine is stopping"}
		}
	}
}

// queue is the queue of key, made when new. Under mu.
func (p *Pool) queue(key queueKey) *queue {
	q := p.queues[key]
	if q == nil {
		q = &queue{}
		p.queues[key] = q
	}
	return q
}

// enqueue hands h to a waiting agent, or queues it (first, when it comes
// back). Under mu.
func (p *Pool) enqueue(h *handover, front bool) {
	h.state, h.runner = queued, ""
	q := p.queue(h.key)
	if len(q.waiters) > 0 {
		w := q.waiters[0]
		q.waiters = q.waiters[1:]
		p.metrics.ready.WithLabelValues(h.key.operator, h.key.image).Dec()
		w <- h // buffered 1, and each waiter gets one
		return
	}
	p.metrics.waiting.WithLabelValues(h.key.operator, h.key.image).Inc()
	if front {
		q.runs = append([]*handover{h}, q.runs...)
	} else {
		q.runs = append(q.runs, h)
	}
}

// dropQueued takes h out of its queue, if it is there. Under mu.
func (p *Pool) dropQueued(h *handover) {
	q := p.queue(h.key)
	for i, r := range q.runs {
		if r == h {
			q.runs = append(q.runs[:i], q.runs[i+1:]...)
			p.metrics.waiting.WithLabelValues(h.key.operator, h.key.image).Dec()
			return
		}
	}
}

// take waits for a run of key, until ctx ends (nil then).
func (p *Pool) take(ctx context.Context, key queueKey, runner string) *handover {
	p.mu.Lock()
	q := p.queue(key)
	if len(q.runs) > 0 {
		h := q.runs[0]
		q.runs = q.runs[1:]
		p.metrics.waiting.WithLabelValues(key.operator, key.image).Dec()
		p.hand(h, runner)
		p.mu.Unlock()
		return h
	}
	w := make(chan *handover, 1)
	q.waiters = append(q.waiters, w)
	p.metrics.ready.WithLabelValues(key.operator, key.image).Inc()
	p.mu.Unlock()
	select {
	case h := <-w:
		p.mu.Lock()
		p.hand(h, runner)
		p.mu.Unlock()
		return h
	case <-ctx.Done():
		p.mu.Lock()
		defer p.mu.Unlock()
		for i, x := range q.waiters {
			if x == w {
				q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
				p.metrics.ready.WithLabelValues(key.operator, key.image).Dec()
				return nil
			}
		}
		// A run came at the same time: it goes back, first.
		p.enqueue(<-w, true)
		return nil
	}
}

// hand gives h to runner, which must claim it within LostAfter, or it
// goes back to the queue. Under mu.
func (p *Pool) hand(h *handover, runner string) {
	h.state, h.runner = handed, runner
	time.AfterFunc(p.lostAfter(), func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if !h.ended && h.state == handed && h.runner == runner {
			p.enqueue(h, true)
		}
	})
}

// giveBack returns a handed run the agent could not be given.
func (p *Pool) giveBack(h *handover, runner string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !h.ended && h.state == handed && h.runner == runner {
		p.enqueue(h, true)
	}
}

// claim makes h runner's to run: false when it is not (any more). With
// streamOpen, the claim comes on the run's stream (PathRun); without,
// the stream must open within LostAfter (PathStream).
func (p *Pool) claim(id, runner string, key queueKey, streamOpen bool) (*handover, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	h := p.handed[id]
	if h == nil || h.ended || h.state != handed || h.runner != runner || h.key != key {
		return nil, false
	}
	h.state, h.claimedAt = running, time.Now()
	h.claimed <- runner // buffered 1, and a run is claimed once
	_, _ = fmt.Fprintf(h.d.Log, "opkit: runner %s runs it\n", runner)
	if streamOpen {
		h.state = streaming
		return h, true
	}
	time.AfterFunc(p.lostAfter(), func() {
		p.mu.Lock()
		lost := !h.ended && h.state == running
		p.mu.Unlock()
		if lost {
			p.end(h, nil, &executor.Interrupted{Message: fmt.Sprintf("runner %s was lost mid-run: it claimed the run but sent nothing for %s; the run is cancelled, to run again with its key", runner, p.lostAfter())})
		}
	})
	return h, true
}

// streaming marks h's stream open: false when h is not runner's running
// run (it was taken back).
func (p *Pool) streaming(id, runner string, key queueKey) (*handover, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	h := p.handed[id]
	if h == nil || h.ended || h.state != running || h.runner != runner || h.key != key {
		return nil, false
	}
	h.state = streaming
	return h, true
}

// end ends h once: the first end is the run's; false for a later one.
func (p *Pool) end(h *handover, out *executor.Reply, err error) bool {
	p.mu.Lock()
	if h.ended {
		p.mu.Unlock()
		return false
	}
	h.ended = true
	delete(p.handed, h.id)
	p.mu.Unlock()
	if _, ok := errors.AsType[*executor.Interrupted](err); ok {
		p.metrics.lost.WithLabelValues(h.key.operator, h.key.image).Inc()
	}
	h.done <- handoverEnd{out: out, err: err}
	return true
}

// lockedWriter serialises the writes of the goroutines that write a run's
// log.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func newID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// metrics of the pool, registered once with controller-runtime's registry
// (the engine's /metrics).
type metrics struct {
	waiting, ready *prometheus.GaugeVec
	waited, lost   *prometheus.CounterVec
}

var (
	metricsOnce sync.Once
	poolMetrics *metrics
)

func registerMetrics() *metrics {
	metricsOnce.Do(func() {
		labels := []string{"operator", "image"}
		poolMetrics = &metrics{
			waiting: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "opkit_runner_waiting_runs", Help: "Runs of exec handlers with an image queued for a runner, none having taken them yet."}, labels),
			ready:   prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "opkit_runner_ready", Help: "Runner agents waiting for a run."}, labels),
			waited:  prometheus.NewCounterVec(prometheus.CounterOpts{Name: "opkit_runner_waits_total", Help: "Runs that found no runner ready and waited for one."}, labels),
			lost:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "opkit_runner_lost_runs_total", Help: "Runs whose runner was lost mid-run: each is recorded Cancelled and runs again with its key."}, labels),
		}
		crmetrics.Registry.MustRegister(poolMetrics.waiting, poolMetrics.ready, poolMetrics.waited, poolMetrics.lost)
	})
	return poolMetrics
}
