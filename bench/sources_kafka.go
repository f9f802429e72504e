package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// floodPartitions are the flooded topic's partitions.
const floodPartitions = 3

// startKafkaFlood starts a Kafka cluster of one broker in this process
// (franz-go's kfake) with the topic flood.
func startKafkaFlood(context.Context) (*floodSource, error) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(floodPartitions, "flood"))
	if err != nil {
		return nil, fmt.Errorf("starting Kafka (kfake): %w", err)
	}
	addr := cluster.ListenAddrs()[0]
	producer, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		cluster.Close()
		return nil, err
	}
	next := 0
	return &floodSource{
		name:  "kafka",
		block: fmt.Sprintf("    kafka: {brokers: [%q], topics: [flood], startOffset: Earliest}", addr),
		publish: func(ctx context.Context, n int) (map[string]time.Time, error) {
			out := make(map[string]time.Time, n)
			records := make([]*kgo.Record, n)
			for i := range records {
				records[i] = &kgo.Record{Topic: "flood", Partition: int32(next % floodPartitions), Value: fmt.Appendf(nil, `{"n": %d}`, next)}
				next++
			}
			// Produced asynchronously, each one's send time kept by its
			// id, known once the broker has it.
			done := make(chan error, n)
			var mu sync.Mutex
			for _, r := range records {
				at := time.Now()
				producer.Produce(ctx, r, func(r *kgo.Record, err error) {
					if err == nil {
						mu.Lock()
						out[fmt.Sprintf("%s:%d:%d", r.Topic, r.Partition, r.Offset)] = at
						mu.Unlock()
					}
					done <- err
				})
			}
			for range records {
				if err := <-done; err != nil {
					return nil, fmt.Errorf("producing: %w", err)
				}
			}
			return out, nil
		},
		stop: func() { producer.Close(); cluster.Close() },
	}, nil
}
