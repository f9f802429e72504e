package webhook

import (
	"crypto/x509"
	"net"
	"slices"
	"testing"
	"time"
)

var testPolicy = policy{
	names:           []string{"127.0.0.1", "opkit-webhook.opkit.svc"},
	caLifetime:      300 * 24 * time.Hour,
	servingLifetime: 30 * 24 * time.Hour,
	grace:           2 * time.Hour,
}

// verifies reports whether the serving certificate of st is trusted by
// roots at now, for every name of the policy.
func verifies(t *testing.T, serving *x509.Certificate, roots []*x509.Certificate, now time.Time) bool {
	t.Helper()
	pool := x509.NewCertPool()
	for _, c := range roots {
		pool.AddCert(c)
	}
	for _, n := range testPolicy.names {
		opts := x509.VerifyOptions{Roots: pool, CurrentTime: now, DNSName: n}
		if net.ParseIP(n) != nil {
			opts.DNSName = n // Verify checks IP SANs for an IP string
		}
		if _, err := serving.Verify(opts); err != nil {
			return false
		}
	}
	return true
}

func TestRotationKeepsEveryClientTrustingTheServerForFourHundredDays(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	st, step, err := plan(t0, nil, testPolicy, true)
	if err != nil || step != stepCreate {
		t.Fatalf("first plan: step %q, error %v; want %q", step, err, stepCreate)
	}
	if len(st.bundle) != 1 || !verifies(t, st.serving.cert, st.bundle, t0) {
		t.Fatal("the first serving certificate does not verify against the first bundle")
	}
	type taken struct {
		at   time.Time
		step string
	}
	var steps []taken
	// A check every hour, as the engine's CheckEvery would; the API
	// server holds the bundle of the check before.
	for now := t0.Add(time.Hour); now.Before(t0.Add(400 * 24 * time.Hour)); now = now.Add(time.Hour) {
		next, step, err := plan(now, st, testPolicy, true)
		if err != nil {
			t.Fatal(err)
		}
		if step == "" {
			if next != st {
				t.Fatalf("%s: no step, and yet a new state", now)
			}
			continue
		}
		steps = append(steps, taken{now, step})
		if !verifies(t, next.serving.cert, st.bundle, now) {
			t.Fatalf("%s: after %q the serving certificate is not trusted by the bundle the API server still holds", now, step)
		}
		if !verifies(t, next.serving.cert, next.bundle, now) {
			t.Fatalf("%s: after %q the serving certificate is not trusted by the new bundle", now, step)
		}
		if !verifies(t, st.serving.cert, next.bundle, now) && step != stepRemoveCA {
			t.Fatalf("%s: after %q the certificate still served by other replicas is not trusted", now, step)
		}
		st = next
		if again, step, _ := plan(now, st, testPolicy, true); step != "" || again != st {
			t.Fatalf("%s: a second step %q at the same time", now, step)
		}
	}
	var ca []taken
	renewals := 0
	for _, s := range steps {
		switch s.step {
		case stepRenew:
			renewals++
		case stepCreate:
			t.Fatalf("%s: the state was made anew: every client lost its trust", s.at)
		default:
			ca = append(ca, s)
		}
	}
	// The CA's span is 300 days and the backdate: due at 2/3 of it.
	if len(ca) != 3 || ca[0].step != stepNewCA || ca[1].step != stepSwitch || ca[2].step != stepRemoveCA {
		t.Fatalf("CA rotation steps %v; want new CA, switch, remove", ca)
	}
	if want := t0.Add(200*24*time.Hour - 20*time.Minute); ca[0].at.Before(want) || ca[0].at.After(want.Add(time.Hour)) {
		t.Errorf("the new CA came at %s; want at 2/3 of its lifetime, %s", ca[0].at, want)
	}
	for i := 1; i < 3; i++ {
		if gap := ca[i].at.Sub(ca[i-1].at); gap < testPolicy.grace {
			t.Errorf("%q came %s after %q; want at least the grace, %s", ca[i].step, gap, ca[i-1].step, testPolicy.grace)
		}
	}
	// 400 days of 30-day certificates renewed at 2/3 (20 days): 19 or
	// so, one of them the switch to the new CA.
	if renewals < 17 || renewals > 21 {
		t.Errorf("%d renewals of the serving certificate in 400 days; want about 19 (every 20 days)", renewals)
	}
	if len(st.bundle) != 1 || !st.bundle[0].Equal(st.signer.cert) {
		t.Error("after the rotation the bundle is not the new CA alone")
	}
}

func TestTheServingCertificateWaitsForTheNewBundleToBeInjected(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	p := testPolicy
	p.servingLifetime = p.caLifetime
	st, _, err := plan(t0, nil, p, true)
	if err != nil {
		t.Fatal(err)
	}
	at := t0.Add(200 * 24 * time.Hour)
	if st, _, err = plan(at, st, p, true); err != nil || len(st.bundle) != 2 {
		t.Fatalf("no new CA at 2/3 of the old one's life: %v", err)
	}
	// The grace has passed, but the configurations do not have the new
	// bundle: the serving certificate stays with the old CA.
	if _, step, _ := plan(at.Add(2*p.grace), st, p, false); step != "" {
		t.Errorf("step %q before the bundle was injected; want none", step)
	}
	if _, step, _ := plan(at.Add(2*p.grace), st, p, true); step != stepSwitch {
		t.Errorf("step %q once it was; want %q", step, stepSwitch)
	}
}

func TestAnExpiredCAIsMadeAnewAndANewNameRenewsTheServingCertificate(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	st, _, err := plan(t0, nil, testPolicy, true)
	if err != nil {
		t.Fatal(err)
	}
	// The engine was away longer than the CA's lifetime.
	_, step, err := plan(t0.Add(testPolicy.caLifetime+time.Hour), st, testPolicy, true)
	if err != nil || step != stepCreate {
		t.Errorf("after the CA expired: step %q, error %v; want %q", step, err, stepCreate)
	}
	// The engine is now reached at another name.
	p := testPolicy
	p.names = append(slices.Clone(p.names), "engine.example.com")
	next, step, err := plan(t0.Add(time.Hour), st, p, true)
	if err != nil || step != stepRenew {
		t.Fatalf("with a new name: step %q, error %v; want %q", step, err, stepRenew)
	}
	if next.serving.cert.VerifyHostname("engine.example.com") != nil || !slices.EqualFunc(next.bundle, st.bundle, (*x509.Certificate).Equal) {
		t.Error("the renewed certificate does not name the new name, or the bundle changed")
	}
}

func TestTheSecretsDataRoundTrips(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	p := testPolicy
	p.servingLifetime = p.caLifetime // still valid when the CA is due
	st, _, err := plan(t0, nil, p, true)
	if err != nil {
		t.Fatal(err)
	}
	st, _, _ = plan(t0.Add(200*24*time.Hour), st, p, true) // two CAs
	got, err := decodeState(st.encode())
	if err != nil {
		t.Fatal(err)
	}
	if len(got.bundle) != 2 || !got.signer.cert.Equal(st.signer.cert) || !got.serving.cert.Equal(st.serving.cert) || !got.stepAt.Equal(st.stepAt) {
		t.Fatal("the decoded state differs")
	}
	if again, step, _ := plan(t0.Add(200*24*time.Hour), got, p, true); step != "" || again != got {
		t.Errorf("the decoded state plans step %q at once", step)
	}
	if none, err := decodeState(map[string][]byte{}); none != nil || err != nil {
		t.Errorf("an empty Secret: %v, %v; want no state and no error", none, err)
	}
	if _, err := decodeState(map[string][]byte{keyBundle: []byte("junk")}); err == nil {
		t.Error("a Secret of junk decodes")
	}
}
