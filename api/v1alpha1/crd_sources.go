package v1alpha1

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/utils/ptr"
)

// The schemas of spec.sources in the Operator CRD.

// secretRef is the schema of a Secret key a source reads.
func secretRef(desc string) apiextensionsv1.JSONSchemaProps {
	return apiextensionsv1.JSONSchemaProps{
		Type: "object", Required: []string{"namespace", "name", "key"},
		Description: desc,
		Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"namespace": str("Namespace of the Secret."),
			"name":      str("Name of the Secret."),
			"key":       str("Key in the Secret."),
		},
	}
}

// sharedSecret is the Secret key holding a source's shared secret.
func sharedSecret() apiextensionsv1.JSONSchemaProps {
	return secretRef("The Secret key holding the shared secret; read again when it changes.")
}

// webhookSecret is a verification of deliveries by a shared secret alone
// (github, bearer).
func webhookSecret() apiextensionsv1.JSONSchemaProps {
	return apiextensionsv1.JSONSchemaProps{
		Type: "object", Required: []string{"secretRef"},
		Properties: map[string]apiextensionsv1.JSONSchemaProps{"secretRef": sharedSecret()},
	}
}

// header is the schema of an HTTP header's name.
func header(desc string) apiextensionsv1.JSONSchemaProps {
	h := str(desc)
	h.MaxLength = ptr.To(int64(256))
	return h
}

// hmacSchema is a verification of deliveries by an HMAC-SHA256 of the
// body.
func hmacSchema() apiextensionsv1.JSONSchemaProps {
	return apiextensionsv1.JSONSchemaProps{
		Type: "object", Required: []string{"header", "secretRef"},
		Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"header":    header("Header holding the hex HMAC-SHA256 of the body."),
			"prefix":    header("Text before the digest in the header, e.g. sha256=."),
			"secretRef": sharedSecret(),
		},
	}
}

// maxBody is the schema of a source's maxBodyBytes.
func maxBody() apiextensionsv1.JSONSchemaProps {
	return apiextensionsv1.JSONSchemaProps{Type: "integer", Format: "int64", Minimum: ptr.To(1.0), Maximum: ptr.To(float64(MaxWebhookBody)), Description: "Larger bodies are refused. Defaults to 1 MiB."}
}

// tlsSchema is a consumed source's TLS.
func tlsSchema() apiextensionsv1.JSONSchemaProps {
	return apiextensionsv1.JSONSchemaProps{
		Type: "object", Description: "Connect over TLS, verifying the server against the system's roots or caSecretRef's.",
		Properties: map[string]apiextensionsv1.JSONSchemaProps{"caSecretRef": secretRef("The Secret key holding the CA certificates (PEM).")},
	}
}

// hostList is a list of hosts, topics or subjects.
func hostList(desc string) apiextensionsv1.JSONSchemaProps {
	l := strList(desc, 64)
	l.Items.Schema.MaxLength = ptr.To(int64(512))
	return l
}

// sourceSchema is the schema of an item of spec.sources.
func sourceSchema() apiextensionsv1.JSONSchemaProps {
	return apiextensionsv1.JSONSchemaProps{
		Type: "object", Required: []string{"name"},
		XValidations: apiextensionsv1.ValidationRules{{
			Rule:    "[has(self.webhook), has(self.cloudEvents), has(self.githubPoll), has(self.nats), has(self.kafka)].filter(x, x).size() == 1",
			Message: "set exactly one of webhook, cloudEvents, githubPoll, nats and kafka",
		}},
		Properties: with(consumedSources(), map[string]apiextensionsv1.JSONSchemaProps{
			"name": {Type: "string", MaxLength: ptr.To(int64(63)), Pattern: HandlerNamePattern, Description: "Names the source in its URL, /hooks/<operator>/<name>; a DNS label."},
			"webhook": {
				Type:        "object",
				Description: "HTTP deliveries, verified by exactly one of github, hmac and bearer.",
				Properties: map[string]apiextensionsv1.JSONSchemaProps{
					"github":         webhookSecret(),
					"hmac":           hmacSchema(),
					"bearer":         webhookSecret(),
					"deliveryHeader": header("Header holding the delivery id; defaults to X-GitHub-Delivery for github."),
					"eventHeader":    header("Header naming the event; defaults to X-GitHub-Event for github."),
					"maxBodyBytes":   maxBody(),
				},
				XValidations: apiextensionsv1.ValidationRules{{
					Rule:    "[has(self.github), has(self.hmac), has(self.bearer)].filter(x, x).size() == 1",
					Message: "set exactly one of github, hmac and bearer: a source never accepts an unverified delivery",
				}},
			},
			"cloudEvents": {
				Type:        "object",
				Description: "CloudEvents over HTTP (structured or binary mode), verified by exactly one of hmac and bearer.",
				Properties: map[string]apiextensionsv1.JSONSchemaProps{
					"hmac":         hmacSchema(),
					"bearer":       webhookSecret(),
					"batch":        {Type: "string", Enum: []apiextensionsv1.JSON{{Raw: []byte(`"Refuse"`)}, {Raw: []byte(`"Split"`)}}, Description: "What a batch does: Refuse (415, the default) or Split (each event a delivery)."},
					"maxBodyBytes": maxBody(),
				},
				XValidations: apiextensionsv1.ValidationRules{{
					Rule:    "[has(self.hmac), has(self.bearer)].filter(x, x).size() == 1",
					Message: "set exactly one of hmac and bearer: a source never accepts an unverified delivery",
				}},
			},
			"filter": template("CEL condition over payload, headers and event; deliveries for which it is false are refused as filtered out."),
			"object": freeObject("A custom resource of the operator created or patched per accepted delivery, with ${...} CEL expressions over payload, headers, event and delivery."),
		}),
	}
}

// consumedSources are the properties of the sources the engine consumes:
// githubPoll, nats and kafka.
func consumedSources() map[string]apiextensionsv1.JSONSchemaProps {
	return map[string]apiextensionsv1.JSONSchemaProps{
		"githubPoll": {
			Type:        "object",
			Description: "GitHub's events of a repository or organization, polled through the REST API.",
			Properties: map[string]apiextensionsv1.JSONSchemaProps{
				"repository":     {Type: "string", MaxLength: ptr.To(int64(200)), Description: "owner/name."},
				"organization":   {Type: "string", MaxLength: ptr.To(int64(100)), Description: "An organization's login."},
				"tokenSecretRef": secretRef("The Secret key holding a token that can read the events."),
				"app": {
					Type: "object", Required: []string{"appID", "installationID", "privateKeySecretRef"},
					Description: "A GitHub App installation.",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"appID":               {Type: "integer", Format: "int64", Minimum: ptr.To(1.0)},
						"installationID":      {Type: "integer", Format: "int64", Minimum: ptr.To(1.0)},
						"privateKeySecretRef": secretRef("The Secret key holding the App's private key (PEM)."),
					},
				},
				"apiURL":   {Type: "string", MaxLength: ptr.To(int64(512)), Description: "GitHub's REST API; defaults to https://api.github.com."},
				"interval": {Type: "string", MaxLength: ptr.To(int64(32)), Description: "Time between polls, e.g. 30s; defaults to 60s, at least 10s."},
				"since":    {Type: "string", Enum: []apiextensionsv1.JSON{{Raw: []byte(`"Now"`)}, {Raw: []byte(`"All"`)}}, Description: "Where the first poll starts: Now (the default) or All."},
			},
		},
		"nats": {
			Type: "object", Required: []string{"url", "stream"},
			Description: "A NATS JetStream stream, through a durable consumer.",
			Properties: map[string]apiextensionsv1.JSONSchemaProps{
				"url":               {Type: "string", MaxLength: ptr.To(int64(2048)), Description: "The server, or several separated by commas."},
				"stream":            {Type: "string", MaxLength: ptr.To(int64(255)), Description: "The stream."},
				"subjects":          hostList("Subject filters; defaults to all of the stream's."),
				"consumer":          {Type: "string", MaxLength: ptr.To(int64(255)), Description: "The durable consumer; defaults to opkit-<operator>-<source>."},
				"deliverPolicy":     {Type: "string", Enum: []apiextensionsv1.JSON{{Raw: []byte(`"New"`)}, {Raw: []byte(`"All"`)}}, Description: "Where a new consumer starts: New (the default) or All."},
				"tokenSecretRef":    secretRef("The Secret key holding a token."),
				"credsSecretRef":    secretRef("The Secret key holding a .creds file."),
				"username":          {Type: "string", MaxLength: ptr.To(int64(256))},
				"passwordSecretRef": secretRef("The Secret key holding username's password."),
				"tls":               tlsSchema(),
				"maxBodyBytes":      maxBody(),
			},
		},
		"kafka": {
			Type: "object", Required: []string{"brokers", "topics"},
			Description: "Kafka topics, in a consumer group.",
			Properties: map[string]apiextensionsv1.JSONSchemaProps{
				"brokers":     hostList("Seed brokers, host:port."),
				"topics":      hostList("Topics consumed."),
				"group":       {Type: "string", MaxLength: ptr.To(int64(255)), Description: "The consumer group; defaults to opkit-<operator>-<source>."},
				"startOffset": {Type: "string", Enum: []apiextensionsv1.JSON{{Raw: []byte(`"Latest"`)}, {Raw: []byte(`"Earliest"`)}}, Description: "Where a group without offsets starts: Latest (the default) or Earliest."},
				"sasl": {
					Type: "object", Required: []string{"mechanism", "username", "passwordSecretRef"},
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"mechanism":         {Type: "string", Enum: []apiextensionsv1.JSON{{Raw: []byte(`"PLAIN"`)}, {Raw: []byte(`"SCRAM-SHA-256"`)}, {Raw: []byte(`"SCRAM-SHA-512"`)}}},
						"username":          {Type: "string", MaxLength: ptr.To(int64(256))},
						"passwordSecretRef": secretRef("The Secret key holding the password."),
					},
				},
				"tls":          tlsSchema(),
				"maxBodyBytes": maxBody(),
			},
		},
	}
}
