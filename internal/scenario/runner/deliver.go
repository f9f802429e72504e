package runner

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/source"
)

// Deliver posts a webhook delivery of body to an operator's source on an
// engine's hooks listener (hooksAddr), as the source's sender would: with
// the headers in h (the caller's: content type, delivery id, event), signed
// with the secret of the source's Secret (SourceSecret). It returns the
// answer's status and body (at most 64 KiB). opkit test's send steps and
// pkg/opkittest's Send both use it.
func Deliver(ctx context.Context, c client.Client, hooksAddr, operator string, src *definition.EventSource, body []byte, h http.Header) (int, []byte, error) {
	secret, err := SourceSecret(ctx, c, src.Secret)
	if err != nil {
		return 0, nil, err
	}
	url := "http://" + hooksAddr + "/hooks/" + operator + "/" + src.Name
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header = h.Clone()
	if err := source.Authorize(src, secret, body, req.Header); err != nil {
		return 0, nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("sending to source %s: %w", src.Name, err)
	}
	defer func() { _ = resp.Body.Close() }()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, answer, err
}

// secretsMu keeps parallel senders from making the same Secret at once.
var secretsMu sync.Mutex

// SourceSecret returns a source's secret from its Secret. When the Secret
// does not exist, it is made with a random value, in the namespace its
// secretRef names (made too when missing): the sender, whom tests play,
// knows the secret, and the engine verifies against the same Secret.
func SourceSecret(ctx context.Context, c client.Client, ref v1alpha1.SecretKeySelector) ([]byte, error) {
	secretsMu.Lock()
	defer secretsMu.Unlock()
	key := client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}
	var s corev1.Secret
	err := c.Get(ctx, key, &s)
	if apierrors.IsNotFound(err) {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ref.Namespace}}
		if err := c.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("creating the namespace %s of the source's Secret: %w", ref.Namespace, err)
		}
		s = corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ref.Namespace, Name: ref.Name, Labels: map[string]string{"opkit.dev/test": "source-secret"}},
			Data:       map[string][]byte{ref.Key: []byte(utilrand.String(32))},
		}
		err = c.Create(ctx, &s)
		if apierrors.IsAlreadyExists(err) { // made meanwhile, by the test itself
			err = c.Get(ctx, key, &s)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("the source's Secret %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	v, ok := s.Data[ref.Key]
	if !ok || len(bytes.TrimSpace(v)) == 0 {
		return nil, fmt.Errorf("the source's Secret %s/%s has no value for key %q", ref.Namespace, ref.Name, ref.Key)
	}
	return v, nil
}
