package githubfake

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// GitHub App authentication: an App signs a JWT (RS256) with its private
// key and trades it for an installation token, which then authenticates
// as the token does.

// App is a GitHub App the server knows, installed once.
type App struct {
	// ID is the App's id, the JWT's iss.
	ID int64
	// InstallationID is its installation's id.
	InstallationID int64
	// Key is the App's public key, which verifies its JWTs.
	Key *rsa.PublicKey
	// TokenTTL is how long an installation token is good for. Defaults to
	// an hour, as GitHub's.
	TokenTTL time.Duration
}

// InstallationTokens returns how many installation tokens were issued.
func (s *Server) InstallationTokens() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.installTokens)
}

// ExpireInstallationTokens makes every installation token issued so far
// expired: requests with one are answered 401 from now on.
func (s *Server) ExpireInstallationTokens() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for tok := range s.installTokens {
		s.installTokens[tok] = time.Time{}
	}
}

// installationToken answers POST /app/installations/{id}/access_tokens,
// authenticated by the App's JWT. It is served before the token check.
func (s *Server) installationToken(w http.ResponseWriter, r *http.Request) {
	app := s.opts.App
	if app == nil {
		writeError(w, http.StatusNotFound, "Not Found")
		return
	}
	scheme, jwt, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	if !strings.EqualFold(scheme, "bearer") {
		writeError(w, http.StatusUnauthorized, "A JSON web token could not be decoded")
		return
	}
	if msg := verifyJWT(jwt, app, time.Now()); msg != "" {
		writeError(w, http.StatusUnauthorized, msg)
		return
	}
	if r.PathValue("id") != strconv.FormatInt(app.InstallationID, 10) {
		writeError(w, http.StatusNotFound, "Not Found")
		return
	}
	var b [20]byte
	_, _ = rand.Read(b[:])
	tok := "ghs_" + hex.EncodeToString(b[:])
	ttl := app.TokenTTL
	if ttl == 0 {
		ttl = time.Hour
	}
	expires := time.Now().Add(ttl).UTC().Truncate(time.Second)
	s.mu.Lock()
	s.installTokens[tok] = expires
	s.mu.Unlock()
	writeJSON(w, http.StatusCreated, map[string]any{
		"token":                tok,
		"expires_at":           expires.Format(time.RFC3339),
		"permissions":          map[string]any{"metadata": "read", "issues": "write"},
		"repository_selection": "all",
	})
}

// verifyJWT checks an App's JWT as GitHub does, and returns GitHub's
// message of what is wrong, "" when nothing is: RS256 by the App's key,
// iss the App's id, issued in the past, expiring in the future and at
// most 10 minutes after it was issued.
func verifyJWT(jwt string, app *App, now time.Time) string {
	parts := strings.Split(jwt, ".")
	if len(parts) != 3 {
		return "A JSON web token could not be decoded"
	}
	var header struct {
		Alg string `json:"alg"`
	}
	var claims struct {
		Iss json.RawMessage `json:"iss"`
		Iat int64           `json:"iat"`
		Exp int64           `json:"exp"`
	}
	for i, into := range []any{&header, &claims} {
		data, err := base64.RawURLEncoding.DecodeString(parts[i])
		if err != nil || json.Unmarshal(data, into) != nil {
			return "A JSON web token could not be decoded"
		}
	}
	if header.Alg != "RS256" {
		return fmt.Sprintf("'%s' is not a supported algorithm: RS256 is", header.Alg)
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return "A JSON web token could not be decoded"
	}
	sum := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if rsa.VerifyPKCS1v15(app.Key, crypto.SHA256, sum[:], sig) != nil {
		return "A JSON web token could not be decoded"
	}
	iss := strings.Trim(string(claims.Iss), `"`)
	switch {
	case iss != strconv.FormatInt(app.ID, 10):
		return fmt.Sprintf("'Issuer' claim ('iss') must be an Integer (the App's id), not %s", claims.Iss)
	case claims.Iat > now.Unix()+60:
		return "'Issued at' claim ('iat') must be an Integer representing a time in the past."
	case claims.Exp <= now.Unix():
		return "'Expiration time' claim ('exp') must be a numeric value representing the future time at which the assertion expires."
	case claims.Exp-claims.Iat > 10*60+60:
		return "'Expiration time' claim ('exp') is too far in the future"
	}
	return ""
}
