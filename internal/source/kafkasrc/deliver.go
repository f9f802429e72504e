package kafkasrc

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/opkit-dev/opkit/internal/source"
)

// delivery is what came of delivering a poll.
type delivery struct {
	// rewind is where each partition whose Deliver failed starts again:
	// at the record that failed.
	rewind map[string]map[int32]kgo.EpochOffset
	// err is the first Deliver's failure, commitErr the commit's.
	err, commitErr error
}

// batch is a poll's records of one partition, and how far their delivery
// went.
type batch struct {
	at      partition
	records []*kgo.Record
	hwm     int64
	done    *kgo.Record // the last delivered
	failed  *kgo.Record // the first not delivered
	err     error
}

// deliver hands a poll's records to sink, the partitions at once and the
// records of each in order, stopping a partition at its first failure;
// then commits what was delivered.
func (c *Consumer) deliver(ctx context.Context, cl *kgo.Client, sink source.Sink, fetches kgo.Fetches) delivery {
	var batches []*batch
	index := map[partition]*batch{}
	fetches.EachPartition(func(p kgo.FetchTopicPartition) {
		if len(p.Records) == 0 {
			return
		}
		at := partition{p.Topic, p.Partition}
		b := index[at]
		if b == nil {
			b = &batch{at: at}
			index[at] = b
			batches = append(batches, b)
		}
		b.records = append(b.records, p.Records...)
		b.hwm = p.HighWatermark
	})
	c.mu.Lock()
	for _, b := range batches {
		c.lag[b.at] = max(0, b.hwm-b.records[0].Offset)
	}
	c.mu.Unlock()

	if len(batches) == 1 {
		c.deliverBatch(ctx, sink, batches[0])
	} else {
		var wg sync.WaitGroup
		for _, b := range batches {
			wg.Go(func() { c.deliverBatch(ctx, sink, b) })
		}
		wg.Wait()
	}

	var d delivery
	var done []*kgo.Record
	for _, b := range batches {
		if b.done != nil {
			done = append(done, b.done)
		}
		if b.failed == nil {
			continue
		}
		if d.err == nil {
			d.err = b.err
		}
		if d.rewind == nil {
			d.rewind = map[string]map[int32]kgo.EpochOffset{}
		}
		if d.rewind[b.at.topic] == nil {
			d.rewind[b.at.topic] = map[int32]kgo.EpochOffset{}
		}
		// Epoch -1: the offset is one this member fetched, no data loss
		// to detect.
		d.rewind[b.at.topic][b.at.n] = kgo.EpochOffset{Epoch: -1, Offset: b.failed.Offset}
	}
	if len(done) > 0 {
		// Committed even when ctx ended meanwhile: what was delivered
		// need not come again.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitTimeout)
		if err := cl.CommitRecords(cctx, done...); err != nil {
			d.commitErr = fmt.Errorf("committing the offsets of what was delivered: %w", err)
		}
		cancel()
	}
	return d
}

// deliverBatch delivers b's records in order until one fails.
func (c *Consumer) deliverBatch(ctx context.Context, sink source.Sink, b *batch) {
	for _, r := range b.records {
		m := c.message(r)
		if err := sink.Deliver(ctx, m); err != nil {
			b.failed, b.err = r, fmt.Errorf("delivering %s: %w", m.ID, err)
			return
		}
		b.done = r
		c.mu.Lock()
		c.lag[b.at] = max(0, b.hwm-r.Offset-1)
		c.mu.Unlock()
	}
}

// message is r as a source.Message.
func (c *Consumer) message(r *kgo.Record) source.Message {
	headers := make(map[string]string, len(r.Headers)+1)
	for _, h := range r.Headers {
		k := strings.ToLower(h.Key)
		if _, ok := headers[k]; !ok {
			headers[k] = strings.ToValidUTF8(string(h.Value), "\uFFFD")
		}
	}
	// The record's key is the record's own, over a header of its name.
	delete(headers, KeyHeader)
	delete(headers, KeyBase64Header)
	switch {
	case r.Key == nil:
	case printable(r.Key):
		headers[KeyHeader] = string(r.Key)
	default:
		headers[KeyBase64Header] = base64.StdEncoding.EncodeToString(r.Key)
	}
	body := r.Value
	if limit := c.spec.MaxBodyBytes; limit > 0 && int64(len(body)) > limit {
		body = body[:limit+1]
	}
	var published time.Time
	if r.Timestamp.UnixMilli() > 0 {
		published = r.Timestamp
	}
	return source.Message{
		ID:        ID(r.Topic, r.Partition, r.Offset),
		Event:     r.Topic,
		Headers:   headers,
		Body:      body,
		Published: published,
	}
}

// The headers of a record's key.
const (
	// KeyHeader holds a key that is printable text.
	KeyHeader = "kafka-key"
	// KeyBase64Header holds any other key, in standard base64.
	KeyBase64Header = "kafka-key-base64"
)

// printable says whether a key reads as text: valid UTF-8 without
// control characters.
func printable(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, r := range string(b) {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}

// maxID is the longest delivery id (source.Message.ID).
const maxID = 200

// ID is the delivery id of a topic's partition's record:
// <topic>:<partition>:<offset>. A topic is at most 249 characters, an ID
// at most 200: a topic too long for it is cut and followed by "~" and 16
// hex digits of its SHA-256, which no topic name holds.
func ID(topic string, partition int32, offset int64) string {
	tail := ":" + strconv.FormatInt(int64(partition), 10) + ":" + strconv.FormatInt(offset, 10)
	if len(topic)+len(tail) > maxID {
		sum := sha256.Sum256([]byte(topic))
		topic = topic[:maxID-len(tail)-17] + "~" + hex.EncodeToString(sum[:8])
	}
	return topic + tail
}
