package archive

import (
	"context"
	"net/url"
	"regexp"
	"strings"
)

// Open opens the archive at location, as --archive names it: the
// PostgreSQL database of a postgres:// or postgresql:// URL (OpenPostgres),
// else the SQLite file at that path (OpenSQLite). Its errors never show
// the URL's password.
func Open(ctx context.Context, location string, opts Options) (Store, error) {
	if IsDSN(location) {
		p, err := OpenPostgres(ctx, location, opts)
		if err != nil {
			return nil, err
		}
		return p, nil
	}
	s, err := OpenSQLite(ctx, location, opts)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// IsDSN reports whether location names a PostgreSQL database (a
// postgres:// or postgresql:// URL) rather than a SQLite file.
func IsDSN(location string) bool {
	return strings.HasPrefix(location, "postgres://") || strings.HasPrefix(location, "postgresql://")
}

// redactedPassword stands for a password in a DSN shown, as in
// url.URL.Redacted.
const redactedPassword = "xxxxx"

var (
	// secretParam is a URL query parameter that holds a password.
	secretParam = regexp.MustCompile(`(?i)((?:^|[?&])(?:ssl)?password=)([^&#]*)`)
	// secretKeyword is the password of a key=value connection string,
	// quoted or not.
	secretKeyword = regexp.MustCompile(`(?i)(\b(?:ssl)?password\s*=\s*)('(?:[^'\\]|\\.)*'|\S*)`)
)

// RedactDSN returns an archive's location fit to show: a PostgreSQL
// DSN's passwords (the URL's, a password or sslpassword parameter, a
// key=value string's) replaced by xxxxx. A path is returned as it is.
func RedactDSN(location string) string {
	if !IsDSN(location) {
		return secretKeyword.ReplaceAllString(location, "${1}"+redactedPassword)
	}
	if u, err := url.Parse(location); err == nil {
		u.RawQuery = secretParam.ReplaceAllString(u.RawQuery, "${1}"+redactedPassword)
		return u.Redacted()
	}
	// A URL that does not parse: everything between the user's name and
	// the last @ may be the password.
	scheme, rest, _ := strings.Cut(location, "://")
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		if user, _, found := strings.Cut(rest[:at], ":"); found {
			rest = user + ":" + redactedPassword + rest[at:]
		}
	}
	return scheme + "://" + secretParam.ReplaceAllString(rest, "${1}"+redactedPassword)
}

// scrubDSN replaces every password dsn holds, as written and unescaped,
// in msg: for messages of the driver, which quote what they could not
// read.
func scrubDSN(msg, dsn string) string {
	var secrets []string
	add := func(s string) {
		secrets = append(secrets, s)
		if u, err := url.QueryUnescape(s); err == nil {
			secrets = append(secrets, u)
		}
		if u, err := url.PathUnescape(s); err == nil {
			secrets = append(secrets, u)
		}
	}
	if IsDSN(dsn) {
		_, rest, _ := strings.Cut(dsn, "://")
		if at := strings.LastIndex(rest, "@"); at >= 0 {
			if _, pw, found := strings.Cut(rest[:at], ":"); found {
				add(pw)
			}
		}
		if u, err := url.Parse(dsn); err == nil && u.User != nil {
			if pw, ok := u.User.Password(); ok {
				add(pw)
			}
		}
		for _, m := range secretParam.FindAllStringSubmatch(dsn, -1) {
			add(m[2])
		}
	}
	for _, m := range secretKeyword.FindAllStringSubmatch(dsn, -1) {
		add(m[2])
		add(strings.Trim(m[2], "'"))
	}
	for _, s := range secrets {
		if s != "" {
			msg = strings.ReplaceAll(msg, s, redactedPassword)
		}
	}
	return msg
}
