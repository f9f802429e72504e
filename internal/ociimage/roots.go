package ociimage

import (
	"encoding/pem"

	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// NSSRoots returns Mozilla's NSS trust store as a PEM bundle, the image's
// default /etc/ssl/certs/ca-certificates.crt. It comes from the Go module
// golang.org/x/crypto/x509roots/fallback at the version go.mod requires and
// go.sum pins, so it changes only with that version, never with the host
// that builds the image.
//
// Roots that NSS trusts only with a constraint X.509 cannot express (a
// distrust-after date) are left out: a PEM file would trust them without
// the constraint. Go's own fallback pool keeps them, constrained.
func NSSRoots() []byte {
	var out []byte
	for root := range bundle.Roots() {
		if root.Constraint != nil {
			continue
		}
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: root.Certificate})...)
	}
	return out
}
