// Package kafkatest starts an in-process Kafka cluster for tests (franz-go's
// kfake: the Kafka protocol, consumer groups and SASL, in memory), produces
// records to it and reads a group's committed offsets. A cluster lives until
// its test ends.
package kafkatest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// Options say what cluster Start starts.
type Options struct {
	// Topics are created at the start.
	Topics []string
	// Partitions is each topic's number of partitions. Defaults to 3.
	Partitions int32
	// Port is the broker's port on 127.0.0.1. Defaults to one free now.
	Port int
	// SASL, when set, makes the cluster take only clients that
	// authenticate as this user. The cluster's own clients (Produce,
	// Committed) do.
	SASL *User
}

// User is a SASL user.
type User struct {
	// Mechanism is PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.
	Mechanism, Name, Password string
}

// Cluster is a running cluster of one broker.
type Cluster struct {
	tb   testing.TB
	opts []kfake.Opt
	fake *kfake.Cluster
	cl   *kgo.Client
}

// Start starts a cluster, closed when tb ends.
func Start(tb testing.TB, o Options) *Cluster {
	tb.Helper()
	if o.Partitions == 0 {
		o.Partitions = 3
	}
	// Kept in a directory, the cluster can be stopped and started again
	// with its records and offsets: see Restart.
	opts := []kfake.Opt{kfake.NumBrokers(1), kfake.DataDir(tb.TempDir())}
	if len(o.Topics) > 0 {
		opts = append(opts, kfake.SeedTopics(o.Partitions, o.Topics...))
	}
	if o.Port == 0 {
		o.Port = FreePort(tb)
	}
	opts = append(opts, kfake.Ports(o.Port))
	if o.SASL != nil {
		opts = append(opts, kfake.EnableSASL(), kfake.Superuser(o.SASL.Mechanism, o.SASL.Name, o.SASL.Password))
	}
	fake, err := kfake.NewCluster(opts...)
	if err != nil {
		tb.Fatalf("starting a kfake cluster: %v", err)
	}
	tb.Cleanup(fake.Close)
	copts := []kgo.Opt{
		kgo.SeedBrokers(fake.ListenAddrs()...),
		// Records go to the partition their Partition field names.
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
	}
	if u := o.SASL; u != nil {
		switch u.Mechanism {
		case "PLAIN":
			copts = append(copts, kgo.SASL(plain.Auth{User: u.Name, Pass: u.Password}.AsMechanism()))
		case "SCRAM-SHA-256":
			copts = append(copts, kgo.SASL(scram.Auth{User: u.Name, Pass: u.Password}.AsSha256Mechanism()))
		case "SCRAM-SHA-512":
			copts = append(copts, kgo.SASL(scram.Auth{User: u.Name, Pass: u.Password}.AsSha512Mechanism()))
		default:
			tb.Fatalf("SASL mechanism %q: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", u.Mechanism)
		}
	}
	cl, err := kgo.NewClient(copts...)
	if err != nil {
		tb.Fatalf("a client of the kfake cluster: %v", err)
	}
	tb.Cleanup(cl.Close)
	return &Cluster{tb: tb, opts: opts, fake: fake, cl: cl}
}

// Stop stops the broker: its clients find nothing at its address until
// Restart.
func (c *Cluster) Stop() { c.fake.Close() }

// Restart starts the stopped broker again at its address, with the
// topics, records and offsets it had.
func (c *Cluster) Restart() {
	c.tb.Helper()
	fake, err := kfake.NewCluster(c.opts...)
	if err != nil {
		c.tb.Fatalf("restarting the kfake cluster: %v", err)
	}
	c.tb.Cleanup(fake.Close)
	c.fake = fake
}

// Addrs are the brokers' host:port.
func (c *Cluster) Addrs() []string { return c.fake.ListenAddrs() }

// Fake is the kfake cluster, for what this package does not do.
func (c *Cluster) Fake() *kfake.Cluster { return c.fake }

// Produce writes records synchronously, each to its Partition, and returns
// them with their offsets and timestamps set.
func (c *Cluster) Produce(records ...*kgo.Record) []*kgo.Record {
	c.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.cl.ProduceSync(ctx, records...).FirstErr(); err != nil {
		c.tb.Fatalf("producing %d records: %v", len(records), err)
	}
	return records
}

// ProduceN writes n records to topic, spread round the partitions (record
// i to partition i mod partitions), each with the key k<i> and the value
// {"n":i}, and returns them with their offsets set.
func (c *Cluster) ProduceN(topic string, partitions int32, n int) []*kgo.Record {
	c.tb.Helper()
	records := make([]*kgo.Record, n)
	for i := range records {
		body, err := json.Marshal(map[string]int{"n": i})
		if err != nil {
			c.tb.Fatal(err)
		}
		records[i] = &kgo.Record{Topic: topic, Partition: int32(i) % partitions, Key: []byte("k" + strconv.Itoa(i)), Value: body}
	}
	return c.Produce(records...)
}

// Committed returns group's committed offsets, by topic and partition: the
// offset of the next record each partition's consumer reads. A group that
// does not exist yet has none.
func (c *Cluster) Committed(group string) map[string]map[int32]int64 {
	c.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = group
	resp, err := req.RequestWith(ctx, c.cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	if errors.Is(err, kerr.GroupIDNotFound) {
		return map[string]map[int32]int64{} // no member yet
	}
	if err != nil {
		c.tb.Fatalf("reading the offsets of group %s: %v", group, err)
	}
	out := map[string]map[int32]int64{}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				c.tb.Fatalf("reading the offsets of group %s, %s partition %d: %v", group, t.Topic, p.Partition, err)
			}
			if out[t.Topic] == nil {
				out[t.Topic] = map[int32]int64{}
			}
			out[t.Topic][p.Partition] = p.Offset
		}
	}
	return out
}

// Members returns the instance ids of group's members, "" for a dynamic
// member: a static member stays one after it stopped, until the group's
// session timeout or the next member of its id.
func (c *Cluster) Members(group string) []string {
	c.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req := kmsg.NewPtrDescribeGroupsRequest()
	req.Groups = []string{group}
	resp, err := req.RequestWith(ctx, c.cl)
	if err == nil && len(resp.Groups) == 1 {
		err = kerr.ErrorForCode(resp.Groups[0].ErrorCode)
	}
	if err != nil {
		c.tb.Fatalf("describing group %s: %v", group, err)
	}
	var out []string
	for _, m := range resp.Groups[0].Members {
		out = append(out, ptrValue(m.InstanceID))
	}
	return out
}

func ptrValue(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// FreePort returns a port of 127.0.0.1 nothing listens on now: for a
// consumer that finds no broker there, then one started on it.
func FreePort(tb testing.TB) int {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		tb.Fatal(err)
	}
	return port
}

// Addr is 127.0.0.1:port.
func Addr(port int) string { return fmt.Sprintf("127.0.0.1:%d", port) }
