// Package webhook is the engine's HTTPS server for the API server's calls:
// admission reviews, CRD conversion, and the requests the aggregation
// layer proxies to an aggregated API (package aggregate makes that server,
// with Options.ClientCerts). It owns the server's certificates and keeps
// them valid without downtime. Operators tells the API server to call it
// for the operators an engine runs (their admission webhook
// configurations, their CRDs' conversion webhook) and answers their
// conversion calls.
//
// # Certificates
//
// A self-signed CA (ECDSA P-256) signs the serving certificate, whose
// names are the DNS names and IP addresses the API server reaches the
// server at (Options.Names). Both live in one Secret in the engine's
// namespace (Options.Secret): every replica, and every restart, uses the
// same CA, so that the caBundle the API server holds stays valid. The
// Secret's keys:
//
//	ca.crt                the CAs to trust (the caBundle): one, or two during a CA rotation
//	signer.crt signer.key the CA that signs new serving certificates
//	tls.crt tls.key       the serving certificate and its key
//	step-at               when the last rotation step was taken (RFC 3339)
//
// The engine reads the Secret every Options.CheckEvery and takes at most
// one step of the plan below (plan, a pure function of the Secret and the
// clock's time), writing the Secret guarded by its resourceVersion, so
// that replicas that race agree on one result:
//
//  1. No Secret, or one whose certificates have expired: a new CA and a
//     serving certificate signed by it.
//  2. The signer past 2/3 of its lifetime: a new CA joins the bundle and
//     becomes the signer; the serving certificate stays (signed by the old
//     one, which is still trusted).
//  3. The serving certificate not signed by the signer, Options.Grace
//     after the step before (the new bundle is in the API server's
//     configurations by then), and once this replica's OnBundle has taken
//     the new bundle: a serving certificate signed by the new CA.
//  4. A CA in the bundle that signs nothing served, Grace after the step
//     before (every replica serves the new certificate by then), and once
//     OnBundle has taken the bundle: removed.
//
// A replica whose OnBundle fails (it cannot write its configurations)
// holds the rotation at step 2 until it succeeds: the API server never
// meets a certificate its caBundle does not trust.
//  5. The serving certificate past 2/3 of its lifetime, or without one of
//     Names: a new one, signed by the signer.
//
// The serving certificate is served through tls.Config.GetCertificate:
// a new one is given to new connections at once, and connections open
// keep theirs. Options.OnBundle is called with the bundle whenever it
// changes (and once at start), for the caller to inject it into its
// webhook configurations (caBundle) and, later, CRD conversions. The
// clock is Options.Clock, so that a test forces a rotation by stepping
// it.
//
// # Server
//
// HTTP/2 is disabled (TLSNextProto is an empty map): the API server
// speaks HTTP/1.1 to webhooks, and HTTP/2's stream resets are the
// rapid-reset attack of CVE-2023-44487 that one client could use to
// exhaust the server. Requests have read, write and idle timeouts, and
// bodies are capped at Options.MaxBodyBytes (ReadBody). Paths are those
// registered with Handle before Start. A Server is a controller-runtime
// Runnable that every replica runs (it needs no leader election): Start
// serves until its context ends, then shuts down within 5s.
package webhook
