package executor

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/tracing"
)

// SecretValue reads one key of a Secret.
type SecretValue func(ctx context.Context, namespace, name, key string) (string, error)

// HTTP posts the binding context to a URL. A 2xx response's body is the
// result; 408, 429 and 5xx are temporary failures; any other status is a
// permanent one. The token, when configured, is read from its Secret for
// each run and never logged.
//
// The runs of one HTTP share its client: their connections are kept
// alive and reused (up to maxIdlePerHost idle ones), so that a run costs
// a request, not a new connection and, for an https URL, a handshake.
type HTTP struct {
	Action v1alpha1.HTTPAction
	// Secret reads the token. Required when Action.TokenSecret is set.
	Secret SecretValue
	// Transport overrides the default transport (for tests).
	Transport http.RoundTripper

	once   sync.Once
	shared *http.Client
	err    error // the client's, for good: the action does not change
}

// maxIdlePerHost is how many idle connections the runs of one HTTP
// handler keep to its host: as many as an operator runs at once by
// default (engine.Options.MaxConcurrentRuns), so that a burst finds them
// open (net/http keeps 2).
const maxIdlePerHost = 16

// Run posts once. The token, when there is one, is the run's secret: a
// server that echoes it (in an error page, a result's status or message)
// has it written as *** in the run's log and result, as an exec
// handler's Secret values are.
func (h *HTTP) Run(ctx context.Context, req Request) (*Result, error) {
	ctx, cancel := context.WithTimeout(ctx, req.Timeout)
	defer cancel()
	log := &redactor{w: req.Log}
	req.Log = log
	res, err := h.post(ctx, req, log)
	log.Flush()
	return log.hidden.redactResult(res, err)
}

// post makes the request, writing its log to log, whose hidden values
// the token becomes the moment it is read: the log, the quotes of the
// response (cut after the token is written as ***) and the result show
// it nowhere.
func (h *HTTP) post(ctx context.Context, req Request, log *redactor) (*Result, error) {
	client, err := h.client()
	if err != nil {
		return nil, &Failure{Message: err.Error(), Permanent: true}
	}
	httpReq, err := http.NewRequestWithContext(ctx, http.MethodPost, h.Action.URL, bytes.NewReader(req.Input))
	if err != nil {
		return nil, &Failure{Message: err.Error(), Permanent: true}
	}
	httpReq.Header.Set("Content-Type", "application/json")
	httpReq.Header.Set("Accept", "application/json")
	httpReq.Header.Set("Opkit-Run-Id", req.RunID)
	httpReq.Header.Set("Idempotency-Key", req.Key)
	tracing.Inject(ctx, httpReq.Header) // traceparent, tracestate: the run's span
	if s := h.Action.TokenSecret; s != nil {
		if h.Secret == nil {
			return nil, &Failure{Message: "no Secret reader for tokenSecret", Permanent: true}
		}
		token, err := h.Secret(ctx, s.Namespace, s.Name, s.Key)
		if err != nil {
			return nil, &Failure{Message: fmt.Sprintf("reading the token from Secret %s/%s key %s: %v", s.Namespace, s.Name, s.Key, err)}
		}
		log.hidden = secrets{token}
		httpReq.Header.Set("Authorization", "Bearer "+token)
	}
	start := time.Now()
	resp, err := client.Do(httpReq)
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, &Failure{Message: fmt.Sprintf("POST %s: timed out after %s", h.Action.URL, req.Timeout)}
		}
		return nil, &Failure{Message: fmt.Sprintf("POST %s: %v", h.Action.URL, err)}
	}
	defer resp.Body.Close()
	body := &limitedBuffer{limit: MaxResultBytes}
	if _, err := io.Copy(body, resp.Body); err != nil {
		return nil, &Failure{Message: fmt.Sprintf("POST %s: reading the response: %v", h.Action.URL, err)}
	}
	fmt.Fprintf(req.Log, "POST %s: %s in %s\n", h.Action.URL, resp.Status, time.Since(start).Round(time.Millisecond))
	switch {
	case body.overflow:
		return nil, &Failure{Message: fmt.Sprintf("POST %s: the response exceeded the %d-byte limit of a result", h.Action.URL, MaxResultBytes)}
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return log.hidden.parseResult(body.buf.Bytes())
	}
	fmt.Fprintf(req.Log, "%s\n", log.hidden.excerpt(body.buf.Bytes()))
	temporary := resp.StatusCode == http.StatusRequestTimeout || resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500
	return nil, &Failure{Message: fmt.Sprintf("POST %s: %s", h.Action.URL, resp.Status), Permanent: !temporary}
}

// client is the client of every run, made at the first.
func (h *HTTP) client() (*http.Client, error) {
	h.once.Do(func() { h.shared, h.err = h.newClient() })
	return h.shared, h.err
}

func (h *HTTP) newClient() (*http.Client, error) {
	if h.Transport != nil {
		return &http.Client{Transport: h.Transport}, nil
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = maxIdlePerHost
	if h.Action.CABundle != "" {
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM([]byte(h.Action.CABundle)) {
			return nil, errors.New("caBundle holds no PEM certificate")
		}
		t.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return &http.Client{Transport: t, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}, nil
}
