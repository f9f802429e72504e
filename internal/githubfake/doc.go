// Package githubfake is a local GitHub for tests: an HTTP server that
// answers the REST endpoints opkit's examples call, with GitHub's paths
// and JSON shapes, over repositories, pull requests, comments and teams
// the test makes; and a sender of signed webhook deliveries, as GitHub
// sends them.
//
//	gh := githubfake.New(t, githubfake.Options{})
//	base := gh.CreateRepo("packit/packit-service")
//	pr := gh.MergePull("packit/packit-service", "alice", "Fix the worker", 2)
//	// run the code under test with GITHUB_API_URL=gh.URL and
//	// GITHUB_TOKEN=githubfake.DefaultToken, then assert on the world:
//	comments := gh.Comments("packit/packit-service", pr.Number)
//
// # The REST API it serves
//
// Under URL, as GITHUB_API_URL (https://api.github.com for the real one):
//
//	GET  /repos/{owner}/{repo}/compare/{base}...{head}
//	GET  /repos/{owner}/{repo}/commits/{ref}
//	GET  /repos/{owner}/{repo}/commits/{sha}/pulls
//	GET  /repos/{owner}/{repo}/issues/{number}/comments
//	POST /repos/{owner}/{repo}/issues/{number}/comments
//	GET  /orgs/{org}/teams/{team}/memberships/{username}
//	GET  /repos/{owner}/{repo}/events
//	GET  /orgs/{org}/events
//	POST /app/installations/{id}/access_tokens
//
// Every request must carry the token, as "Authorization: Bearer <token>"
// or "Authorization: token <token>"; without it the answer is 401 Bad
// credentials, as GitHub's. An unknown path, repository, issue or
// membership is 404 Not Found, an unknown commit 422 ("No commit found
// for SHA"), a comment without a body 422 Validation Failed. Lists
// paginate with per_page (default 30, at most 100) and page, and say
// where the next page is in a Link header (rel next, last, first, prev);
// compare without either returns up to 250 commits, as GitHub does.
// Names of repositories, organisations, teams and users are
// case-insensitive.
//
// # The world it holds
//
// Repositories have a history of commits (SHA-1s, made deterministically
// from what the test does, so two runs of a test see the same SHAs) on one
// default branch, main. A pull request has its own commits, branched from
// main's head when it is opened; merging it adds a merge commit whose
// parents are main's head and the pull request's last commit, as GitHub's
// "Create a merge commit" does. compare lists the commits reachable from
// head and not from base, oldest first, with status ahead, behind,
// diverged or identical. commits/{sha}/pulls lists the pull requests a
// commit belongs to (one of its commits, or its merge commit), as
// GitHub's "List pull requests associated with a commit". Pull requests
// and issues share one sequence of numbers, and both take comments.
//
// # Events, rate limits and Apps
//
// What the fake does that GitHub makes an event of is recorded as one,
// with ids that grow (as numbers: they cross a power of ten early) and
// the webhook's payload for the same action without repository, sender
// and organization, which the event has as repo, actor and org: a
// repository created (CreateEvent), an issue opened (IssuesEvent), a pull
// request opened or merged (PullRequestEvent, and the merge's PushEvent),
// a push (PushEvent, GitHub's shorter payload), a comment by the test or
// through the API (IssueCommentEvent); AddEvent records any other. The
// events API lists them newest first, 30 a page with a Link to the next,
// the newest 300 at most, with an ETag (If-None-Match of it is 304 Not
// Modified, which costs no request of the rate limit) and X-Poll-Interval
// (SetPollInterval). Every other answer counts against the rate limit and
// says so in X-RateLimit-Limit, -Remaining, -Used and -Reset; exhausted
// (SetRateLimit), a request is 403 "API rate limit exceeded" until the
// reset. With Options.App, POST /app/installations/{id}/access_tokens
// trades the App's JWT (RS256 by its key, iss its id, at most 10 minutes
// long) for an installation token, good for an hour, that authenticates
// as the token does.
//
// # Assertions and faults
//
// Every request answered is recorded (Calls), with its method, path,
// query, If-None-Match, status and time. Inject makes chosen requests fail (a status,
// e.g. 502), fail after doing what they asked (the comment is created but
// its answer is lost), or hang until the client goes away or the test
// releases them: the moments a handler can be killed or retried in.
//
// # Webhook deliveries
//
// Delivery.Send posts a payload as a GitHub webhook does: Content-Type
// application/json, X-GitHub-Event, X-GitHub-Delivery (a new UUID unless
// given: GitHub keeps it on a redelivery), X-GitHub-Hook-ID, a
// GitHub-Hookshot User-Agent, and X-Hub-Signature-256 = "sha256=" and the
// hex HMAC-SHA256 of the body with the webhook's secret (Sign). A bad
// signature, another content type or no signature at all can be sent on
// purpose. IssueCommentEvent builds the payload GitHub sends when someone
// comments.
//
// # As a command
//
// Serve starts a Server on a listener, for cmd/githubfake (go run
// ./cmd/githubfake): with Options.Control it serves the control API
// under ControlPath, which sets up and reads the world over HTTP, and
// sends the signed delivery a comment makes (control.go); a misuse
// there is that request's 400 rather than a failed test.
//
// # Not faked
//
// Conditional requests on other endpoints than events, secondary rate
// limits (Inject a 403 or 429 with a Retry-After Header), GraphQL, branches other than
// main, squash and rebase merges, and every endpoint not listed above
// (answered 404). The server is plain HTTP on loopback.
package githubfake
