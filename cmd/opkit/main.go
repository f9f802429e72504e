// Command opkit is the opkit CLI. Its commands live in internal/cli.
package main

import (
	"os"
	// Schedules name IANA time zones; a host or image without zoneinfo
	// still knows them.
	_ "time/tzdata"

	"github.com/opkit-dev/opkit/internal/cli"
)

func main() {
	cli.RouteKlog()
	os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
}
