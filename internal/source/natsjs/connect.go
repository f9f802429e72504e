package natsjs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/opkit-dev/opkit/api/v1alpha1"
)

// connect connects to the server, finds the stream and creates or
// updates the durable consumer. lost is called once the connection is
// lost, with why.
func (c *Consumer) connect(ctx context.Context, lost func(error)) (*nats.Conn, jetstream.Consumer, error) {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	opts, err := c.options(ctx)
	if err != nil {
		return nil, nil, err
	}
	var async atomic.Pointer[error]
	opts = append(opts,
		nats.Name("opkit "+c.spec.Consumer),
		// Run reconnects, reading the credentials again, and says so in
		// State meanwhile; the client's own reconnection would hide it.
		nats.NoReconnect(),
		nats.Timeout(opTimeout),
		nats.PingInterval(20*time.Second),
		nats.MaxPingsOutstanding(3),
		// The client's errors (a write that failed, a slow subscription)
		// are not logged but said as why the connection was lost.
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { async.Store(&err) }),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				async.Store(&err)
			}
		}),
		nats.ClosedHandler(func(nc *nats.Conn) {
			err := nc.LastError()
			if p := async.Load(); err == nil && p != nil {
				err = *p
			}
			switch {
			case err == nil:
				err = errors.New("closed")
			case errors.Is(err, io.EOF):
				err = errors.New("the server closed it")
			}
			lost(err)
		}),
	)
	nc, err := nats.Connect(c.spec.URL, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("connecting to %s: %w", servers(c.spec.URL), err)
	}
	cons, err := c.consumer(ctx, nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, cons, nil
}

// consumer finds the stream and creates the durable consumer, or updates
// it keeping where it started.
func (c *Consumer) consumer(ctx context.Context, nc *nats.Conn) (jetstream.Consumer, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("JetStream on %s: %w", servers(c.spec.URL), err)
	}
	stream, err := js.Stream(ctx, c.spec.Stream)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return nil, fmt.Errorf("stream %s not found on %s: create it, or name an existing one in the source's nats.stream (opkit reads a stream, it never creates or deletes one): %w", c.spec.Stream, servers(c.spec.URL), err)
	case errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount):
		return nil, fmt.Errorf("stream %s on %s: %w", c.spec.Stream, servers(c.spec.URL), err)
	case err != nil:
		return nil, fmt.Errorf("looking up stream %s on %s: %w", c.spec.Stream, servers(c.spec.URL), err)
	}
	cfg := jetstream.ConsumerConfig{
		Durable:       c.spec.Consumer,
		Description:   "opkit: acknowledged once recorded in the run archive",
		DeliverPolicy: jetstream.DeliverNewPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       ackWait,
		MaxDeliver:    -1, // a message is never dropped for being delivered often
		MaxAckPending: maxAckPending,
	}
	if c.spec.DeliverPolicy == v1alpha1.DeliverAll {
		cfg.DeliverPolicy = jetstream.DeliverAllPolicy
	}
	switch len(c.spec.Subjects) {
	case 0:
	case 1:
		cfg.FilterSubject = c.spec.Subjects[0] // understood by servers before 2.10
	default:
		cfg.FilterSubjects = c.spec.Subjects
	}
	existing, err := stream.Consumer(ctx, c.spec.Consumer)
	switch {
	case err == nil:
		// A consumer's start cannot be changed, and the source's
		// deliverPolicy is only where a new one starts.
		was := existing.CachedInfo().Config
		cfg.DeliverPolicy, cfg.OptStartSeq, cfg.OptStartTime = was.DeliverPolicy, was.OptStartSeq, was.OptStartTime
	case !errors.Is(err, jetstream.ErrConsumerNotFound):
		return nil, fmt.Errorf("looking up consumer %s of stream %s: %w", c.spec.Consumer, c.spec.Stream, err)
	}
	cons, err := stream.CreateOrUpdateConsumer(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("creating or updating consumer %s of stream %s: %w", c.spec.Consumer, c.spec.Stream, err)
	}
	return cons, nil
}

// options are the connection's credentials and TLS, read from their
// Secrets now.
func (c *Consumer) options(ctx context.Context) ([]nats.Option, error) {
	read := func(field string, ref *v1alpha1.SecretKeySelector) (string, error) {
		if c.secrets == nil {
			return "", fmt.Errorf("reading the source's nats.%s: no Secrets reader", field)
		}
		b, err := c.secrets(ctx, *ref)
		if err != nil {
			return "", fmt.Errorf("reading the source's nats.%s (Secret %s/%s, key %s): %w", field, ref.Namespace, ref.Name, ref.Key, err)
		}
		if len(b) == 0 {
			return "", fmt.Errorf("the source's nats.%s (Secret %s/%s, key %s) is empty", field, ref.Namespace, ref.Name, ref.Key)
		}
		return string(b), nil
	}
	var opts []nats.Option
	switch s := c.spec; {
	case s.TokenSecretRef != nil:
		token, err := read("tokenSecretRef", s.TokenSecretRef)
		if err != nil {
			return nil, err
		}
		opts = append(opts, nats.Token(strings.TrimSpace(token)))
	case s.CredsSecretRef != nil:
		creds, err := read("credsSecretRef", s.CredsSecretRef)
		if err != nil {
			return nil, err
		}
		opts = append(opts, nats.UserCredentialBytes([]byte(creds)))
	case s.PasswordSecretRef != nil:
		password, err := read("passwordSecretRef", s.PasswordSecretRef)
		if err != nil {
			return nil, err
		}
		opts = append(opts, nats.UserInfo(s.Username, strings.TrimRight(password, "\r\n")))
	}
	if t := c.spec.TLS; t != nil {
		conf := &tls.Config{MinVersion: tls.VersionTLS12}
		if t.CASecretRef != nil {
			ca, err := read("tls.caSecretRef", t.CASecretRef)
			if err != nil {
				return nil, err
			}
			conf.RootCAs = x509.NewCertPool()
			if !conf.RootCAs.AppendCertsFromPEM([]byte(ca)) {
				return nil, fmt.Errorf("the source's nats.tls.caSecretRef (Secret %s/%s, key %s) holds no PEM certificate", t.CASecretRef.Namespace, t.CASecretRef.Name, t.CASecretRef.Key)
			}
		}
		opts = append(opts, nats.Secure(conf))
	}
	return opts, nil
}
