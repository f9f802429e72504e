package kafkasrc

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/opkit-dev/opkit/api/v1alpha1"
)

// client makes a session's client: a member of the source's group that
// commits nothing by itself and holds rebalances from a poll to
// AllowRebalance. Its credentials are read now, so that a rotated
// password or CA is used by the next session.
func (c *Consumer) client(ctx context.Context) (*kgo.Client, error) {
	s := c.spec
	var self atomic.Pointer[kgo.Client]
	start := kgo.NewOffset().AtEnd()
	if s.StartOffset == v1alpha1.OffsetEarliest {
		start = kgo.NewOffset().AtStart()
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(s.Brokers...),
		kgo.ClientID("opkit"),
		kgo.ConsumerGroup(s.Group),
		kgo.ConsumeTopics(s.Topics...),
		kgo.ConsumeResetOffset(start),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsRevoked(c.unassigned),
		kgo.OnPartitionsLost(c.unassigned),
		kgo.AdjustFetchOffsetsFn(func(ctx context.Context, offsets map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
			return c.pinStart(ctx, &self, offsets)
		}),
		kgo.WithHooks(hooks{c}),
	}
	if c.instance != "" {
		opts = append(opts, kgo.InstanceID(c.instance))
	}
	if s.TLS != nil {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if ref := s.TLS.CASecretRef; ref != nil {
			pem, err := c.secrets(ctx, *ref)
			if err != nil {
				return nil, fmt.Errorf("reading the TLS CA of Secret %s key %s: %w", ref.Name, ref.Key, err)
			}
			cfg.RootCAs = x509.NewCertPool()
			if !cfg.RootCAs.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("the TLS CA of Secret %s key %s holds no PEM certificate", ref.Name, ref.Key)
			}
		}
		opts = append(opts, kgo.DialTLSConfig(cfg))
	}
	if a := s.SASL; a != nil {
		ref := a.PasswordSecretRef
		pw, err := c.secrets(ctx, ref)
		if err != nil {
			return nil, fmt.Errorf("reading the SASL password of Secret %s key %s: %w", ref.Name, ref.Key, err)
		}
		// A Secret's value often ends with the newline of the file it
		// was made from.
		pass := strings.TrimRight(string(pw), "\r\n")
		if pass == "" {
			return nil, fmt.Errorf("the SASL password of Secret %s key %s is empty", ref.Name, ref.Key)
		}
		var m sasl.Mechanism
		switch a.Mechanism {
		case "PLAIN":
			m = plain.Auth{User: a.Username, Pass: pass}.AsMechanism()
		case "SCRAM-SHA-256":
			m = scram.Auth{User: a.Username, Pass: pass}.AsSha256Mechanism()
		default: // SCRAM-SHA-512, as check requires
			m = scram.Auth{User: a.Username, Pass: pass}.AsSha512Mechanism()
		}
		c.saslStarted.Store(0)
		c.saslDone.Store(0)
		opts = append(opts, kgo.SASL(watchedMechanism{m, c}))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	self.Store(cl)
	return cl, nil
}

// saslFailed says, for the error of a session's first request, that the
// SASL authentication began and did not complete: a broker that refuses
// the credentials may answer so (SASL_AUTHENTICATION_FAILED) or close the
// connection, leaving only an EOF to say.
func (c *Consumer) saslFailed() string {
	if c.spec.SASL != nil && c.saslStarted.Load() > c.saslDone.Load() {
		return "the SASL authentication did not complete (a wrong user or password, or a mechanism the broker does not take): "
	}
	return ""
}

// watchedMechanism counts the authentications of its mechanism begun
// and completed.
type watchedMechanism struct {
	sasl.Mechanism
	c *Consumer
}

func (m watchedMechanism) Authenticate(ctx context.Context, host string) (sasl.Session, []byte, error) {
	s, first, err := m.Mechanism.Authenticate(ctx, host)
	if err != nil {
		return s, first, err
	}
	m.c.saslStarted.Add(1)
	return watchedSession{s, m.c}, first, nil
}

type watchedSession struct {
	sasl.Session
	c *Consumer
}

func (s watchedSession) Challenge(in []byte) (bool, []byte, error) {
	done, out, err := s.Session.Challenge(in)
	if done && err == nil {
		s.c.saslDone.Add(1)
	}
	return done, out, err
}

// as says who the client authenticates as, for an error.
func (c *Consumer) as() string {
	if a := c.spec.SASL; a != nil {
		return fmt.Sprintf(" as %s (SASL %s)", a.Username, a.Mechanism)
	}
	return ""
}

// unassigned forgets the lag and pins of partitions the member no longer
// has. It
// runs while rebalances are allowed: between two polls' deliveries, when
// all that was delivered is committed.
func (c *Consumer) unassigned(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for topic, ps := range lost {
		for _, n := range ps {
			delete(c.lag, partition{topic, n})
			delete(c.pins, partition{topic, n})
		}
	}
}

// hooks keep when a broker last answered, and the last failure to reach
// one.
type hooks struct{ c *Consumer }

var (
	_ kgo.HookBrokerRead    = hooks{}
	_ kgo.HookBrokerConnect = hooks{}
)

func (h hooks) OnBrokerRead(_ kgo.BrokerMetadata, _ int16, _ int, _, _ time.Duration, err error) {
	if err == nil {
		h.c.last.Store(time.Now().UnixNano())
	}
}

func (h hooks) OnBrokerConnect(meta kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	if err != nil {
		err = fmt.Errorf("broker %s: %w", net.JoinHostPort(meta.Host, fmt.Sprint(meta.Port)), err)
		h.c.lastErr.Store(&err)
	}
}
