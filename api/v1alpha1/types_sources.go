package v1alpha1

import apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

// The types of spec.sources.

// Source is one source of events from outside the cluster.
type Source struct {
	// Name identifies the source in its URL, runs and idempotency keys. A
	// DNS label, unique in the Operator.
	Name string `json:"name"`
	// Webhook receives signed HTTP deliveries (GitHub's, or any
	// sender's) on POST /hooks/<operator>/<name>. Exactly one of Webhook,
	// CloudEvents, GitHubPoll, NATS and Kafka is set.
	Webhook *WebhookSource `json:"webhook,omitempty"`
	// CloudEvents receives CloudEvents over HTTP (structured or binary
	// mode) on POST /hooks/<operator>/<name>, verified as a webhook's.
	CloudEvents *CloudEventsSource `json:"cloudEvents,omitempty"`
	// GitHubPoll polls a repository's or organization's events through
	// GitHub's REST API: for a cluster that cannot receive webhooks.
	GitHubPoll *GitHubPollSource `json:"githubPoll,omitempty"`
	// NATS consumes a NATS JetStream stream through a durable consumer.
	NATS *NATSSource `json:"nats,omitempty"`
	// Kafka consumes Kafka topics in a consumer group.
	Kafka *KafkaSource `json:"kafka,omitempty"`
	// Filter is a CEL condition over payload (the delivery's JSON body),
	// headers (its headers, by lower-case name, first value) and event
	// (what the sender says it is: GitHub's X-GitHub-Event), e.g.
	// event == 'issue_comment' && payload.action == 'created'. A delivery
	// for which it is false is refused as filtered out (answered 200: the
	// sender did nothing wrong) and recorded so. Defaults to every
	// delivery.
	Filter string `json:"filter,omitempty"`
	// Object creates or patches one custom resource of the operator per
	// accepted delivery (server-side apply): a template of the object,
	// with ${...} CEL expressions over payload, headers, event and
	// delivery (id, source) in its strings. apiVersion and kind default
	// to the operator's resource; metadata.name is required, and
	// metadata.namespace for a namespaced resource.
	Object *apiextensionsv1.JSON `json:"object,omitempty"`
}

// WebhookSource is how deliveries are verified and read. Exactly one of
// GitHub, HMAC and Bearer is set: a source never accepts an unverified
// delivery.
type WebhookSource struct {
	// GitHub verifies GitHub's X-Hub-Signature-256 (HMAC-SHA256 of the
	// body with the webhook's secret); the delivery id is
	// X-GitHub-Delivery and the event X-GitHub-Event, unless
	// DeliveryHeader and EventHeader say otherwise.
	GitHub *WebhookSecret `json:"github,omitempty"`
	// HMAC verifies an HMAC-SHA256 of the body, hex-encoded, in a header
	// the sender names.
	HMAC *HMACVerification `json:"hmac,omitempty"`
	// Bearer verifies an Authorization: Bearer <token> header.
	Bearer *WebhookSecret `json:"bearer,omitempty"`
	// DeliveryHeader is the header holding the sender's delivery id, the
	// key by which a replay is recognised. Defaults to X-GitHub-Delivery
	// for GitHub; without one, replays are not recognised.
	DeliveryHeader string `json:"deliveryHeader,omitempty"`
	// EventHeader is the header naming the kind of event. Defaults to
	// X-GitHub-Event for GitHub.
	EventHeader string `json:"eventHeader,omitempty"`
	// MaxBodyBytes refuses a larger body (413). Defaults to 1048576
	// (1 MiB); at most 26214400 (25 MiB, GitHub's own cap).
	MaxBodyBytes int64 `json:"maxBodyBytes,omitempty"`
}

// CloudEventsSource receives CloudEvents over HTTP: one event per request,
// in structured mode (Content-Type application/cloudevents+json) or
// binary mode (ce-* headers, the data as the body). The delivery id is the
// event's source and id, by which a replay is recognised; the event is
// its type, the payload its data. Exactly one of HMAC and Bearer is set.
type CloudEventsSource struct {
	// HMAC verifies an HMAC-SHA256 of the body, hex-encoded, in a header
	// the sender names.
	HMAC *HMACVerification `json:"hmac,omitempty"`
	// Bearer verifies an Authorization: Bearer <token> header.
	Bearer *WebhookSecret `json:"bearer,omitempty"`
	// Batch is what a batch (application/cloudevents-batch+json) does:
	// Refuse (the default: 415, the sender sends them one by one) or
	// Split (each event of the batch is a delivery of its own).
	Batch string `json:"batch,omitempty"`
	// MaxBodyBytes refuses a larger body (413). Defaults to 1048576
	// (1 MiB); at most 26214400 (25 MiB).
	MaxBodyBytes int64 `json:"maxBodyBytes,omitempty"`
}

// CloudEvents batch modes.
const (
	BatchRefuse = "Refuse"
	BatchSplit  = "Split"
)

// GitHubPollSource polls GitHub's events API (GET /repos/{owner}/{repo}/
// events, or /orgs/{org}/events) with conditional requests, honouring
// X-Poll-Interval and the rate limit. Each GitHub event is a delivery
// with the webhook's event name (issue_comment for an IssueCommentEvent)
// and a payload shaped as the webhook's (the event's payload, with
// repository, organization and sender), its id the event's id. The
// cursor is kept in the run archive: a restart neither misses nor
// repeats an event. Exactly one of Repository and Organization is set,
// and exactly one of TokenSecretRef and App.
type GitHubPollSource struct {
	// Repository is owner/name.
	Repository string `json:"repository,omitempty"`
	// Organization is an organization's login.
	Organization string `json:"organization,omitempty"`
	// TokenSecretRef holds a token (a fine-grained or classic personal
	// access token) that can read the repository's events.
	TokenSecretRef *SecretKeySelector `json:"tokenSecretRef,omitempty"`
	// App authenticates as a GitHub App installation.
	App *GitHubApp `json:"app,omitempty"`
	// APIURL is GitHub's REST API. Defaults to https://api.github.com;
	// GitHub Enterprise Server's is https://HOST/api/v3.
	APIURL string `json:"apiURL,omitempty"`
	// Interval is the time between polls, e.g. 30s. Defaults to 60s; at
	// least 10s. GitHub's X-Poll-Interval lengthens it when larger.
	Interval string `json:"interval,omitempty"`
	// Since is where a source polled for the first time starts: Now (the
	// default: events from its first poll on) or All (every event GitHub
	// still lists, up to 300 and 90 days).
	Since string `json:"since,omitempty"`
}

// GitHubPollSource.Since values.
const (
	SinceNow = "Now"
	SinceAll = "All"
)

// GitHubApp is a GitHub App installation.
type GitHubApp struct {
	// AppID is the App's id.
	AppID int64 `json:"appID"`
	// InstallationID is the installation's id on the owner.
	InstallationID int64 `json:"installationID"`
	// PrivateKeySecretRef holds the App's private key (PEM).
	PrivateKeySecretRef SecretKeySelector `json:"privateKeySecretRef"`
}

// NATSSource consumes a JetStream stream through a durable pull
// consumer. A message is acknowledged once it is recorded in the run
// archive; the delivery id is <stream>:<stream sequence>, by which a
// redelivery is recognised; the event is the message's subject.
type NATSSource struct {
	// URL is the server, or several separated by commas, e.g.
	// nats://nats.messaging:4222.
	URL string `json:"url"`
	// Stream is the JetStream stream.
	Stream string `json:"stream"`
	// Subjects filter the stream's subjects (wildcards allowed); defaults
	// to all of them.
	Subjects []string `json:"subjects,omitempty"`
	// Consumer is the durable consumer's name, created when missing.
	// Defaults to opkit-<operator>-<source>.
	Consumer string `json:"consumer,omitempty"`
	// DeliverPolicy is where a new consumer starts: New (the default:
	// messages published from then on) or All.
	DeliverPolicy string `json:"deliverPolicy,omitempty"`
	// TokenSecretRef holds a token; CredsSecretRef a .creds file (JWT and
	// NKey seed); Username with PasswordSecretRef a user. At most one.
	TokenSecretRef    *SecretKeySelector `json:"tokenSecretRef,omitempty"`
	CredsSecretRef    *SecretKeySelector `json:"credsSecretRef,omitempty"`
	Username          string             `json:"username,omitempty"`
	PasswordSecretRef *SecretKeySelector `json:"passwordSecretRef,omitempty"`
	// TLS connects over TLS.
	TLS *SourceTLS `json:"tls,omitempty"`
	// MaxBodyBytes refuses a larger message. Defaults to 1048576.
	MaxBodyBytes int64 `json:"maxBodyBytes,omitempty"`
}

// NATSSource.DeliverPolicy values.
const (
	DeliverNew = "New"
	DeliverAll = "All"
)

// KafkaSource consumes topics in a consumer group. A record's offset is
// committed once it is recorded in the run archive; the delivery id is
// <topic>:<partition>:<offset>, by which a redelivery is recognised; the
// event is the topic, and the record's key is the header kafka-key.
type KafkaSource struct {
	// Brokers are the seed brokers, host:port.
	Brokers []string `json:"brokers"`
	// Topics are the topics consumed.
	Topics []string `json:"topics"`
	// Group is the consumer group. Defaults to opkit-<operator>-<source>.
	Group string `json:"group,omitempty"`
	// StartOffset is where a group without committed offsets starts:
	// Latest (the default) or Earliest.
	StartOffset string `json:"startOffset,omitempty"`
	// SASL authenticates to the brokers.
	SASL *KafkaSASL `json:"sasl,omitempty"`
	// TLS connects over TLS.
	TLS *SourceTLS `json:"tls,omitempty"`
	// MaxBodyBytes refuses a larger record value. Defaults to 1048576.
	MaxBodyBytes int64 `json:"maxBodyBytes,omitempty"`
}

// KafkaSource.StartOffset values.
const (
	OffsetLatest   = "Latest"
	OffsetEarliest = "Earliest"
)

// KafkaSASL is a SASL mechanism with a user and a password.
type KafkaSASL struct {
	// Mechanism is PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.
	Mechanism         string            `json:"mechanism"`
	Username          string            `json:"username"`
	PasswordSecretRef SecretKeySelector `json:"passwordSecretRef"`
}

// SourceTLS connects a source over TLS, verifying the server against the
// system's roots or CASecretRef's.
type SourceTLS struct {
	// CASecretRef holds the CA certificates (PEM) that sign the server's.
	CASecretRef *SecretKeySelector `json:"caSecretRef,omitempty"`
}

// MaxWebhookBody is the largest MaxBodyBytes: GitHub's own cap on a
// delivery's payload.
const MaxWebhookBody = 25 << 20

// DefaultWebhookBody is MaxBodyBytes's default.
const DefaultWebhookBody = 1 << 20

// WebhookSecret names the Secret key holding a webhook's shared secret.
// The Secret is read again when it changes: rotating it needs no restart.
type WebhookSecret struct {
	SecretRef SecretKeySelector `json:"secretRef"`
}

// HMACVerification is a generic HMAC-SHA256 signature header.
type HMACVerification struct {
	// Header holds the signature, e.g. X-Signature.
	Header string `json:"header"`
	// Prefix comes before the hex digest in the header, e.g. "sha256=".
	Prefix    string            `json:"prefix,omitempty"`
	SecretRef SecretKeySelector `json:"secretRef"`
}
