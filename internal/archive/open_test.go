package archive_test

import (
	"testing"

	"github.com/opkit-dev/opkit/internal/archive"
)

func TestRedactDSN(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"/var/lib/opkit/runs.db", "/var/lib/opkit/runs.db"},
		{"postgres://opkit@db.example.com/opkit", "postgres://opkit@db.example.com/opkit"},
		{"postgres://opkit:s3cret@db.example.com:5432/opkit?sslmode=verify-full", "postgres://opkit:xxxxx@db.example.com:5432/opkit?sslmode=verify-full"},
		{"postgresql://opkit:p%40ss%2Fword@db/opkit", "postgresql://opkit:xxxxx@db/opkit"},
		{"postgres://opkit@db/opkit?sslmode=require&password=s3cret&application_name=opkit", "postgres://opkit@db/opkit?sslmode=require&password=xxxxx&application_name=opkit"},
		{"postgres://opkit@db/opkit?sslpassword=s3cret", "postgres://opkit@db/opkit?sslpassword=xxxxx"},
		{"postgres://opkit@db/opkit?PASSWORD=s3cret", "postgres://opkit@db/opkit?PASSWORD=xxxxx"},
		// URLs that do not parse.
		{"postgres://opkit:s3cret@[::1/opkit", "postgres://opkit:xxxxx@[::1/opkit"},
		{"postgres://opkit:s3c@ret@db:port/opkit?password=again", "postgres://opkit:xxxxx@db:port/opkit?password=xxxxx"},
		// key=value strings (OpenPostgres takes them; Open takes them for files).
		{"host=db user=opkit password=s3cret dbname=opkit", "host=db user=opkit password=xxxxx dbname=opkit"},
		{"host=db password='s3 cret' dbname=opkit", "host=db password=xxxxx dbname=opkit"},
	} {
		if got := archive.RedactDSN(c.in); got != c.want {
			t.Errorf("RedactDSN(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestIsDSN(t *testing.T) {
	for in, want := range map[string]bool{
		"postgres://db/opkit":   true,
		"postgresql://db/opkit": true,
		"runs.db":               false,
		"./postgres://x":        false,
		"host=db dbname=opkit":  false,
		"mysql://db/opkit":      false,
	} {
		if got := archive.IsDSN(in); got != want {
			t.Errorf("IsDSN(%q) = %v, want %v", in, got, want)
		}
	}
}
