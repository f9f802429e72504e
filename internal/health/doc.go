// Package health is what the engine knows of the two things it cannot
// work without, the API server and the archive, and how it tells of them.
//
// Contract:
//
//   - [Watch] checks the API server's /readyz every [CheckEvery] (or at
//     once when asked), records each outcome in an [API] (the readiness
//     check "api-server") and an [Outage], and reports each change (away,
//     with why; back, after how long) once.
//   - An [Outage] holds what must wait for the API server's return: the
//     informers' list and watch calls (package informer) wait in
//     [Outage.Wait] instead of backing off, and its [Outage.QuietLogger]
//     leaves out client-go's lines for Events it will retry while the API
//     server is away. A nil Outage knows of no outage.
//   - An [ArchiveWriter] is the archive as the engine writes to it: it
//     reports when the archive stops and starts again recording runs,
//     keeps a run's end the archive refused and records it later
//     ([ArchiveWriter.RetryPending]), and says since when it fails
//     ([ArchiveWriter.Failure], the readiness check "archive").
//   - [Serve] serves /metrics, /healthz, /readyz (the checks it is given)
//     and /leader ([Lease]: which replica holds the leader election's
//     Lease), on an address bound at once.
//
// The package knows no operator or run: it is given a REST client, an
// archive and where to report.
package health
