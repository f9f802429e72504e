package webhook

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"slices"
	"time"
)

// Secret keys (see the package doc).
const (
	keyBundle     = "ca.crt"
	keySignerCert = "signer.crt"
	keySignerKey  = "signer.key"
	keyCert       = "tls.crt"
	keyKey        = "tls.key"
	keyStepAt     = "step-at"
)

// backdate is how far before its issue a certificate is valid from: the
// clocks of the API server and of the engine's hosts may disagree.
const backdate = time.Hour

// keyPair is a certificate and its private key.
type keyPair struct {
	certPEM, keyPEM []byte
	cert            *x509.Certificate
	key             *ecdsa.PrivateKey
}

// certState is what the Secret holds.
type certState struct {
	// bundle are the CAs to trust, oldest first.
	bundle  []*x509.Certificate
	signer  *keyPair
	serving *keyPair
	// stepAt is when the last step of a CA rotation was taken.
	stepAt time.Time
}

// policy is what plan needs of Options.
type policy struct {
	names                       []string
	caLifetime, servingLifetime time.Duration
	grace                       time.Duration
}

// Steps plan takes, as it reports them.
const (
	stepCreate   = "created a CA and a serving certificate"
	stepNewCA    = "added a new CA to the bundle; the serving certificate switches to it after the grace period"
	stepSwitch   = "switched the serving certificate to the new CA"
	stepRemoveCA = "removed the old CA from the bundle"
	stepRenew    = "renewed the serving certificate"
)

// plan returns the state after the step due at now, and the step ("" when
// none is due; the state is then st). See the package doc for the steps.
// injected says whether st's bundle is in the caller's webhook
// configurations: the serving certificate does not switch to a new CA,
// nor does the old CA go, before it is.
func plan(now time.Time, st *certState, p policy, injected bool) (*certState, string, error) {
	if st == nil || st.signer == nil || st.serving == nil || !now.Before(st.signer.cert.NotAfter) ||
		!slices.ContainsFunc(st.bundle, func(c *x509.Certificate) bool { return c.Equal(st.signer.cert) }) ||
		!slices.ContainsFunc(st.bundle, func(c *x509.Certificate) bool { return signedBy(st.serving.cert, c) }) {
		ca, err := newCA(now, p.caLifetime)
		if err != nil {
			return nil, "", err
		}
		serving, err := newServing(now, p.servingLifetime, p.names, ca)
		if err != nil {
			return nil, "", err
		}
		return &certState{bundle: []*x509.Certificate{ca.cert}, signer: ca, serving: serving, stepAt: now}, stepCreate, nil
	}
	next := *st
	servedBySigner := signedBy(st.serving.cert, st.signer.cert)
	switch {
	case len(st.bundle) == 1 && due(st.signer.cert, now):
		ca, err := newCA(now, p.caLifetime)
		if err != nil {
			return nil, "", err
		}
		next.bundle = []*x509.Certificate{st.bundle[0], ca.cert}
		next.signer, next.stepAt = ca, now
		return &next, stepNewCA, nil
	case !servedBySigner && injected && !now.Before(st.stepAt.Add(p.grace)):
		serving, err := newServing(now, p.servingLifetime, p.names, st.signer)
		if err != nil {
			return nil, "", err
		}
		next.serving, next.stepAt = serving, now
		return &next, stepSwitch, nil
	case len(st.bundle) > 1 && servedBySigner && injected && !now.Before(st.stepAt.Add(p.grace)):
		next.bundle = []*x509.Certificate{st.signer.cert}
		next.stepAt = now
		return &next, stepRemoveCA, nil
	case !servedBySigner && !now.Before(st.serving.cert.NotAfter):
		// Expired while waiting out the grace: nothing else serves.
		serving, err := newServing(now, p.servingLifetime, p.names, st.signer)
		if err != nil {
			return nil, "", err
		}
		next.serving = serving
		return &next, stepRenew, nil
	case servedBySigner && (due(st.serving.cert, now) || !covers(st.serving.cert, p.names)):
		serving, err := newServing(now, p.servingLifetime, p.names, st.signer)
		if err != nil {
			return nil, "", err
		}
		next.serving = serving
		return &next, stepRenew, nil
	}
	return st, "", nil
}

// due reports whether a certificate is past 2/3 of its lifetime at now.
func due(c *x509.Certificate, now time.Time) bool {
	return !now.Before(c.NotAfter.Add(-c.NotAfter.Sub(c.NotBefore) / 3))
}

// signedBy reports whether c is signed by ca.
func signedBy(c, ca *x509.Certificate) bool {
	return c.CheckSignatureFrom(ca) == nil
}

// covers reports whether c is valid for every name.
func covers(c *x509.Certificate, names []string) bool {
	for _, n := range names {
		if c.VerifyHostname(n) != nil {
			return false
		}
	}
	return true
}

// newCA makes a self-signed CA valid for lifetime from now (and backdate
// before).
func newCA(now time.Time, lifetime time.Duration) (*keyPair, error) {
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "opkit webhook CA " + now.UTC().Format("2006-01-02T15:04:05Z")},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(lifetime),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	return issue(tmpl, nil)
}

// newServing makes a serving certificate for names signed by ca, valid for
// lifetime from now, and never past the CA.
func newServing(now time.Time, lifetime time.Duration, names []string, ca *keyPair) (*keyPair, error) {
	if len(names) == 0 {
		return nil, errors.New("webhook: the serving certificate needs a name")
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: names[0]},
		NotBefore:   now.Add(-backdate),
		NotAfter:    now.Add(lifetime),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if tmpl.NotAfter.After(ca.cert.NotAfter) {
		tmpl.NotAfter = ca.cert.NotAfter
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	return issue(tmpl, ca)
}

// issue signs tmpl with a new P-256 key, by parent (nil: self-signed).
func issue(tmpl *x509.Certificate, parent *keyPair) (*keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	if tmpl.SerialNumber, err = rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128)); err != nil {
		return nil, err
	}
	issuer, signer := tmpl, key
	if parent != nil {
		issuer, signer = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, issuer, &key.PublicKey, signer)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return &keyPair{
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
		cert:    cert, key: key,
	}, nil
}

// bundlePEM is the bundle as PEM, the caBundle.
func (st *certState) bundlePEM() []byte {
	var b bytes.Buffer
	for _, c := range st.bundle {
		_ = pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
	}
	return b.Bytes()
}

// encode is the state as the Secret's data.
func (st *certState) encode() map[string][]byte {
	return map[string][]byte{
		keyBundle:     st.bundlePEM(),
		keySignerCert: st.signer.certPEM, keySignerKey: st.signer.keyPEM,
		keyCert: st.serving.certPEM, keyKey: st.serving.keyPEM,
		keyStepAt: []byte(st.stepAt.UTC().Format(time.RFC3339Nano)),
	}
}

// decodeState reads the Secret's data: nil for none (an empty Secret, as
// the manifests make it); an error for data that is not a state, which
// plan replaces.
func decodeState(data map[string][]byte) (*certState, error) {
	if len(data[keyBundle]) == 0 {
		return nil, nil
	}
	st := &certState{}
	rest := data[keyBundle]
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", keyBundle, err)
		}
		st.bundle = append(st.bundle, c)
	}
	var err error
	if st.signer, err = decodeKeyPair(data[keySignerCert], data[keySignerKey]); err != nil {
		return nil, fmt.Errorf("%s: %w", keySignerCert, err)
	}
	if st.serving, err = decodeKeyPair(data[keyCert], data[keyKey]); err != nil {
		return nil, fmt.Errorf("%s: %w", keyCert, err)
	}
	if st.stepAt, err = time.Parse(time.RFC3339Nano, string(data[keyStepAt])); err != nil {
		return nil, fmt.Errorf("%s: %w", keyStepAt, err)
	}
	return st, nil
}

func decodeKeyPair(certPEM, keyPEM []byte) (*keyPair, error) {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return nil, errors.New("not an ECDSA key")
	}
	return &keyPair{certPEM: certPEM, keyPEM: keyPEM, cert: pair.Leaf, key: key}, nil
}

// tlsCertificate is the serving certificate as crypto/tls serves it.
func (k *keyPair) tlsCertificate() (*tls.Certificate, error) {
	c, err := tls.X509KeyPair(k.certPEM, k.keyPEM)
	return &c, err
}
