package ghpoll

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// renewBefore is how long before its expiry an installation token is
// made again.
const renewBefore = 5 * time.Minute

// token returns the credential of the next request: the token from its
// Secret, read now, or a GitHub App's installation token.
func (p *Poller) token(ctx context.Context) (string, error) {
	if ref := p.spec.TokenSecretRef; ref != nil {
		data, err := p.secrets(ctx, *ref)
		if err != nil {
			return "", fmt.Errorf("reading the token from Secret %s/%s, key %s: %w", ref.Namespace, ref.Name, ref.Key, err)
		}
		tok := strings.TrimSpace(string(data))
		if tok == "" {
			return "", fmt.Errorf("the token in Secret %s/%s, key %s, is empty", ref.Namespace, ref.Name, ref.Key)
		}
		return tok, nil
	}
	if p.appToken != "" && p.clock.Now().Add(renewBefore).Before(p.appUntil) {
		return p.appToken, nil
	}
	tok, until, err := p.installationToken(ctx)
	if err != nil {
		return "", err
	}
	p.appToken, p.appUntil = tok, until
	return tok, nil
}

// installationToken trades a JWT signed by the App's private key for an
// installation token (POST /app/installations/{id}/access_tokens).
func (p *Poller) installationToken(ctx context.Context) (string, time.Time, error) {
	a := p.spec.App
	ref := a.PrivateKeySecretRef
	where := fmt.Sprintf("the App's private key in Secret %s/%s, key %s", ref.Namespace, ref.Name, ref.Key)
	data, err := p.secrets(ctx, ref)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("reading %s: %w", where, err)
	}
	key, err := parseKey(data)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("%s: %w", where, err)
	}
	jwt, err := appJWT(key, a.AppID, p.clock.Now())
	if err != nil {
		return "", time.Time{}, fmt.Errorf("signing the App's JWT: %w", err)
	}
	u := strings.TrimSuffix(p.spec.APIURL, "/") + "/app/installations/" + strconv.FormatInt(a.InstallationID, 10) + "/access_tokens"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, nil)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("POST %s: %w", u, err)
	}
	req.Header.Set("Accept", "application/vnd.github+json")
	req.Header.Set("X-GitHub-Api-Version", "2022-11-28")
	req.Header.Set("User-Agent", "opkit")
	req.Header.Set("Authorization", "Bearer "+jwt)
	resp, err := p.client.Do(req)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("POST %s: %w", u, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", time.Time{}, fmt.Errorf("POST %s: reading the answer: %w", u, err)
	}
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		return "", time.Time{}, fmt.Errorf("POST %s: %d %s: GitHub makes no installation token: %s", u, resp.StatusCode, githubMessage(body), p.checkCredentials())
	}
	var out struct {
		Token     string    `json:"token"`
		ExpiresAt time.Time `json:"expires_at"`
	}
	if err := json.Unmarshal(body, &out); err != nil || out.Token == "" {
		return "", time.Time{}, fmt.Errorf("POST %s: the answer has no token", u)
	}
	return out.Token, out.ExpiresAt, nil
}

// parseKey reads an RSA private key in PEM: PKCS #1, as GitHub gives an
// App's, or PKCS #8.
func parseKey(data []byte) (*rsa.PrivateKey, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, errors.New("not a PEM private key (-----BEGIN RSA PRIVATE KEY-----, as GitHub gives it)")
	}
	if k, err := x509.ParsePKCS1PrivateKey(block.Bytes); err == nil {
		return k, nil
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("not an RSA private key: %w", err)
	}
	rk, ok := k.(*rsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("a %T, not an RSA private key: GitHub Apps sign with RSA", k)
	}
	return rk, nil
}

// appJWT is the App's JWT, as GitHub asks for it: RS256, issued 60 s in
// the past (for clocks that drift), expiring 9 minutes from now (GitHub
// allows 10), issued by the App's id.
func appJWT(key *rsa.PrivateKey, appID int64, now time.Time) (string, error) {
	enc := base64.RawURLEncoding
	header, _ := json.Marshal(map[string]string{"alg": "RS256", "typ": "JWT"})
	claims, _ := json.Marshal(map[string]any{"iat": now.Add(-60 * time.Second).Unix(), "exp": now.Add(9 * time.Minute).Unix(), "iss": strconv.FormatInt(appID, 10)})
	signed := enc.EncodeToString(header) + "." + enc.EncodeToString(claims)
	sum := sha256.Sum256([]byte(signed))
	sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, sum[:])
	if err != nil {
		return "", err
	}
	return signed + "." + enc.EncodeToString(sig), nil
}
