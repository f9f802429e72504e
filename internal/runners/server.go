package runners

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	authenticationv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"

	"github.com/opkit-dev/opkit/internal/executor"
)

// TakeRequest is the body of POST PathTake.
type TakeRequest struct {
	Operator string `json:"operator"`
	Image    string `json:"image"`
}

// Frame is one line of a run's stream, agent to engine: some of its
// stderr, a heartbeat, or its outcome (the last frame).
type Frame struct {
	Log     []byte          `json:"log,omitempty"`
	Beat    bool            `json:"beat,omitempty"`
	Outcome *executor.Reply `json:"outcome,omitempty"`
}

// MaxFrame bounds a frame's line: an outcome holds a result of at most
// executor.MaxResultBytes, which JSON's escapes may make six times as
// long. A longer frame cancels its run (the runner is broken).
const MaxFrame = 8 * executor.MaxResultBytes

// errFrameTooLarge is readFrame's for a line longer than MaxFrame.
var errFrameTooLarge = errors.New("frame too large")

// frameReaders are the readers of runs' streams, kept between runs: a
// reader's buffer is most of a short run's allocation.
var frameReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 16<<10) }}

// readFrame reads a line of br, up to MaxFrame bytes. The line is br's
// buffer when it fits in it: it is valid until the next read.
func readFrame(br *bufio.Reader) ([]byte, error) {
	var long []byte
	for {
		part, err := br.ReadSlice('\n')
		if len(long)+len(part) > MaxFrame {
			return nil, errFrameTooLarge
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			if long == nil {
				return part, err
			}
			return append(long, part...), err
		}
		long = append(long, part...)
	}
}

// Server serves the runner API (see the package doc). Mount Handler on a
// TLS server whose requests may last as long as a run.
type Server struct {
	// Pool is where runs wait. Required.
	Pool *Pool
	// Reviews checks runners' tokens. Required.
	Reviews authenticationv1client.TokenReviewInterface
	// Namespace is the engine's: runners' ServiceAccounts are of it.
	// Required.
	Namespace string
	// PollFor is how long a take waits for a run before it answers 204.
	// Defaults to 25s.
	PollFor time.Duration

	cache sync.Map // sha256(token) -> cachedIdentity
}

type cachedIdentity struct {
	serviceAccount string // namespace:name
	until          time.Time
}

// Handler routes the API's paths.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+PathTake, s.take)
	mux.HandleFunc("POST "+PathStart+"{id}", s.start)
	mux.HandleFunc("POST "+PathStream+"{id}", s.stream)
	mux.HandleFunc("POST "+PathRun+"{id}", s.run)
	return mux
}

// caller is an authenticated runner: its operator and image (from the
// query: operator, image), and its name.
type caller struct {
	key    queueKey
	runner string
}

// authenticate checks the request's token and that its ServiceAccount is
// the operator's runners'; it answers the request itself when not.
func (s *Server) authenticate(w http.ResponseWriter, r *http.Request) (caller, bool) {
	c, status, why := s.identify(r)
	if status != http.StatusOK {
		http.Error(w, why, status)
		return c, false
	}
	return c, true
}

// identify is authenticate's check: the caller, or the status and the
// reason of its refusal.
func (s *Server) identify(r *http.Request) (c caller, status int, why string) {
	c = caller{key: queueKey{r.URL.Query().Get("operator"), r.URL.Query().Get("image")}, runner: r.Header.Get(RunnerHeader)}
	if c.key.operator == "" || c.key.image == "" || c.runner == "" {
		return c, http.StatusBadRequest, "a runner names its operator and image (?operator=&image=) and itself (header " + RunnerHeader + ")"
	}
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || token == "" {
		return c, http.StatusUnauthorized, "no bearer token: a runner sends its ServiceAccount token of audience " + Audience
	}
	sa, err := s.review(r.Context(), token)
	if err != nil {
		return c, http.StatusUnauthorized, err.Error()
	}
	want := s.Namespace + ":" + ServiceAccountPrefix + c.key.operator
	if sa != want || len(validation.IsDNS1123Subdomain(ServiceAccountPrefix+c.key.operator)) > 0 {
		return c, http.StatusForbidden, fmt.Sprintf("ServiceAccount %s may not run operator %s's handlers: only %s may", sa, c.key.operator, strings.Replace(want, ":", "/", 1))
	}
	return c, http.StatusOK, ""
}

// review is the ServiceAccount (namespace:name) of a token of audience
// Audience, from the cache or a TokenReview.
func (s *Server) review(ctx context.Context, token string) (string, error) {
	sum := sha256.Sum256([]byte(token))
	if v, ok := s.cache.Load(sum); ok && time.Now().Before(v.(cachedIdentity).until) {
		return v.(cachedIdentity).serviceAccount, nil
	}
	tr, err := s.Reviews.Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: []string{Audience}}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("the engine could not review the token: %w", err)
	}
	if !tr.Status.Authenticated {
		return "", fmt.Errorf("the token is not valid for audience %s: %s", Audience, tr.Status.Error)
	}
	ns, name, ok := strings.Cut(strings.TrimPrefix(tr.Status.User.Username, "system:serviceaccount:"), ":")
	if !ok || !strings.HasPrefix(tr.Status.User.Username, "system:serviceaccount:") {
		return "", fmt.Errorf("%s is not a ServiceAccount", tr.Status.User.Username)
	}
	sa := ns + ":" + name
	s.cache.Store(sum, cachedIdentity{serviceAccount: sa, until: time.Now().Add(time.Minute)})
	return sa, nil
}

func (s *Server) take(w http.ResponseWriter, r *http.Request) {
	c, ok := s.authenticate(w, r)
	if !ok {
		return
	}
	h := s.wait(r, c)
	if h == nil {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set(ProtocolHeader, ProtocolRun)
	s.hand(w, c, h)
}

// wait waits for c's next run, up to PollFor, while r lasts: nil for
// none.
func (s *Server) wait(r *http.Request, c caller) *handover {
	poll := s.PollFor
	if poll <= 0 {
		poll = 25 * time.Second
	}
	ctx, cancel := context.WithTimeout(r.Context(), poll)
	defer cancel()
	return s.Pool.take(ctx, c.key, c.runner)
}

// hand writes h's work, a line, to c: a run whose line cannot be written
// goes back to the queue (nothing started).
func (s *Server) hand(w http.ResponseWriter, c caller, h *handover) {
	if err := json.NewEncoder(w).Encode(h.d.Work); err != nil {
		s.Pool.giveBack(h, c.runner)
	}
}

// claimRefused is the answer to a claim of a run that is not the
// runner's (any more), on either path.
const claimRefused = "the run is no longer yours: it went back to the queue, or ended"

func (s *Server) start(w http.ResponseWriter, r *http.Request) {
	c, ok := s.authenticate(w, r)
	if !ok {
		return
	}
	if _, ok := s.Pool.claim(r.PathValue("id"), c.runner, c.key, false); !ok {
		http.Error(w, claimRefused, http.StatusGone)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// stream is the stream of a run claimed before (PathStart): its answer's
// status is the end's (answerStatus).
func (s *Server) stream(w http.ResponseWriter, r *http.Request) {
	c, ok := s.authenticate(w, r)
	if !ok {
		return
	}
	h, ok := s.Pool.streaming(r.PathValue("id"), c.runner, c.key)
	if !ok {
		http.Error(w, "the run is no longer yours: it was taken back, or ended", http.StatusGone)
		return
	}
	s.frames(w, r, c, h, answerStatus)
}

// run claims a run and streams it, in one request (PathRun): the answer's
// headers (200) are the claim, sent at once, while the agent's frames
// come; its one line, an Ack, is the end's.
func (s *Server) run(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	// The agent writes its frames while it reads the answer.
	if err := rc.EnableFullDuplex(); err != nil {
		http.Error(w, "the runner API cannot stream both ways on this connection: "+err.Error(), http.StatusInternalServerError)
		return
	}
	// Until the claim, an answer is a refusal, and the connection closes
	// after it: what the agent sends is not read.
	w.Header().Set("Connection", "close")
	c, ok := s.authenticate(w, r)
	if !ok {
		unread(rc, r)
		return
	}
	h, ok := s.Pool.claim(r.PathValue("id"), c.runner, c.key, true)
	if !ok {
		http.Error(w, claimRefused, http.StatusGone)
		unread(rc, r)
		return
	}
	w.Header().Del("Connection")
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	if err := rc.Flush(); err != nil {
		s.Pool.end(h, nil, &executor.Interrupted{Message: fmt.Sprintf("runner %s could not be told it runs the run (%v); the run is cancelled, to run again with its key", c.runner, err)})
		hangUp(rc)
		return
	}
	var kept bool
	s.frames(w, r, c, h, func(w http.ResponseWriter, r *http.Request, status int, message string) {
		kept = answerAck(w, r, status, message)
	})
	if !kept || r.Header.Get(NextHeader) != NextOnAnswer {
		return
	}
	// The agent's next run, on this answer (see the package doc), to a
	// token that is still the operator's runners' (the run before may
	// have lasted hours): checked as a take checks it.
	if _, status, _ := s.identify(r); status != http.StatusOK {
		return
	}
	if next := s.wait(r, c); next != nil {
		s.hand(w, c, next)
	}
}

// unread ends a refused request: the answer flushed, then the body
// read to its end, which an agent sends as soon as it sees the refusal
// (its end unread, the connection's close would be a reset, which may
// lose the answer), or for a second at most. Inside the handler
// (golang/go#68560: net/http's own close of a full-duplex body after the
// handler starts the connection's background read while it reads the
// next request on it, and panics).
func unread(rc *http.ResponseController, r *http.Request) {
	_ = rc.Flush()
	_ = rc.SetReadDeadline(time.Now().Add(time.Second))
	_ = r.Body.Close()
}

// hangUp closes the connection of an answer sent in part: what the agent
// still sends is never read as a next request.
func hangUp(rc *http.ResponseController) {
	_ = rc.Flush()
	if conn, _, err := rc.Hijack(); err == nil {
		_ = conn.Close()
	}
}

// Ack is the engine's answer to a run's stream through PathRun, its one
// line: the outcome recorded, or why it was not (the run was taken back,
// cancelled, or its stream broke). An agent stops a command still running
// on any answer.
type Ack struct {
	Recorded bool   `json:"recorded,omitempty"`
	Refused  string `json:"refused,omitempty"`
}

// answer ends a run's stream: status is the end's (204: the outcome is
// recorded), message why when it is not.
type answer func(w http.ResponseWriter, r *http.Request, status int, message string)

// answerStatus answers with the status (PathStream).
func answerStatus(w http.ResponseWriter, _ *http.Request, status int, message string) {
	if status == http.StatusNoContent {
		w.WriteHeader(status)
		return
	}
	http.Error(w, message, status)
}

// answerAck answers with an Ack line, the status sent before (PathRun),
// and reports whether the answer may go on. An outcome recorded was the
// body's last frame: its end is read (inside the handler,
// golang/go#68560), and the connection kept. Otherwise the agent may
// still be sending (its command stops when it reads the Ack): the
// connection is closed.
func answerAck(w http.ResponseWriter, r *http.Request, status int, message string) (kept bool) {
	rc := http.NewResponseController(w)
	_ = json.NewEncoder(w).Encode(Ack{Recorded: status == http.StatusNoContent, Refused: message})
	if status != http.StatusNoContent {
		hangUp(rc)
		return false
	}
	if rc.Flush() != nil {
		return false
	}
	// The outcome is the last frame: the body ends after it. One whose
	// end never came (its frames' watch gave up), or that goes on, is a
	// broken agent's.
	if n, err := io.Copy(io.Discard, io.LimitReader(r.Body, 1<<10)); err != nil || n > 0 || r.Body.Close() != nil {
		hangUp(rc)
		return false
	}
	return true
}

// frames reads h's frames until its outcome, its stream's end or its
// silence (lost), or its cancel, and answers the end.
func (s *Server) frames(w http.ResponseWriter, r *http.Request, c caller, h *handover, answer answer) {
	lostAfter := s.Pool.lostAfter()
	var frames atomic.Int64
	stop := make(chan struct{})
	var lostWhy atomic.Pointer[string]
	var cancelled atomic.Bool
	go func() {
		// Lost after two checks in a row that saw no frame: an engine
		// stopped past LostAfter and resumed sees frames come in between.
		t := time.NewTicker(lostAfter / 2)
		defer t.Stop()
		seen, quiet := int64(-1), 0
		for {
			select {
			case <-stop:
				return
			case <-h.cancel:
				// The engine cancelled the run: the stream ends now, and
				// the agent kills the command.
				cancelled.Store(true)
				_ = http.NewResponseController(w).SetReadDeadline(time.Now())
				return
			case <-t.C:
			}
			if n := frames.Load(); n != seen {
				seen, quiet = n, 0
				continue
			}
			if quiet++; quiet >= 2 {
				why := fmt.Sprintf("no heartbeat for %s", lostAfter)
				lostWhy.Store(&why)
				_ = http.NewResponseController(w).SetReadDeadline(time.Now())
				return
			}
		}
	}()
	defer close(stop)
	lines := frameReaders.Get().(*bufio.Reader)
	lines.Reset(r.Body)
	defer func() { lines.Reset(nil); frameReaders.Put(lines) }()
	for {
		line, err := readFrame(lines)
		if errors.Is(err, errFrameTooLarge) {
			s.Pool.end(h, nil, &executor.Interrupted{Message: fmt.Sprintf("runner %s sent a frame of more than %d bytes; the run is cancelled, to run again with its key", c.runner, MaxFrame)})
			answer(w, r, http.StatusRequestEntityTooLarge, "a frame is at most "+strconv.Itoa(MaxFrame)+" bytes")
			return
		}
		if err != nil && cancelled.Load() {
			answer(w, r, http.StatusGone, "the engine cancelled the run: stop its command")
			return
		}
		if err != nil {
			why := "the connection dropped: " + err.Error()
			if errors.Is(err, io.EOF) {
				why = "the stream ended without an outcome"
			}
			if p := lostWhy.Load(); p != nil {
				why = *p
			}
			s.Pool.end(h, nil, &executor.Interrupted{Message: fmt.Sprintf("runner %s was lost mid-run (%s); the run is cancelled, to run again with its key", c.runner, why)})
			answer(w, r, http.StatusGone, "the run's stream broke ("+why+"): the run is cancelled, to run again")
			return
		}
		frames.Add(1)
		var f Frame
		if err := json.Unmarshal(line, &f); err != nil {
			s.Pool.end(h, nil, &executor.Interrupted{Message: fmt.Sprintf("runner %s sent a frame that is not JSON (%v); the run is cancelled, to run again with its key", c.runner, err)})
			answer(w, r, http.StatusBadRequest, "not a frame")
			return
		}
		if len(f.Log) > 0 {
			_, _ = h.d.Log.Write(f.Log)
		}
		if f.Outcome != nil {
			if !s.Pool.end(h, f.Outcome, nil) {
				answer(w, r, http.StatusGone, "the run was taken back: this outcome is not recorded")
				return
			}
			answer(w, r, http.StatusNoContent, "")
			return
		}
	}
}
