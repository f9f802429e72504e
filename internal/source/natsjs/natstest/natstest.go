// Package natstest runs a NATS server with JetStream inside a test: the
// real server (the nats-server Go module, nothing downloaded), listening
// on a free port of 127.0.0.1 and keeping its streams in the test's
// temporary directory, so that it can be stopped and started again on the
// same port with the same messages, as a server restarted in production.
//
// It is for the tests of any package that consumes NATS (the natsjs
// consumer's, the engine's, the binary's): every function takes the
// test's testing.TB and fails the test on error. The server is shut down
// when the test ends.
package natstest

import (
	"context"
	"encoding/json"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/opkit-dev/opkit/internal/scenario"
)

// Options are the server's and its stream's.
type Options struct {
	// Stream is the stream created at start. Defaults to "EVENTS".
	Stream string
	// Subjects are the stream's subjects. Defaults to "events.>".
	Subjects []string
	// Token, when set, is the token every client must present.
	Token string
	// NoStream starts the server without creating a stream.
	NoStream bool
}

// Server is a NATS server with JetStream run by a test.
type Server struct {
	t    testing.TB
	opts Options

	mu        sync.Mutex
	srv       *server.Server
	conf      server.Options // the next start's: the first's port and store
	published int            // messages published by Publish and PublishMsgs
}

// Start starts a server and creates its stream (file storage, so that it
// survives Restart). It is shut down when the test ends.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	if opts.Stream == "" {
		opts.Stream = "EVENTS"
	}
	if len(opts.Subjects) == 0 {
		opts.Subjects = []string{"events.>"}
	}
	s := &Server{t: t, opts: opts, conf: server.Options{
		Host:          "127.0.0.1",
		Port:          -1,
		JetStream:     true,
		StoreDir:      t.TempDir(),
		Authorization: opts.Token,
		NoLog:         true,
		NoSigs:        true,
	}}
	s.start()
	t.Cleanup(s.Stop)
	if !opts.NoStream {
		s.CreateStream(opts.Stream, opts.Subjects...)
	}
	return s
}

func (s *Server) start() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		return
	}
	conf := s.conf // NewServer keeps and changes its options
	srv, err := server.NewServer(&conf)
	if err != nil {
		s.t.Fatalf("natstest: starting a NATS server: %v", err)
	}
	srv.Start()
	if !srv.ReadyForConnections(30 * time.Second) {
		srv.Shutdown()
		s.t.Fatalf("natstest: the NATS server on port %d is not ready after 30s", s.conf.Port)
	}
	s.srv = srv
	s.conf.Port = srv.Addr().(*net.TCPAddr).Port
}

// URL is the server's client URL, nats://127.0.0.1:<port>: the same
// across Restart.
func (s *Server) URL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return "nats://127.0.0.1:" + strconv.Itoa(s.conf.Port)
}

// Stream is the name of the stream created at start.
func (s *Server) Stream() string { return s.opts.Stream }

// Stop shuts the server down, keeping its port and store for Restart.
// Stopping a stopped server does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	srv := s.srv
	s.srv = nil
	s.mu.Unlock()
	if srv != nil {
		srv.Shutdown()
		srv.WaitForShutdown()
	}
}

// Restart stops the server if it runs and starts it again on the same
// port, with the same streams, consumers and messages.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	s.start()
}

// Connect connects a client to the server (with its token), closed when
// the test ends.
func (s *Server) Connect() *nats.Conn {
	s.t.Helper()
	nc := s.connect()
	s.t.Cleanup(nc.Close)
	return nc
}

func (s *Server) connect() *nats.Conn {
	s.t.Helper()
	opts := []nats.Option{nats.Name("natstest")}
	if s.opts.Token != "" {
		opts = append(opts, nats.Token(s.opts.Token))
	}
	nc, err := nats.Connect(s.URL(), opts...)
	if err != nil {
		s.t.Fatalf("natstest: connecting to %s: %v", s.URL(), err)
	}
	return nc
}

// JetStream is a JetStream client of a new connection to the server,
// closed when the test ends.
func (s *Server) JetStream() jetstream.JetStream {
	s.t.Helper()
	return s.jetStream(s.Connect())
}

func (s *Server) jetStream(nc *nats.Conn) jetstream.JetStream {
	s.t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		s.t.Fatalf("natstest: %v", err)
	}
	return js
}

// CreateStream creates a stream over subjects, kept in files.
func (s *Server) CreateStream(name string, subjects ...string) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nc := s.connect()
	defer nc.Close()
	if _, err := s.jetStream(nc).CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: subjects, Storage: jetstream.FileStorage}); err != nil {
		s.t.Fatalf("natstest: creating stream %s: %v", name, err)
	}
}

// Publish publishes n messages on subject and waits until the stream has
// stored them all. The k-th message the Server publishes has the body
// Body(k): on a server with one stream, k is its stream sequence. It
// returns their stream sequences, in order.
func (s *Server) Publish(subject string, n int) []uint64 {
	s.t.Helper()
	s.mu.Lock()
	first := s.published + 1
	s.mu.Unlock()
	msgs := make([]*nats.Msg, n)
	for i := range msgs {
		msgs[i] = &nats.Msg{Subject: subject, Data: Body(first + i)}
	}
	return s.PublishMsgs(msgs...)
}

// PublishMsgs publishes messages (with their headers) and waits until the
// stream has stored them all. It returns their stream sequences, in order.
func (s *Server) PublishMsgs(msgs ...*nats.Msg) []uint64 {
	s.t.Helper()
	s.mu.Lock()
	s.published += len(msgs)
	s.mu.Unlock()
	nc := s.connect()
	defer nc.Close()
	js := s.jetStream(nc)
	futures := make([]jetstream.PubAckFuture, len(msgs))
	// Once 4,000 publishes wait for their acks, a publish waits for one
	// to come, 200 ms by default: a loaded machine's server took longer
	// (a test failed on "stalled with too many outstanding async
	// published messages"). As long as the wait for the stored messages.
	scale, _ := scenario.TimeoutScale() // 1 when it cannot be read
	stall := time.Duration(float64(60*time.Second) * scale)
	for i, m := range msgs {
		f, err := js.PublishMsgAsync(m, jetstream.WithStallWait(stall))
		if err != nil {
			s.t.Fatalf("natstest: publishing message %d on %s: %v", i+1, m.Subject, err)
		}
		futures[i] = f
	}
	seqs := make([]uint64, len(msgs))
	timeout := time.After(stall)
	for i, f := range futures {
		select {
		case ack := <-f.Ok():
			seqs[i] = ack.Sequence
		case err := <-f.Err():
			s.t.Fatalf("natstest: publishing message %d on %s: %v", i+1, msgs[i].Subject, err)
		case <-timeout:
			s.t.Fatalf("natstest: message %d of %d not stored after %v", i+1, len(msgs), stall)
		}
	}
	return seqs
}

// Body is the JSON body of the n-th message published, {"n": n}.
func Body(n int) []byte {
	b, _ := json.Marshal(map[string]int{"n": n})
	return b
}

// ConsumerInfo is the stream's durable consumer's state as the server
// sees it: its pending, ack-pending and redelivered counts, its ack floor.
func (s *Server) ConsumerInfo(consumer string) *jetstream.ConsumerInfo {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nc := s.connect()
	defer nc.Close()
	c, err := s.jetStream(nc).Consumer(ctx, s.opts.Stream, consumer)
	if err != nil {
		s.t.Fatalf("natstest: consumer %s of stream %s: %v", consumer, s.opts.Stream, err)
	}
	return c.CachedInfo()
}
