package v1alpha1

import (
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// Patterns the API server enforces on an Operator; internal/definition
// checks the same and more, with messages naming the field.
const (
	// GroupPattern is a DNS subdomain with at least one dot.
	GroupPattern = `^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)+$`
	// KindPattern is a CamelCase identifier.
	KindPattern = `^[A-Z][A-Za-z0-9]*$`
	// ChildIDPattern is a CEL-friendly identifier.
	ChildIDPattern = `^[a-z][a-zA-Z0-9_]*$`
	// HandlerNamePattern is a DNS label.
	HandlerNamePattern = `^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// VersionPattern is a Kubernetes version name: v1, v1beta2, v2alpha1.
	VersionPattern = `^v[1-9][0-9]*((alpha|beta)[1-9][0-9]*)?$`
	// StateNamePattern is a state's name (and a transition's reason): an
	// identifier starting with an upper-case letter, like NeedsAttention.
	StateNamePattern = `^[A-Z][A-Za-z0-9_]*$`
)

func str(desc string) apiextensionsv1.JSONSchemaProps {
	return apiextensionsv1.JSONSchemaProps{Type: "string", Description: desc}
}

func strList(desc string, maxItems int64) apiextensionsv1.JSONSchemaProps {
	return apiextensionsv1.JSONSchemaProps{
		Type: "array", Description: desc, MaxItems: ptr.To(maxItems),
		Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &apiextensionsv1.JSONSchemaProps{Type: "string", MaxLength: ptr.To(int64(4096))}},
	}
}

func freeObject(desc string) apiextensionsv1.JSONSchemaProps {
	return apiextensionsv1.JSONSchemaProps{Type: "object", Description: desc, XPreserveUnknownFields: ptr.To(true)}
}

// CustomResourceDefinition returns the CRD of operators.opkit.dev, which
// opkit installs.
func CustomResourceDefinition() *apiextensionsv1.CustomResourceDefinition {
	group := str("API group of the custom resource, a DNS subdomain with at least one dot (e.g. demo.example.com).")
	group.Pattern, group.MaxLength = GroupPattern, ptr.To(int64(253))
	kind := str("CamelCase kind of the custom resource (e.g. Printer).")
	kind.Pattern, kind.MaxLength = KindPattern, ptr.To(int64(63))
	versionName := str("Version name, e.g. v1.")
	versionName.Pattern = VersionPattern
	childID := str("Name of the child in expressions: children.<id>.")
	childID.Pattern, childID.MaxLength = ChildIDPattern, ptr.To(int64(63))
	relatedID := str("Name of the related objects in expressions: related.<id>.")
	relatedID.Pattern, relatedID.MaxLength = ChildIDPattern, ptr.To(int64(63))
	template := func(desc string) apiextensionsv1.JSONSchemaProps {
		s := str(desc)
		s.MaxLength = ptr.To(int64(4096))
		return s
	}
	related := apiextensionsv1.JSONSchemaProps{
		Type:     "object",
		Required: []string{"id", "apiVersion", "kind"},
		Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"id":         relatedID,
			"apiVersion": str("API version of the kind, e.g. apps/v1."),
			"kind":       str("Kind, e.g. Deployment."),
			"name":       template("One object's name, a template over self, e.g. ${self.spec.deployment}."),
			"namespace":  template("Its namespace, a template over self; defaults to the custom resource's."),
			"namespaces": strList("The namespaces where the kind is read and watched for this reference; defaults to all.", 64),
			"selector": {
				Type: "object", Description: "Labels to match, each value a template over self: related.<id> is the list of matching objects.",
				MaxProperties:        ptr.To(int64(16)),
				AdditionalProperties: &apiextensionsv1.JSONSchemaPropsOrBool{Schema: ptr.To(template(""))},
			},
		},
		XValidations: apiextensionsv1.ValidationRules{{
			Rule:    "has(self.name) != has(self.selector)",
			Message: "set exactly one of name and selector",
		}},
	}

	printerColumn := apiextensionsv1.JSONSchemaProps{
		Type:     "object",
		Required: []string{"name", "type", "jsonPath"},
		Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"name":        str("Column header."),
			"type":        {Type: "string", Enum: enum("integer", "number", "string", "boolean", "date")},
			"format":      str("Optional OpenAPI format."),
			"description": str("Column description."),
			"priority":    {Type: "integer", Format: "int32"},
			"jsonPath":    str("JSON path in the object, e.g. .spec.text."),
		},
	}
	fieldConversion := apiextensionsv1.JSONSchemaProps{
		Type:     "object",
		Required: []string{"field"},
		Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"field":        str("Path of the field in this version, e.g. spec.size."),
			"storageField": str("Path of the field in the storage version; defaults to field."),
			"toStorage":    template("CEL expression over self (this version's value) and object giving the storage version's value; defaults to self."),
			"fromStorage":  template("CEL expression over self (the storage version's value) and object giving this version's value; defaults to self."),
		},
		XValidations: apiextensionsv1.ValidationRules{{
			Rule:    "has(self.toStorage) == has(self.fromStorage)",
			Message: "give toStorage and fromStorage together: each direction needs its own",
		}},
	}
	version := apiextensionsv1.JSONSchemaProps{
		Type:     "object",
		Required: []string{"name"},
		XValidations: apiextensionsv1.ValidationRules{{
			Rule:    "!(has(self.conversion) && has(self.storage) && self.storage)",
			Message: "the storage version is the hub every other version converts to and from: declare conversion on the other versions",
		}},
		Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"name":           versionName,
			"served":         {Type: "boolean", Description: "Whether the API serves this version. Defaults to true."},
			"storage":        {Type: "boolean", Description: "The version stored in etcd; defaults to true for a single version."},
			"schema":         freeObject("OpenAPI v3 schema of .spec."),
			"statusSchema":   freeObject("OpenAPI v3 object schema of the status fields handlers write."),
			"printerColumns": {Type: "array", MaxItems: ptr.To(int64(32)), Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &printerColumn}},
			"immutable":      strList("Fields that never change once an object is created, as dotted paths under spec (spec.region).", 64),
			"scale": {
				Type:     "object",
				Required: []string{"specReplicasPath", "statusReplicasPath"},
				Properties: map[string]apiextensionsv1.JSONSchemaProps{
					"specReplicasPath":   str("JSON path of the desired replicas, under .spec."),
					"statusReplicasPath": str("JSON path of the observed replicas, under .status."),
					"labelSelectorPath":  str("JSON path of the label selector, under .status."),
				},
			},
			"conversion": {
				Type:        "object",
				Description: "How objects of this version convert to and from the storage version.",
				Properties: map[string]apiextensionsv1.JSONSchemaProps{
					"fields": {Type: "array", MaxItems: ptr.To(int64(64)), Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &fieldConversion}},
				},
			},
		},
	}
	child := apiextensionsv1.JSONSchemaProps{
		Type:     "object",
		Required: []string{"id", "template"},
		Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"id":          childID,
			"template":    freeObject("The child object, with ${...} CEL expressions in its strings."),
			"includeWhen": strList("CEL expressions; the child exists only while all are true.", 16),
			"readyWhen":   strList("CEL expressions over the child as `self`; all true means ready.", 16),
			"recreate":    {Type: "boolean", Description: "Delete and re-create the child when its template changes."},
		},
	}
	handler := handlerSchema()
	selectorRequirement := apiextensionsv1.JSONSchemaProps{
		Type: "object", Required: []string{"key", "operator"},
		Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"key":      str("Label key."),
			"operator": {Type: "string", Enum: enum("In", "NotIn", "Exists", "DoesNotExist")},
			"values":   strList("Values, for In and NotIn.", 64),
		},
	}
	watch := apiextensionsv1.JSONSchemaProps{
		Type:        "object",
		Description: "Objects of any kind the operator reacts to without owning them.",
		Required:    []string{"apiVersion", "kind"},
		Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"apiVersion": str("API version of the kind, e.g. apps/v1."),
			"kind":       str("Kind, e.g. Deployment."),
			"namespaces": strList("Namespaces watched; defaults to all.", 64),
			"selector": {
				Type: "object", Description: "Label selector: only objects with these labels are watched.",
				Properties: map[string]apiextensionsv1.JSONSchemaProps{
					"matchLabels": {
						Type: "object", MaxProperties: ptr.To(int64(32)),
						AdditionalProperties: &apiextensionsv1.JSONSchemaPropsOrBool{Schema: ptr.To(str(""))},
					},
					"matchExpressions": {Type: "array", MaxItems: ptr.To(int64(32)), Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &selectorRequirement}},
				},
			},
			"filter":    template("CEL condition over self; objects for which it is false are not watched."),
			"finalizer": {Type: "boolean", Description: "Hold opkit's finalizer on each watched object, so that delete handlers run before it is gone. Defaults to false."},
		},
	}
	secretRef := apiextensionsv1.JSONSchemaProps{
		Type: "object", Required: []string{"namespace", "name", "key"},
		Description: "The Secret key holding the shared secret; read again when it changes.",
		Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"namespace": str("Namespace of the Secret."),
			"name":      str("Name of the Secret."),
			"key":       str("Key in the Secret."),
		},
	}
	webhookSecret := apiextensionsv1.JSONSchemaProps{
		Type: "object", Required: []string{"secretRef"},
		Properties: map[string]apiextensionsv1.JSONSchemaProps{"secretRef": secretRef},
	}
	header := func(desc string) apiextensionsv1.JSONSchemaProps {
		h := str(desc)
		h.MaxLength = ptr.To(int64(256))
		return h
	}
	optSecretRef := func(desc string) apiextensionsv1.JSONSchemaProps {
		r := secretRef
		r.Description = desc
		return r
	}
	hmac := apiextensionsv1.JSONSchemaProps{
		Type: "object", Required: []string{"header", "secretRef"},
		Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"header":    header("Header holding the hex HMAC-SHA256 of the body."),
			"prefix":    header("Text before the digest in the header, e.g. sha256=."),
			"secretRef": secretRef,
		},
	}
	maxBody := apiextensionsv1.JSONSchemaProps{Type: "integer", Format: "int64", Minimum: ptr.To(1.0), Maximum: ptr.To(float64(MaxWebhookBody)), Description: "Larger bodies are refused. Defaults to 1 MiB."}
	tls := apiextensionsv1.JSONSchemaProps{
		Type: "object", Description: "Connect over TLS, verifying the server against the system's roots or caSecretRef's.",
		Properties: map[string]apiextensionsv1.JSONSchemaProps{"caSecretRef": optSecretRef("The Secret key holding the CA certificates (PEM).")},
	}
	hostList := func(desc string) apiextensionsv1.JSONSchemaProps {
		l := strList(desc, 64)
		l.Items.Schema.MaxLength = ptr.To(int64(512))
		return l
	}
	source := apiextensionsv1.JSONSchemaProps{
		Type: "object", Required: []string{"name"},
		XValidations: apiextensionsv1.ValidationRules{{
			Rule:    "[has(self.webhook), has(self.cloudEvents), has(self.githubPoll), has(self.nats), has(self.kafka)].filter(x, x).size() == 1",
			Message: "set exactly one of webhook, cloudEvents, githubPoll, nats and kafka",
		}},
		Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"name": {Type: "string", MaxLength: ptr.To(int64(63)), Pattern: HandlerNamePattern, Description: "Names the source in its URL, /hooks/<operator>/<name>; a DNS label."},
			"webhook": {
				Type:        "object",
				Description: "HTTP deliveries, verified by exactly one of github, hmac and bearer.",
				Properties: map[string]apiextensionsv1.JSONSchemaProps{
					"github":         webhookSecret,
					"hmac":           hmac,
					"bearer":         webhookSecret,
					"deliveryHeader": header("Header holding the delivery id; defaults to X-GitHub-Delivery for github."),
					"eventHeader":    header("Header naming the event; defaults to X-GitHub-Event for github."),
					"maxBodyBytes":   maxBody,
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
					"hmac":         hmac,
					"bearer":       webhookSecret,
					"batch":        {Type: "string", Enum: []apiextensionsv1.JSON{{Raw: []byte(`"Refuse"`)}, {Raw: []byte(`"Split"`)}}, Description: "What a batch does: Refuse (415, the default) or Split (each event a delivery)."},
					"maxBodyBytes": maxBody,
				},
				XValidations: apiextensionsv1.ValidationRules{{
					Rule:    "[has(self.hmac), has(self.bearer)].filter(x, x).size() == 1",
					Message: "set exactly one of hmac and bearer: a source never accepts an unverified delivery",
				}},
			},
			"githubPoll": {
				Type:        "object",
				Description: "GitHub's events of a repository or organization, polled through the REST API.",
				Properties: map[string]apiextensionsv1.JSONSchemaProps{
					"repository":     {Type: "string", MaxLength: ptr.To(int64(200)), Description: "owner/name."},
					"organization":   {Type: "string", MaxLength: ptr.To(int64(100)), Description: "An organization's login."},
					"tokenSecretRef": optSecretRef("The Secret key holding a token that can read the events."),
					"app": {
						Type: "object", Required: []string{"appID", "installationID", "privateKeySecretRef"},
						Description: "A GitHub App installation.",
						Properties: map[string]apiextensionsv1.JSONSchemaProps{
							"appID":               {Type: "integer", Format: "int64", Minimum: ptr.To(1.0)},
							"installationID":      {Type: "integer", Format: "int64", Minimum: ptr.To(1.0)},
							"privateKeySecretRef": optSecretRef("The Secret key holding the App's private key (PEM)."),
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
					"tokenSecretRef":    optSecretRef("The Secret key holding a token."),
					"credsSecretRef":    optSecretRef("The Secret key holding a .creds file."),
					"username":          {Type: "string", MaxLength: ptr.To(int64(256))},
					"passwordSecretRef": optSecretRef("The Secret key holding username's password."),
					"tls":               tls,
					"maxBodyBytes":      maxBody,
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
							"passwordSecretRef": optSecretRef("The Secret key holding the password."),
						},
					},
					"tls":          tls,
					"maxBodyBytes": maxBody,
				},
			},
			"filter": template("CEL condition over payload, headers and event; deliveries for which it is false are refused as filtered out."),
			"object": freeObject("A custom resource of the operator created or patched per accepted delivery, with ${...} CEL expressions over payload, headers, event and delivery."),
		},
	}
	spec := apiextensionsv1.JSONSchemaProps{
		Type: "object",
		XValidations: apiextensionsv1.ValidationRules{{
			Rule:    "!(has(self.resource) && has(self.watch))",
			Message: "set at most one of resource (a custom resource the operator owns) and watch (objects it reacts to)",
		}},
		Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"watch": watch,
			"resource": {
				Type:     "object",
				Required: []string{"group", "kind", "versions"},
				Properties: map[string]apiextensionsv1.JSONSchemaProps{
					"group":       group,
					"kind":        kind,
					"scope":       {Type: "string", Enum: enum(NamespaceScoped, ClusterScoped), Description: "Defaults to Namespaced."},
					"readVersion": {Type: "string", Pattern: VersionPattern, Description: "The version children, status and handlers are written against; the engine reads custom resources at it. Defaults to the storage version."},
					"names": {
						Type: "object",
						Properties: map[string]apiextensionsv1.JSONSchemaProps{
							"plural":     str("Defaults from the kind."),
							"singular":   str("Defaults from the kind."),
							"listKind":   str("Defaults to <Kind>List."),
							"shortNames": strList("Short names for kubectl.", 8),
							"categories": strList("Categories for kubectl get <category>.", 8),
						},
					},
					"versions": {
						Type: "array", MinItems: ptr.To(int64(1)), MaxItems: ptr.To(int64(16)),
						Items:        &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &version},
						XListType:    ptr.To("map"),
						XListMapKeys: []string{"name"},
					},
				},
				XValidations: apiextensionsv1.ValidationRules{{
					Rule:    "size(self.versions) == 1 || self.versions.filter(v, has(v.storage) && v.storage).size() == 1",
					Message: "exactly one version must set storage: true",
				}},
			},
			"related": {
				Type: "array", MaxItems: ptr.To(int64(16)),
				Items:        &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &related},
				XListType:    ptr.To("map"),
				XListMapKeys: []string{"id"},
			},
			"children": {
				Type: "array", MaxItems: ptr.To(int64(64)),
				Items:        &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &child},
				XListType:    ptr.To("map"),
				XListMapKeys: []string{"id"},
			},
			"status": {
				Type: "object", Description: "Status fields of the custom resource, each a CEL template.",
				MaxProperties:        ptr.To(int64(64)),
				AdditionalProperties: &apiextensionsv1.JSONSchemaPropsOrBool{Schema: &apiextensionsv1.JSONSchemaProps{Type: "string", MaxLength: ptr.To(int64(4096))}},
			},
			"handlers": {
				Type: "array", MaxItems: ptr.To(int64(32)),
				Items:        &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &handler},
				XListType:    ptr.To("map"),
				XListMapKeys: []string{"name"},
			},
			"sources": {
				Type: "array", MaxItems: ptr.To(int64(16)),
				Items:        &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &source},
				XListType:    ptr.To("map"),
				XListMapKeys: []string{"name"},
			},
			"states": {
				Type: "array", MaxItems: ptr.To(int64(64)),
				Description: "The life cycle of each custom resource: states, one initial, and the transitions between them (docs/states.md).",
				Items:       &apiextensionsv1.JSONSchemaPropsOrArray{Schema: ptr.To(stateSchema())},
			},
			"rollout": rolloutSchema(watch.Properties["selector"]),
		},
	}
	status := apiextensionsv1.JSONSchemaProps{
		Type: "object",
		Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"observedGeneration": {Type: "integer", Format: "int64"},
			"crd":                str("Name of the installed CRD."),
			"conditions": {
				Type:  "array",
				Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: ptr.To(freeObject("A metav1.Condition."))},
			},
		},
	}
	return &apiextensionsv1.CustomResourceDefinition{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "CustomResourceDefinition"},
		ObjectMeta: metav1.ObjectMeta{Name: "operators." + Group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: Group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{
				Plural: "operators", Singular: "operator", Kind: Kind, ListKind: Kind + "List",
				ShortNames: []string{"opk"}, Categories: []string{"opkit"},
			},
			Scope: apiextensionsv1.ClusterScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: Version, Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type:       "object",
					Required:   []string{"spec"},
					Properties: map[string]apiextensionsv1.JSONSchemaProps{"spec": spec, "status": status},
				}},
				Subresources: &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}},
				AdditionalPrinterColumns: []apiextensionsv1.CustomResourceColumnDefinition{
					{Name: "Kind", Type: "string", JSONPath: ".spec.resource.kind"},
					{Name: "Group", Type: "string", JSONPath: ".spec.resource.group"},
					{Name: "Watches", Type: "string", JSONPath: ".spec.watch.kind"},
					{Name: "Ready", Type: "string", JSONPath: `.status.conditions[?(@.type=="Ready")].status`},
					{Name: "Reason", Type: "string", JSONPath: `.status.conditions[?(@.type=="Ready")].reason`},
					{Name: "Age", Type: "date", JSONPath: ".metadata.creationTimestamp"},
				},
			}},
		},
	}
}

// durationRE is a Go duration of whole or decimal units, e.g. 30s, 1.5h or
// 1h30m, or 0.
const durationRE = `0|(([0-9]+(\.[0-9]+)?)(ns|us|µs|ms|s|m|h))+`

// DurationPattern matches a Go duration (durationRE).
const DurationPattern = `^(` + durationRE + `)$`

// EveryPattern matches schedule.every: a Go duration or a ${...} template.
const EveryPattern = `^(` + durationRE + `|.*\$\{.*\}.*)$`

func duration(desc string) apiextensionsv1.JSONSchemaProps {
	d := str(desc + " A Go duration, e.g. 30s or 5m.")
	d.MaxLength = ptr.To(int64(32))
	d.Pattern = DurationPattern
	return d
}

func handlerSchema() apiextensionsv1.JSONSchemaProps {
	name := str("Names the handler in runs and idempotency keys; a DNS label.")
	name.Pattern, name.MaxLength = HandlerNamePattern, ptr.To(int64(63))
	triggers := []string{OnCreate, OnUpdate, OnDelete, OnResume, OnSchedule, OnWhen, OnEvent, OnEnter, OnExit, OnValidate, OnMutate}
	on := apiextensionsv1.JSONSchemaProps{
		Type: "array", MinItems: ptr.To(int64(1)), MaxItems: ptr.To(int64(5)),
		Description: "Triggers: create, update, delete, resume, schedule, when, event, enter, exit; or validate or mutate alone (admission).",
		Items:       &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &apiextensionsv1.JSONSchemaProps{Type: "string", Enum: enum(triggers...)}},
		XListType:   ptr.To("set"),
	}
	env := apiextensionsv1.JSONSchemaProps{
		Type: "array", MaxItems: ptr.To(int64(64)),
		Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &apiextensionsv1.JSONSchemaProps{
			Type: "object", Required: []string{"name"},
			Properties: map[string]apiextensionsv1.JSONSchemaProps{
				"name": str("Variable name."), "value": str("Literal value."),
				"valueFrom": {
					Type: "object", Required: []string{"secretKeyRef"},
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"secretKeyRef": {
							Type: "object", Required: []string{"name", "key"},
							Properties: map[string]apiextensionsv1.JSONSchemaProps{
								"namespace": str("Namespace of the Secret; defaults to the object's."),
								"name":      str("Name of the Secret."),
								"key":       str("Key in the Secret."),
							},
						},
					},
				},
			},
		}},
	}
	return apiextensionsv1.JSONSchemaProps{
		Type: "object",
		// on is required by a rule, not here: a missing required field
		// stops the API server before it evaluates any rule, and a bare on
		// (true) would then be answered "on: Required value" alone.
		Required: []string{"name"},
		Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"name":    name,
			"on":      on,
			"fields":  strList("Update fires only when one of these dotted paths changed, e.g. spec.replicas.", 32),
			"sources": strList("For the event trigger: the sources whose deliveries run the handler; defaults to all.", 16),
			"states":  strList("For the enter and exit triggers: the states whose entering or leaving runs the handler.", 64),
			"when": {
				Type: "string", MaxLength: ptr.To(int64(4096)),
				Description: "For the when trigger: a CEL condition over self, children and related; the handler runs once each time it becomes true.",
			},
			"schedule": {
				Type: "object",
				Properties: map[string]apiextensionsv1.JSONSchemaProps{
					"every": {
						Type:        "string",
						Description: "Interval between runs: a Go duration, e.g. 30s or 5m, or a ${...} template over the object that gives one.",
						MaxLength:   ptr.To(int64(1024)),
						Pattern:     EveryPattern,
					},
					"cron":     str("Cron expression, five fields, in timeZone."),
					"timeZone": str("IANA time zone of cron, e.g. Europe/Prague; defaults to UTC."),
					"catchUp": {
						Type: "string", Enum: enum(CatchUpSkip, CatchUpOnce),
						Description: "Operator-wide schedules: after downtime, skip the missed slots or run once for the latest. Defaults to Once.",
					},
				},
			},
			"timeout": duration("Bound of one run; defaults to 5m."),
			// A list, as on is: a rule reads only a typed field, and a value
			// of another type stops the API server before any rule.
			bareOnKey: {
				Type: "array", Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &apiextensionsv1.JSONSchemaProps{Type: "string"}},
				Description: "Never valid: the on of a YAML 1.1 tool (kubectl, Helm, Argo CD, Flux), which reads a bare on key as true. Declared so that a rule can say how to write it, where an unknown field is only named.",
			},
			"admission": {
				Type:        "object",
				Description: "How the API server calls a handler on validate or mutate.",
				Properties: map[string]apiextensionsv1.JSONSchemaProps{
					"operations": {
						Type: "array", MaxItems: ptr.To(int64(3)), XListType: ptr.To("set"),
						Description: "CREATE, UPDATE, DELETE; defaults to CREATE and UPDATE.",
						Items:       &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &apiextensionsv1.JSONSchemaProps{Type: "string", Enum: enum(OperationCreate, OperationUpdate, OperationDelete)}},
					},
					"failurePolicy": {
						Type: "string", Enum: enum(FailurePolicyFail, FailurePolicyIgnore),
						Description: "The answer when the handler gives none in time: Fail denies, Ignore allows. Defaults to Fail.",
					},
					"timeout": duration("How long the API server waits, 1s to 30s; defaults to 10s."),
					"matchConditions": {
						Type: "array", MaxItems: ptr.To(int64(63)),
						Description: "CEL conditions the API server checks before calling the handler; at most 63 (opkit adds one).",
						Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &apiextensionsv1.JSONSchemaProps{
							Type: "object", Required: []string{"name", "expression"},
							Properties: map[string]apiextensionsv1.JSONSchemaProps{
								"name":       {Type: "string", MaxLength: ptr.To(int64(63))},
								"expression": {Type: "string", MaxLength: ptr.To(int64(4096))},
							},
						}},
					},
				},
			},
			"retry": {
				Type: "object",
				Properties: map[string]apiextensionsv1.JSONSchemaProps{
					"maxAttempts":  {Type: "integer", Format: "int32", Minimum: ptr.To(1.0), Maximum: ptr.To(1000.0)},
					"initialDelay": duration("Delay after the first failure; defaults to 1s."),
					"maxDelay":     duration("Largest delay; defaults to 5m."),
					"factor":       {Type: "number", Minimum: ptr.To(1.0), Maximum: ptr.To(10.0)},
					"jitter":       {Type: "number", Minimum: ptr.To(0.0), Maximum: ptr.To(1.0)},
				},
			},
			"exec": {
				Type: "object", Required: []string{"command"},
				Properties: map[string]apiextensionsv1.JSONSchemaProps{
					"command":    strList("The argv; never run through a shell.", 256),
					"image":      str("Container image the command runs in, in a warm runner Pod (in a cluster); without runners the engine's host runs it."),
					"env":        env,
					"workingDir": str("Working directory."),
					"serviceAccount": {
						Type: "object", Required: []string{"name"},
						Description: "Access to the cluster as this ServiceAccount: a token per run, in a kubeconfig named by $KUBECONFIG.",
						Properties: map[string]apiextensionsv1.JSONSchemaProps{
							"namespace": str("Defaults to the object's; required for a cluster-scoped resource."),
							"name":      str("The ServiceAccount."),
						},
					},
					"mode": {
						Type: "string", Enum: enum("Run", "Serve"),
						Description: "Run (the default): a process per run. Serve: processes that outlive runs, a binding context per line on stdin, a result per line on stdout.",
					},
					"processes": {
						Type: "integer", Format: "int32", Minimum: ptr.To(1.0), Maximum: ptr.To(64.0),
						Description: "How many processes of a Serve handler may run at once; defaults to 4.",
					},
				},
			},
			"job": {
				Type: "object", Required: []string{"image"},
				Properties: map[string]apiextensionsv1.JSONSchemaProps{
					"namespace":                    str("Namespace of the Job; defaults to the object's."),
					"image":                        str("Container image."),
					"command":                      strList("Entrypoint.", 256),
					"args":                         strList("Arguments.", 256),
					"env":                          env,
					"serviceAccountName":           str("Service account of the pod."),
					"automountServiceAccountToken": {Type: "boolean"},
					"ttlSecondsAfterFinished":      {Type: "integer", Format: "int32", Minimum: ptr.To(0.0)},
				},
			},
			"http": {
				Type: "object", Required: []string{"url"},
				Properties: map[string]apiextensionsv1.JSONSchemaProps{
					"url":      str("URL the binding context is posted to."),
					"caBundle": str("PEM certificates to trust."),
					"tokenSecret": {
						Type: "object", Required: []string{"namespace", "name", "key"},
						Properties: map[string]apiextensionsv1.JSONSchemaProps{
							"namespace": str("Namespace of the Secret."), "name": str("Name of the Secret."), "key": str("Key of the token."),
						},
					},
				},
			},
		},
		XValidations: apiextensionsv1.ValidationRules{{
			Rule:    "[has(self.exec), has(self.job), has(self.http)].filter(x, x).size() == 1",
			Message: "a handler has exactly one of exec, job and http",
		}, {
			Rule:      "has(self.on) || has(self.__true__)",
			Message:   "the triggers that run the handler: one or more of " + strings.Join(triggers, ", "),
			FieldPath: ".on",
			Reason:    ptr.To(apiextensionsv1.FieldValueRequired),
		}, {
			// CEL escapes a property named like a keyword: true is __true__.
			Rule:      "!has(self.__true__)",
			Message:   BareOnMessage,
			FieldPath: "." + bareOnKey,
			Reason:    ptr.To(apiextensionsv1.FieldValueForbidden),
		}},
	}
}

// bareOnKey is the key a handler's on: becomes in a YAML 1.1 parser
// (kubectl's, Helm's, Argo CD's, Flux's), which reads a bare on as the
// boolean true; YAML 1.2 parsers, opkit's among them, read it as "on".
const bareOnKey = "true"

// BareOnMessage is what the Operator CRD and opkit lint say of a bare on:
// key: how to write it so that every YAML parser reads it as "on".
const BareOnMessage = `write "on": quoted: YAML 1.1 tools (kubectl) read a bare on as true`

// stateSchema is the schema of one of spec.states.
func stateSchema() apiextensionsv1.JSONSchemaProps {
	name := func(desc string) apiextensionsv1.JSONSchemaProps {
		s := str(desc)
		s.Pattern, s.MaxLength = StateNamePattern, ptr.To(int64(63))
		return s
	}
	// A target is checked by opkit against the states declared, with a
	// message that names them.
	target := func(desc string) apiextensionsv1.JSONSchemaProps {
		s := str(desc)
		s.MaxLength = ptr.To(int64(256))
		return s
	}
	reason := func(desc string) apiextensionsv1.JSONSchemaProps {
		s := str(desc)
		s.MaxLength = ptr.To(int64(63))
		return s
	}
	long := func(desc string, n int64) apiextensionsv1.JSONSchemaProps {
		s := str(desc)
		s.MaxLength = ptr.To(n)
		return s
	}
	transition := apiextensionsv1.JSONSchemaProps{
		Type: "object", Required: []string{"to"},
		Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"to":          target("The state it leads to."),
			"when":        long("The guard: a CEL condition over self, children, related and run; defaults to always. Not allowed from a state that needsPerson.", 4096),
			"reason":      reason("Recorded with the transition, a CamelCase word. Defaults to GuardHeld for a guarded transition, Unconditional for one without a guard, Decided for a person's choice."),
			"description": long("What this choice does, shown to the person deciding.", 1024),
			"set": {
				Type: "object", Description: "Status fields written with the transition, each a CEL template over self, children, related and run.",
				MaxProperties:        ptr.To(int64(16)),
				AdditionalProperties: &apiextensionsv1.JSONSchemaPropsOrBool{Schema: &apiextensionsv1.JSONSchemaProps{Type: "string", MaxLength: ptr.To(int64(4096))}},
			},
		},
	}
	return apiextensionsv1.JSONSchemaProps{
		Type: "object", Required: []string{"name"},
		Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"name":    name("The state's name, an identifier starting with an upper-case letter (e.g. Ready)."),
			"initial": {Type: "boolean", Description: "The state a new object starts in; exactly one state has it."},
			"final":   {Type: "boolean", Description: "A state with no way out."},
			"needsPerson": {
				Type: "object", Required: []string{"question"},
				Description: "The state waits for a person's decision (opkit decide); its transitions are the choices.",
				Properties: map[string]apiextensionsv1.JSONSchemaProps{
					"question": long("What the person is asked.", 1024),
				},
			},
			"transitions": {
				Type: "array", MaxItems: ptr.To(int64(32)),
				Description: "Ways out of the state, tried in order: the first whose guard holds is taken.",
				Items:       &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &transition},
			},
			"timeout": {
				Type: "object", Required: []string{"after", "to"},
				Description: "Leaves the state for another when the object has been in it this long.",
				Properties: map[string]apiextensionsv1.JSONSchemaProps{
					"after":  duration("At least 1s."),
					"to":     target("The state it leads to."),
					"reason": reason("Recorded with the transition; defaults to Timeout."),
				},
			},
			"refuses": strList("Dotted paths (spec, spec.version) that cannot change while an object is in the state.", 32),
		},
	}
}

func enum(values ...string) []apiextensionsv1.JSON {
	out := make([]apiextensionsv1.JSON, len(values))
	for i, v := range values {
		out[i] = apiextensionsv1.JSON{Raw: []byte(`"` + v + `"`)}
	}
	return out
}

// rolloutSchema is spec.rollout's, with selector the label selector's.
func rolloutSchema(selector apiextensionsv1.JSONSchemaProps) apiextensionsv1.JSONSchemaProps {
	selector.Description = "Moves the objects with these labels (a canary)."
	step := apiextensionsv1.JSONSchemaProps{
		Type: "object",
		Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"count":    {Type: "integer", Format: "int32", Minimum: ptr.To(1.0), Description: "Moves objects until this many are on the new definition."},
			"percent":  {Type: "integer", Format: "int32", Minimum: ptr.To(1.0), Maximum: ptr.To(100.0), Description: "Moves objects until this percentage of them (rounded up) is on the new definition."},
			"selector": selector,
		},
		XValidations: apiextensionsv1.ValidationRules{{
			Rule:    "[has(self.count), has(self.percent), has(self.selector)].filter(x, x).size() == 1",
			Message: "set exactly one of count, percent and selector",
		}},
	}
	return apiextensionsv1.JSONSchemaProps{
		Type:        "object",
		Description: "A change of the definition reaches the custom resources in steps, pausing when moved objects go unhealthy (docs/changing-operators.md).",
		Required:    []string{"steps"},
		Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"steps": {
				Type: "array", MinItems: ptr.To(int64(1)), MaxItems: ptr.To(int64(16)),
				Description: "The objects on the new definition after each step, counting those before; 100 percent is implied last.",
				Items:       &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &step},
			},
			"settle": duration("How long the objects moved so far must stay healthy before the next step. Defaults to 30s."),
		},
	}
}
