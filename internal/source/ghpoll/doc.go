// Package ghpoll is the githubPoll source: a source.Consumer that polls a
// repository's or an organization's events through GitHub's REST API
// (GET /repos/{owner}/{repo}/events, GET /orgs/{org}/events), for a
// cluster that cannot receive GitHub's webhooks.
//
// Contracts, beside source.Consumer's:
//   - Each poll is a conditional request: the first page's ETag from the
//     last poll that was delivered whole is sent as If-None-Match, and a
//     304 Not Modified, which GitHub does not count against the rate
//     limit, delivers nothing.
//   - Polls are max(interval, X-Poll-Interval) apart. A rate limit
//     exhausted (X-RateLimit-Remaining 0, a 403 or 429 saying so) or a
//     secondary one (Retry-After) is waited out until its reset, and
//     State.Err says until when. Any other failure is retried after
//     source.Backoff, and State.Err says what failed and what to check.
//   - The cursor, kept in the archive (source.Cursors) per operator and
//     source, is the id of the newest event delivered. A poll follows the
//     pages (Link rel="next", on GitHub's host only) back to the first
//     event whose id is at most the cursor (ids compare as integers),
//     delivers the newer ones oldest first, and moves the cursor past
//     each only once Sink.Deliver returned nil for it. A Deliver error
//     stops the poll: the event and the newer ones are delivered again
//     at the next. So a restart neither misses an event (GitHub lists
//     the newest 300 of the last 90 days: a source stopped for longer
//     than those cover misses the ones before) nor repeats one, but for
//     a crash between Deliver and the cursor's write, which delivers the
//     event again with its id (the sink recognises it).
//   - A source without a cursor starts as Since says: Now sets the
//     cursor to the newest event listed (or to 0 when none is) and
//     delivers nothing; All delivers every event listed.
//   - A message is the webhook's delivery of the same event, so that an
//     operator can switch between a webhook and a poll: Event is the
//     webhook's name of the event type (IssueCommentEvent is
//     issue_comment; an unknown type is its snake_case without "Event"),
//     Body is the event's payload with repository, sender and
//     organization (the event's repo, actor and org) added where the
//     payload has none, and a push's after (its head) where it has none.
//     ID is the event's id (in decimal without sign or leading zeros, as
//     GitHub writes it), and so is the x-github-delivery header: not
//     the webhook's GUID, which the events API does not give. Headers
//     are x-github-event and x-github-delivery; Published is the event's
//     created_at. The events API's payloads are the webhook's for most
//     types, shorter for some (a push's has no commits' details beyond
//     sha, author, message): a handler that reads more than those gets
//     less from a poll.
//   - Credentials are read through source.Secrets: a token at every poll
//     (a rotated one is picked up by the next); a GitHub App's private
//     key whenever an installation token is made, which is cached and
//     renewed 5 minutes before it expires, or after a 401.
//   - Run never logs; State says how the source stands, its Lag always
//     -1 (GitHub does not say how many events are unseen).
package ghpoll
