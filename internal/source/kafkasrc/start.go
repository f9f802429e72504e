package kafkasrc

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/opkit-dev/opkit/api/v1alpha1"
)

// Where a partition without a committed offset starts.
//
// Kafka resets such a partition to its end (Latest) or start (Earliest)
// each time a member takes it. Were that left so, a Latest partition
// whose records came, and were not all delivered, before the group's
// first commit of it would skip them at the next start: lost. So a
// partition is pinned when it is taken without a commit: its start
// offset is listed, consumed from, and committed right after the next
// poll (when no rebalance can take it away), so that a later member
// starts there.

// pinStart is kgo's AdjustFetchOffsetsFn: it sets the partitions without
// a commit to their start's offset, listed now, and keeps them to commit.
func (c *Consumer) pinStart(ctx context.Context, self *atomic.Pointer[kgo.Client], offsets map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	at := int64(-1) // ListOffsets: the end
	if c.spec.StartOffset == v1alpha1.OffsetEarliest {
		at = -2 // the start
	}
	req := kmsg.NewPtrListOffsetsRequest()
	for topic, ps := range offsets {
		t := kmsg.NewListOffsetsRequestTopic()
		t.Topic = topic
		for n, o := range ps {
			if o.EpochOffset().Offset >= 0 {
				continue // committed
			}
			p := kmsg.NewListOffsetsRequestTopicPartition()
			p.Partition, p.Timestamp = n, at
			t.Partitions = append(t.Partitions, p)
		}
		if len(t.Partitions) > 0 {
			req.Topics = append(req.Topics, t)
		}
	}
	if len(req.Topics) == 0 {
		return offsets, nil
	}
	// The group may be joined before NewClient's caller has the client.
	cl := self.Load()
	for cl == nil {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
		cl = self.Load()
	}
	pins := map[partition]int64{}
	for _, shard := range cl.RequestSharded(ctx, req) {
		if shard.Err != nil {
			return nil, fmt.Errorf("listing where partitions without a commit start: %w", shard.Err)
		}
		for _, t := range shard.Resp.(*kmsg.ListOffsetsResponse).Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
					return nil, fmt.Errorf("listing where %s partition %d starts: %w", t.Topic, p.Partition, err)
				}
				offsets[t.Topic][p.Partition] = kgo.NewOffset().At(p.Offset)
				pins[partition{t.Topic, p.Partition}] = p.Offset
			}
		}
	}
	c.mu.Lock()
	for at, o := range pins {
		c.pins[at] = o
	}
	c.mu.Unlock()
	return offsets, nil
}

// commitPins commits the partitions pinned by pinStart. It is called
// between a poll and AllowRebalance: the member owns what it pinned,
// unless unassigned forgot it.
func (c *Consumer) commitPins(ctx context.Context, cl *kgo.Client) error {
	c.mu.Lock()
	if len(c.pins) == 0 {
		c.mu.Unlock()
		return nil
	}
	offsets := map[string]map[int32]kgo.EpochOffset{}
	pinned := map[partition]int64{}
	for at, o := range c.pins {
		if offsets[at.topic] == nil {
			offsets[at.topic] = map[int32]kgo.EpochOffset{}
		}
		offsets[at.topic][at.n] = kgo.EpochOffset{Epoch: -1, Offset: o}
		pinned[at] = o
	}
	c.mu.Unlock()

	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitTimeout)
	defer cancel()
	if err := commit(cctx, cl, offsets); err != nil {
		return fmt.Errorf("committing where partitions without a commit start: %w", err)
	}
	c.mu.Lock()
	for at, o := range pinned {
		if c.pins[at] == o {
			delete(c.pins, at)
		}
	}
	c.mu.Unlock()
	return nil
}

// commit commits offsets and returns the first error of the commit or of
// any partition's, as CommitRecords does.
func commit(ctx context.Context, cl *kgo.Client, offsets map[string]map[int32]kgo.EpochOffset) error {
	var first error
	cl.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			first = err
			return
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil && first == nil {
					first = fmt.Errorf("%s partition %d: %w", t.Topic, p.Partition, err)
				}
			}
		}
	})
	return first
}
