package archive_test

import (
	"fmt"

	"github.com/opkit-dev/opkit/internal/archive"
)

func ExampleRedactDSN() {
	fmt.Println(archive.RedactDSN("postgres://opkit:s3cret@db.example.com/opkit?sslmode=verify-full"))
	fmt.Println(archive.RedactDSN("/var/lib/opkit/runs.db"))
	// Output:
	// postgres://opkit:xxxxx@db.example.com/opkit?sslmode=verify-full
	// /var/lib/opkit/runs.db
}
