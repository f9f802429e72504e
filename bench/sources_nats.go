package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// startNATSFlood starts a NATS server with JetStream in this process (its
// own Go module), with the stream FLOOD on flood.>, stored on disk as a
// production stream is.
func startNATSFlood(ctx context.Context) (*floodSource, error) {
	dir, err := os.MkdirTemp("", "opkit-bench-nats-")
	if err != nil {
		return nil, err
	}
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("starting NATS: %w", err)
	}
	srv.Start()
	stop := func() { srv.Shutdown(); srv.WaitForShutdown(); _ = os.RemoveAll(dir) }
	if !srv.ReadyForConnections(30 * time.Second) {
		stop()
		return nil, fmt.Errorf("the NATS server is not ready after 30s")
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		stop()
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err == nil {
		_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "FLOOD", Subjects: []string{"flood.>"}, Storage: jetstream.FileStorage})
	}
	if err != nil {
		nc.Close()
		stop()
		return nil, fmt.Errorf("creating the stream: %w", err)
	}
	next := 0
	return &floodSource{
		name:  "nats",
		block: fmt.Sprintf("    nats: {url: %q, stream: FLOOD, deliverPolicy: All}", srv.ClientURL()),
		publish: func(ctx context.Context, n int) (map[string]time.Time, error) {
			out := make(map[string]time.Time, n)
			acks := make([]jetstream.PubAckFuture, 0, n)
			sent := make([]time.Time, 0, n)
			for range n {
				sent = append(sent, time.Now())
				f, err := js.PublishAsync("flood.messages", fmt.Appendf(nil, `{"n": %d}`, next))
				if err != nil {
					return nil, fmt.Errorf("publishing: %w", err)
				}
				next++
				acks = append(acks, f)
			}
			// Each one's send time, by its id: known once the stream
			// acknowledged it.
			for i, f := range acks {
				select {
				case ack := <-f.Ok():
					out[fmt.Sprintf("%s:%d", ack.Stream, ack.Sequence)] = sent[i]
				case err := <-f.Err():
					return nil, fmt.Errorf("publishing: %w", err)
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			return out, nil
		},
		stop: func() { nc.Close(); stop() },
	}, nil
}
