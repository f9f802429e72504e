package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/internal/conversion"
	"github.com/opkit-dev/opkit/internal/definition"
)

// An operator whose versions declare conversion (docs/conversion.md) has
// a CRD of conversion strategy Webhook, answered by the webhook server at
// definition.ConversionPath(operator), /convert/<operator>, with the
// server's certificates: the CRD's clientConfig is the URL or the Service
// the admission webhooks use, and its caBundle is the server's, applied
// again when the bundle changes (a rotation), as the webhook
// configurations' are. An engine without a webhook server refuses such an
// operator (CheckConversion).
//
// Every replica with the operator applied answers its conversions, leader
// or not, and a conversion needs no leader. The API server reaches one of
// them: by URL the engine that installed the CRD last, through a Service
// the replica its EndpointSlice names, the acting one, which has every
// operator applied. The converter is replaced whole when a definition is
// installed (InstallCRD), apart from the controller, so that conversions
// are answered while the controller restarts; it stays when the operator
// is removed, for its CRD and objects stay, and reads at a version other
// than the stored one need it. Between a new leader's election and its
// applying the operator, conversions of the objects not stored at the
// version asked for fail (the API server answers 500 to the read, and
// watches retry), as admission calls fall to their failure policy then.

// converter answers one operator's conversion calls.
type converter struct {
	*conversion.Converter
	// def is the definition of the CRD installed with it.
	def *definition.Definition
}

// ConversionHandler serves /convert/<operator>.
func (o *Operators) ConversionHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimPrefix(r.URL.Path, definition.ConversionPath(""))
		if !Posted(w, r, "conversion reviews") {
			return
		}
		o.convMu.Lock()
		c := o.converters[name]
		o.convMu.Unlock()
		if c == nil {
			http.Error(w, fmt.Sprintf("no conversion of operator %q is served here", ClipName(name)), http.StatusNotFound)
			return
		}
		body, err := ReadBody(w, r, o.Server.MaxBodyBytes())
		if err != nil {
			return
		}
		var review apiextensionsv1.ConversionReview
		if err := json.Unmarshal(body, &review); err != nil || review.Request == nil {
			http.Error(w, "the body is not a ConversionReview with a request", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(c.Review(&review))
	})
}

// setConverter makes d's conversion answer its operator's conversion
// calls from now on (an operator without conversion has none), and
// returns what it replaced, to put back with restoreConverter.
func (o *Operators) setConverter(d *definition.Definition) (*converter, error) {
	var c *conversion.Converter
	if d.Conversion != nil {
		var err error
		if c, err = conversion.New(d); err != nil {
			return nil, fmt.Errorf("operator %s: %w", d.Operator.Name, err)
		}
	}
	o.convMu.Lock()
	defer o.convMu.Unlock()
	if o.converters == nil {
		o.converters = map[string]*converter{}
	}
	old := o.converters[d.Operator.Name]
	if c == nil {
		delete(o.converters, d.Operator.Name)
	} else {
		o.converters[d.Operator.Name] = &converter{Converter: c, def: d}
	}
	return old, nil
}

// restoreConverter puts back what setConverter replaced.
func (o *Operators) restoreConverter(name string, old *converter) {
	o.convMu.Lock()
	defer o.convMu.Unlock()
	if old == nil {
		delete(o.converters, name)
	} else {
		o.converters[name] = old
	}
}

// conversionClientConfig is how the API server reaches d's conversion:
// the URL or Service of the webhook server at ConversionPath, with the
// server's current CA bundle; nil for a definition without conversion.
func (o *Operators) conversionClientConfig(d *definition.Definition) *apiextensionsv1.WebhookClientConfig {
	if d.Conversion == nil || o.Server == nil {
		return nil
	}
	path := definition.ConversionPath(d.Operator.Name)
	cc := &apiextensionsv1.WebhookClientConfig{CABundle: o.Server.CABundle()}
	if s, u := o.clientConfig(path); s != nil {
		cc.Service = &apiextensionsv1.ServiceReference{Namespace: s.Namespace, Name: s.Name, Path: &path, Port: ptr.To(s.port())}
	} else {
		cc.URL = u
	}
	return cc
}

// CRD is d's CRD as the engine installs it: with its conversion webhook's
// clientConfig when d declares conversion.
func (o *Operators) CRD(d *definition.Definition) *apiextensionsv1.CustomResourceDefinition {
	return d.CRDWith(definition.CRDOptions{ConversionWebhook: o.conversionClientConfig(d)})
}

// CheckConversion refuses a definition with conversion on an engine
// without a webhook server, and otherwise waits until the server has its
// certificate (the CRD carries its CA bundle).
func (o *Operators) CheckConversion(ctx context.Context, d *definition.Definition) error {
	if d.Conversion == nil {
		return nil
	}
	if o.Server == nil {
		return fmt.Errorf("operator %s: spec.resource.versions declare a conversion, which the engine's webhook server answers (the CRD's conversion webhook), and it runs none: give it an address (opkit run --webhook-addr)", d.Operator.Name)
	}
	return o.waitReady(ctx, d.Operator.Name)
}

// InstallCRD applies d's CRD as the engine installs it. The converter is
// set first, so that the API server's first conversion is answered, and
// put back if the CRD is refused; the write of the CA bundle is ordered
// with injectConversionBundle's.
func (o *Operators) InstallCRD(ctx context.Context, d *definition.Definition) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	old, err := o.setConverter(d)
	if err != nil {
		return err
	}
	if err := o.ApplyCRD(ctx, o.CRD(d)); err != nil {
		o.restoreConverter(d.Operator.Name, old)
		return err
	}
	return nil
}

// injectConversionBundle applies again, with the server's CA bundle, the
// CRD of every operator whose conversion is answered here. The whole CRD
// is applied, as InstallCRD does, and not its caBundle alone: a field
// written by another kind of request would have a second owner, and stay
// when a definition without conversion is applied (the API server then
// refuses a clientConfig without the Webhook strategy).
func (o *Operators) injectConversionBundle(ctx context.Context) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.convMu.Lock()
	defs := make([]*definition.Definition, 0, len(o.converters))
	for _, c := range o.converters {
		defs = append(defs, c.def)
	}
	o.convMu.Unlock()
	var errs []error
	for _, d := range defs {
		if err := o.reapplyConversionCRD(ctx, d); err != nil {
			errs = append(errs, fmt.Errorf("operator %s: the CA bundle of its CRD's conversion webhook: %w", d.Operator.Name, err))
		}
	}
	return errors.Join(errs...)
}

// reapplyConversionCRD applies d's CRD with the current bundle, if it is
// installed, still d's operator's, and its bundle differs. A deleted CRD
// is the engine's CRD guard's to install again.
func (o *Operators) reapplyConversionCRD(ctx context.Context, d *definition.Definition) error {
	crd := o.CRD(d)
	var live apiextensionsv1.CustomResourceDefinition
	err := o.Reader.Get(ctx, client.ObjectKey{Name: crd.Name}, &live)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if definition.OperatorName(&live) != d.Operator.Name || live.DeletionTimestamp != nil {
		return nil
	}
	if c := live.Spec.Conversion; c != nil && c.Webhook != nil && c.Webhook.ClientConfig != nil &&
		bytes.Equal(c.Webhook.ClientConfig.CABundle, crd.Spec.Conversion.Webhook.ClientConfig.CABundle) {
		return nil
	}
	return o.ApplyCRD(ctx, crd)
}
